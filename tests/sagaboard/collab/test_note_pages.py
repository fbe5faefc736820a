"""Notes, owners and acknowledgements as people use them on the pages."""

from __future__ import annotations

import pytest
from django.test import Client

from sagaboard.actions.services import runner
from sagaboard.collab.services import notes
from sagaboard.models import AuditEntry, Note, Project, Saga, Step
from tests.support.hitl import person, storebot_server_saga

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def saga(shop: Project) -> Saga:
    return storebot_server_saga(shop, "storebot-1")


def browser(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_note_is_written_shown_as_markdown_and_flagged_on_its_step(
    shop: Project, saga: Saga
) -> None:
    ann = browser(person("ann", "operator", shop))
    answer = ann.post(
        f"/notes/saga/{saga.pk}/",
        {"body": "Carrier **down**; <script>alert(1)</script>", "step": "step-2"},
    )
    note = Note.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == f"/sagas/shop/storebot-1/#note-{note.pk}"
    page = ann.get("/sagas/shop/storebot-1/").content.decode()
    assert "Carrier <strong>down</strong>; &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page
    assert 'class="note-flag" href="#notes">1 note</a>' in page
    assert f'id="note-{note.pk}"' in page and "Edit</summary>" in page


def test_a_viewer_reads_notes_but_gets_no_forms(shop: Project, saga: Saga) -> None:
    notes.note_add(user=person("ann", "operator", shop), saga_pk=saga.pk, body="on it")
    vic = browser(person("vic", "viewer", shop))
    page = vic.get("/sagas/shop/storebot-1/").content.decode()
    assert "on it" in page and "Add note" not in page and "Assign to me" not in page
    answer = vic.post(f"/notes/saga/{saga.pk}/", {"body": "mine"})
    assert answer.status_code == 403 and Note.objects.count() == 1
    assert "notes need the operator or approver role" in answer.content.decode()


def test_a_bad_note_is_a_400_that_names_why_and_changes_nothing(shop: Project, saga: Saga) -> None:
    ann = browser(person("ann", "operator", shop))
    back = "/sagas/shop/storebot-1/#notes"
    answer = ann.post(f"/notes/saga/{saga.pk}/", {"body": "  ", "next": back})
    assert answer.status_code == 400
    text = answer.content.decode()
    assert "a note needs some text" in text and f'href="{back}"' in text
    assert not Note.objects.exists() and not AuditEntry.objects.exists()


def test_editing_shows_the_history_and_only_the_author_sees_edit(shop: Project, saga: Saga) -> None:
    ann_user = person("ann", "operator", shop)
    note = notes.note_add(user=ann_user, saga_pk=saga.pk, body="first")
    ann = browser(ann_user)
    assert ann.post(f"/notes/{note.pk}/edit/", {"body": "second"}).status_code == 302
    page = ann.get("/sagas/shop/storebot-1/").content.decode()
    assert "History: 1 earlier text" in page and '<pre class="note-old">first</pre>' in page
    bob = browser(person("bob", "approver", shop))
    assert "Edit</summary>" not in bob.get("/sagas/shop/storebot-1/").content.decode()
    assert bob.post(f"/notes/{note.pk}/edit/", {"body": "x"}).status_code == 403


def test_assign_to_me_shows_in_the_list_and_the_assigned_to_me_view(
    shop: Project, saga: Saga
) -> None:
    ann = browser(person("ann", "operator", shop))
    assert "Assign to me" in ann.get("/sagas/shop/storebot-1/").content.decode()
    answer = ann.post(f"/owners/saga/{saga.pk}/", {"owner": "ann"})
    assert answer.status_code == 302 and answer["Location"].endswith("#owner")
    page = ann.get("/sagas/shop/storebot-1/").content.decode()
    assert "Owner: <strong>ann</strong>" in page and "Assign to me" not in page
    mine = ann.get("/?owner=me").content.decode()
    assert "storebot-1" in mine and "<td>ann" in mine
    bob = browser(person("bob", "operator", shop))
    assert "storebot-1" not in bob.get("/?owner=me").content.decode()
    assert ann.post(f"/owners/saga/{saga.pk}/", {"owner": "ghost"}).status_code == 400


def test_acknowledge_from_the_attention_page(shop: Project) -> None:
    failing = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(failing.pk)
    step = Step.objects.get(saga=failing, state="ROLLBACK_FAILED")
    ann = browser(person("ann", "operator", shop))
    assert "Acknowledge</button>" in ann.get("/attention/").content.decode()
    answer = ann.post(f"/steps/{step.pk}/acknowledge/", headers=HTMX)
    assert answer.status_code == 200 and "Acknowledged: return_item" in answer.content.decode()
    page = ann.get("/attention/").content.decode()
    assert "acknowledged by user:ann" in page and "Acknowledge</button>" not in page
    again = ann.post(f"/steps/{step.pk}/acknowledge/", headers=HTMX)
    assert again.status_code == 409


def version_of(page: str, attribute: str) -> int:
    import re

    found = re.search(rf'{attribute}="(\d+)"', page)
    assert found is not None, f"no {attribute} on the page"
    return int(found.group(1))


def test_the_live_body_says_when_notes_or_the_owner_changed_and_each_person_reads_them_again(
    shop: Project, saga: Saga
) -> None:
    """The saga page's notes are per person, so the live body carries only the version of
    its newest note or owner change; a page reads its notes section again when it moves."""
    from sagaboard.access.reads import visible
    from sagaboard.live import fragments

    ann, bob = person("ann", "operator", shop), person("bob", "operator", shop)
    page = browser(bob).get("/sagas/shop/storebot-1/").content.decode()
    read_at = version_of(page, "data-version")
    assert version_of(page, "data-notes-version") == read_at == 0

    ann_page = browser(ann)
    ann_page.post(f"/notes/saga/{saga.pk}/", {"body": "Carrier down", "step": ""})
    live = fragments.saga_detail(saga.pk, visible.last_event_id())
    after_note = version_of(live, "data-notes-version")
    assert after_note > read_at  # bob's page reads #notes again
    ann_page.post(f"/owners/saga/{saga.pk}/", {"owner": "ann"})
    live = fragments.saga_detail(saga.pk, visible.last_event_id())
    assert version_of(live, "data-notes-version") > after_note

    section = browser(bob).get(f"/sagas/{saga.pk}/notes/")
    html = section.content.decode()
    assert section.status_code == 200 and html.startswith('<section id="notes"')
    assert "Carrier down" in html and "<strong>ann</strong>" in html
    assert version_of(html, "data-version") == version_of(live, "data-notes-version")
    assert "Edit</summary>" not in html  # ann's note: bob may not edit it
    assert "Edit</summary>" in browser(ann).get(f"/sagas/{saga.pk}/notes/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in html  # its forms post as the page's did


def test_the_notes_section_of_a_saga_in_another_project_is_not_found(saga: Saga) -> None:
    other = Project.objects.create(slug="other", name="Other")
    eve = browser(person("eve", "operator", other))
    assert eve.get(f"/sagas/{saga.pk}/notes/").status_code == 404
    assert eve.get("/sagas/999999/notes/").status_code == 404
    assert eve.post(f"/sagas/{saga.pk}/notes/").status_code == 405
