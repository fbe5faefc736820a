"""The keyboard shortcuts as the pages serve them (static/sagaboard/keys.js follows the markup):
each page's help dialog lists its own keys and only those, the controls a key triggers say
so with aria-keyshortcuts, and the queue's approve / reject keys open a dialog instead of
pressing the decision button. The keys themselves: tests/e2e/test_keyboard_browser.py."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sagaboard.actions.services import runner
from sagaboard.models import Project, Saga, Step
from tests.support.hitl import login, storebot_server_saga, waiting

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def help_dialog(page: str) -> str:
    found = re.search(r'<dialog id="keys-help".*?</dialog>', page, re.S)
    assert found, "no shortcuts dialog"
    return found.group(0)


def keys_of(page: str) -> list[str]:
    """The first key of each entry in the help dialog, in order."""
    return re.findall(r"<dt><kbd>([^<]+)</kbd>", help_dialog(page))


def keyed(page: str, key: str) -> list[str]:
    """The opening tags of the controls that say ``key`` triggers them."""
    return re.findall(
        rf'<(?:input|button|a)\b[^>]*aria-keyshortcuts="{re.escape(key)}"[^>]*>', page
    )


def get(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_every_page_lists_the_keys_of_every_page_and_links_where_g_goes(shop: Project) -> None:
    page = get(login("viewer", shop), "/overview/")
    assert keys_of(page) == ["/", "g", "g", "g", "g", "g", "g", "?", "Esc"]
    dialog = help_dialog(page)
    goes = dict(re.findall(r'<a href="([^"]+)" data-key-go="(\w)">', dialog))
    assert goes == {"/overview/": "o", "/": "s", "/approvals/": "a", "/attention/": "n",
                    "/tools/": "t", "/inbox/": "i"}  # fmt: skip
    # No search here: "/" leads to the list's, focused on arrival.
    assert '<a href="/#search-q" data-key-search>' in dialog
    footer = re.search(r'<footer class="page-foot" data-keys-hint hidden>.*?</footer>', page, re.S)
    assert footer and 'aria-keyshortcuts="?"' in footer.group(0)
    assert "Press <kbd>?</kbd> for keyboard shortcuts" in footer.group(0)


def test_a_logged_out_page_has_no_shortcuts(client: Client) -> None:
    page = get(client, "/login/")
    assert 'id="keys-help"' not in page and "page-foot" not in page


def test_the_saga_list_lists_its_row_keys_and_marks_its_search_and_rows(shop: Project) -> None:
    storebot_server_saga(shop, "s-1")
    page = get(login("viewer", shop), "/")
    assert keys_of(page) == ["j", "o", "/", "g", "g", "g", "g", "g", "g", "?", "Esc"]
    assert "Focus the search box" in help_dialog(page)
    (search,) = keyed(page, "/")
    assert 'id="search-q"' in search
    assert '<tbody id="saga-rows" data-limit="50" data-key-rows>' in page
    (opens,) = keyed(page, "o")
    assert 'href="/sagas/shop/s-1/"' in opens


def test_a_saga_page_lists_its_step_keys_and_marks_the_failed_steps(shop: Project) -> None:
    saga = storebot_server_saga(shop, "s-1", refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    page = get(login("viewer", shop), "/sagas/shop/s-1/")
    assert keys_of(page)[:4] == ["j", "o", ".", "c"]
    cards = dict(
        re.findall(r'<li id="(step-[^"]+)" class="step" data-key-row( data-key-failed)?>', page)
    )
    states = {f"step-{s.step_id}": s.state for s in Step.objects.filter(saga=Saga.objects.get())}
    assert set(cards) == set(states)
    failed = {anchor for anchor, flag in cards.items() if flag}
    assert failed == {
        a for a, state in states.items() if state in ("FAILED", "ROLLBACK_FAILED", "IN_DOUBT")
    }
    assert len(failed) == 2  # generate_label failed, return_item's undo failed
    (copy,) = keyed(page, "c")
    assert 'data-copy-text="s-1"' in copy


def test_the_queue_keys_open_a_dialog_and_never_press_a_decision(shop: Project) -> None:
    approval = waiting(shop)
    page = get(login("approver", shop), "/approvals/")
    assert keys_of(page)[:6] == ["j", "o", "a", "r", "x", "b"]
    for key in ("a", "r"):
        (button,) = keyed(page, key)
        assert "data-key-dialog" in button and 'type="submit"' in button
    (box,) = keyed(page, "x")
    assert f'value="{approval.pk}"' in box
    dialog = re.search(r'<dialog id="decide-dialog".*?</dialog>', page, re.S)
    assert dialog, "the decision dialog"
    # Enter in its reason submits nothing: its first submit button is the disabled guard.
    buttons = re.findall(r"<button[^>]*>", dialog.group(0))
    assert "enter-guard" in buttons[0] and "disabled" in buttons[0]
    assert 'required maxlength="2000"' in dialog.group(0)


def test_a_reader_of_the_queue_gets_no_decision_keys(shop: Project) -> None:
    waiting(shop)
    page = get(login("viewer", shop), "/approvals/")
    assert keys_of(page)[:2] == ["j", "o"]
    assert "a" not in keys_of(page) and 'id="decide-dialog"' not in page


def test_the_attention_page_lists_its_keys(shop: Project) -> None:
    saga = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    page = get(login("operator", shop), "/attention/")
    assert keys_of(page)[:4] == ["j", "o", "x", "b"]
    assert len(keyed(page, "x")) == len(keyed(page, "o")) == 1
