"""An operator's retry or resolve says its outcome, however fast it came (issue 31).

The answer to a request a worker carries out later says "Retry requested" (info, never
success) and names where it is read again (``data-follow``: ``step_outcome``); read again
once the worker's attempt is on the record, it is the outcome ("Retry failed: ..."), even in
the moment before the worker clears the step's pending request, and follows nothing more.
A stop that failed at once is one red banner, not a green "requested" beside it.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sagaboard.actions.services import operator_actions, runner
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.models import Project, Saga, Step
from sagaboard.record.services import manual_flow
from tests.support.hitl import login

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def failing(shop: Project, saga_id: str = "f-1") -> Step:
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


def flash(html: str) -> tuple[str, str, str]:
    """(class, data-follow or "", text) of the answer's message."""
    message = r'<p id="flash"[^>]* class="([^"]*)"[^>]*?(?: data-follow="([^"]*)")?>(.*?)</p>'
    found = re.search(message, html, re.S)
    assert found, html
    return found.group(1), (found.group(2) or "").replace("&amp;", "&"), found.group(3)


def test_a_requested_retry_is_followed_until_its_failure_is_on_the_record(shop: Project) -> None:
    step = failing(shop)
    olga = login("operator", shop, "olga")
    answer = olga.post(f"/steps/{step.pk}/action/", {"action": "retry"}, headers=HTMX)
    tone, follow, text = flash(answer.content.decode())
    assert answer.status_code == 200 and tone == "message info"
    assert text == "Retry requested: return_item (step-1) in storebot-return."
    assert follow == f"/steps/{step.pk}/outcome/?action=retry&after=1"
    assert flash(olga.get(follow).content.decode())[2] == text  # not run yet: the same

    runner.step_action_run(step.pk)  # the worker: attempt #2 fails at once
    tone, again, text = flash(olga.get(follow).content.decode())
    assert tone == "message error" and again == ""  # the outcome: nothing more to follow
    assert text == (
        "Retry failed: return_item (step-1) in storebot-return: the undo failed again, the step"
        " is ROLLBACK_FAILED: warehouse return cancellation: upstream timed out (attempt 2)."
    )
    # The moment between the worker's last write and its clearing the pending request.
    Step.objects.filter(pk=step.pk).update(pending_action={"action": "retry", "by": "user:olga"})
    assert flash(olga.get(follow).content.decode())[2] == text


def test_an_answer_that_comes_after_the_failure_says_it_at_once(
    shop: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker was faster than the answer: its attempt is recorded (the request not yet
    cleared) when the view reads the step back."""
    step = failing(shop)
    act = operator_actions.step_act

    def act_then_worker(**kwargs: object) -> Step:
        done = act(**kwargs)  # type: ignore[arg-type]
        pending = Step.objects.get(pk=step.pk).pending_action
        runner.step_action_run(step.pk)
        Step.objects.filter(pk=step.pk).update(pending_action=pending)
        return done

    monkeypatch.setattr(operator_actions, "step_act", act_then_worker)
    olga = login("operator", shop, "olga")
    answer = olga.post(f"/steps/{step.pk}/action/", {"action": "retry"}, headers=HTMX)
    tone, follow, text = flash(answer.content.decode())
    assert tone == "message error" and follow == "" and text.startswith("Retry failed:")


def test_a_requested_resolve_is_followed_until_it_is_done(shop: Project) -> None:
    step = failing(shop)
    olga = login("operator", shop, "olga")
    answer = olga.post(
        f"/steps/{step.pk}/action/", {"action": "resolve", "reason": "by hand"}, headers=HTMX
    )
    tone, follow, text = flash(answer.content.decode())
    assert tone == "message info" and text.startswith("Force-resolve requested:") and follow
    runner.step_action_run(step.pk)
    tone, again, text = flash(olga.get(follow).content.decode())
    assert tone == "message success" and again == ""
    assert text == (
        "Force-resolve done: return_item (step-1) in storebot-return: resolved by hand: RESOLVED."
    )


def test_the_outcome_is_only_for_who_may_see_the_step(shop: Project) -> None:
    step = failing(shop)
    url = f"/steps/{step.pk}/outcome/?action=retry&after=1"
    outsider = login("operator", Project.objects.create(slug="other", name="Other"), "out")
    assert outsider.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page
    viewer = login("viewer", shop, "vic")
    assert viewer.get(url).status_code == 200
    for bad in ("action=leave&after=1", "action=retry&after=x", "action=retry"):
        assert viewer.get(f"/steps/{step.pk}/outcome/?{bad}").status_code == 400


def test_a_stop_that_failed_at_once_is_one_red_message(shop: Project) -> None:
    manual_flow.saga_begin(project=shop, event_id="e-1", name="storebot-return", saga_id="s-1")
    step_id = manual_flow.step_add(
        project=shop, event_id="e-2", saga_id="s-1", tool_name="return_item",
        input={"itemId": "9"}, undo={"kind": "handler", "handler": "storebot.return_item",
                                     "args": {"fail_first": 5}},
    )  # fmt: skip
    manual_flow.step_complete(
        project=shop, event_id="e-3", saga_id="s-1", step_id=step_id, output={"itemId": "9"}
    )
    saga = Saga.objects.get(project=shop, saga_id="s-1")
    ann = login("operator", shop, "ann")
    answer = ann.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "wrong customer"})
    assert answer.status_code == 302 and answer["Location"] == "/sagas/shop/s-1/#stop-state"
    waiting = ann.get("/sagas/shop/s-1/").content.decode()
    assert 'id="stop-state" class="message info"' in waiting  # the one message: where it stands
    assert "a worker is rolling it back." in waiting and "message success" not in waiting

    runner.stop_run(saga.pk)  # the worker, within milliseconds: the undo fails
    page = ann.get("/sagas/shop/s-1/").content.decode()
    assert Saga.objects.get(pk=saga.pk).status == "ROLLBACK_FAILED"
    assert "message success" not in page and "Rollback requested:" not in page
    assert len(re.findall(r'class="(?:message (?:error|info)|banner[^"]*)"', page)) == 1
    assert '<p class="banner error" role="alert">' in page and "Rollback failed" in page
    assert 'id="stop-state" class="muted"' in page
    assert "(carried out: the rollback failed, see above)." in page
