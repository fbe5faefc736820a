"""Signed Slack interactions of every shape (issue 36): a 200 or a 400, never a 500.

A valid signature says Slack sent the request, not that it is a click of sagaboard's
buttons: ``"user": "U1"`` (a string), ``"actions": ["x"]`` and a 5,000-digit ``value`` were
500s (an AttributeError, Python's integer-digit limit). Here the parts of a real click are
swapped for any JSON (hypothesis), signed as Slack signs: whatever is not sagaboard's click
is answered 400 (as an unknown action always was) or, a click of a well-formed but
unlinked user or of another approval, 200 ``ok: false``; only the genuine click decides.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sagaboard.models import Approval, AuditEntry, Notification, Project
from sagaboard.notify.services import notifications
from tests.support.fake_slack import FakeSlack
from tests.support.hitl import person, waiting

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Raw:
    """A JSON literal written as is (``json.dumps`` cannot write it): a 5,000-digit integer,
    deep nesting."""

    literal: str


MISSING = Raw("")
"""The key left out."""
BIG = Raw("9" * 5000)
DEEP = Raw("[" * 10_000 + "]" * 10_000)

PATHS = [
    "type", "user", "user.id", "user.username", "user.name", "team", "team.id", "channel",
    "actions", "actions[0]", "actions[0].action_id", "actions[0].value", "actions[0].type",
    "actions[0].block_id", "response_url", "trigger_id", "api_app_id", "container",
]  # fmt: skip

ODD_TEXT = st.sampled_from(
    [
        "", " ", "UANN", "uann", "U\x00ANN", "\udc80", "UANN\n", "²", "١٢٣", "0", "007", "-1",
        "1.0", " 1", str(2**63), str(2**63 - 1), "9" * 5000, "https://x.invalid/",
        notifications.APPROVE, notifications.REJECT, "block_actions", "view_submission",
    ]
)  # fmt: skip
KEYS = ["id", "value", "action_id", "username"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | ODD_TEXT
    | st.sampled_from([BIG, DEEP])
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=10) | st.sampled_from(KEYS), children, max_size=3)
    ),
    max_leaves=8,
)
CHANGES = st.lists(
    st.tuples(st.sampled_from(PATHS), JSON | st.just(MISSING)), min_size=1, max_size=3
)


def changed(base: dict[str, Any], changes: list[tuple[str, Any]]) -> Any:
    """``base`` with each path set to its value (a path through a non-object: skipped)."""
    payload: Any = copy.deepcopy(base)
    for path, value in changes:
        *parents, leaf = path.replace("[0]", ".0").split(".")
        node = payload
        for part in parents:
            key: Any = int(part) if part.isdigit() else part
            inside = isinstance(node, list) and isinstance(key, int) and key < len(node)
            node = node[key] if inside or (isinstance(node, dict) and key in node) else None
        if isinstance(node, dict):
            if value is MISSING:
                node.pop(leaf, None)
            else:
                node[leaf] = value
        elif isinstance(node, list) and leaf.isdigit() and int(leaf) < len(node):
            if value is MISSING:
                node.pop(int(leaf))
            else:
                node[int(leaf)] = value
    return payload


def encoded(payload: Any) -> str:
    """The payload as JSON, ``Raw`` literals written as they are."""
    raws: list[str] = []

    def placeholder(value: Any) -> str:
        assert isinstance(value, Raw)
        raws.append(value.literal or "null")
        return f"@raw{len(raws) - 1}@"

    text = json.dumps(payload, default=placeholder)
    for n, literal in enumerate(raws):
        text = text.replace(f'"@raw{n}@"', literal)
    return text


def unreadable(payload: Any) -> bool:
    """Whether the payload holds JSON Python does not read (past its digit or depth limit)."""
    if isinstance(payload, Raw):
        return payload is not MISSING
    if isinstance(payload, dict):
        return any(unreadable(v) for v in payload.values())
    return isinstance(payload, list) and any(unreadable(v) for v in payload)


def decision_of(payload: Any, approval: Approval) -> str | None:
    """The status ann's click would settle the approval in, when it still is her click on
    one of its buttons: its type, the button and its value, who clicked."""
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return None
    actions, user = payload.get("actions"), payload.get("user")
    first = actions[0] if isinstance(actions, list) and actions else None
    if not isinstance(first, dict) or not isinstance(user, dict) or user.get("id") != "UANN":
        return None
    if first.get("value") != str(approval.pk):
        return None
    return {
        notifications.APPROVE: Approval.Status.APPROVED,
        notifications.REJECT: Approval.Status.REJECTED,
    }.get(first.get("action_id") if type(first.get("action_id")) is str else "")


@pytest.fixture
def slack(settings: Any) -> Iterator[FakeSlack]:
    fake = FakeSlack()
    settings.SAGABOARD_SLACK_SIGNING_SECRET = fake.secret
    settings.SAGABOARD_SLACK_RESPONSE_URL_PREFIX = fake.base
    yield fake
    fake.close()


@pytest.fixture
def approval(slack: FakeSlack) -> Approval:
    shop = Project.objects.create(slug="shop", name="Shop")
    person("ann", "approver", shop)
    call_command("sagaboard_slack_link", "UANN", "ann", stdout=StringIO())
    return waiting(shop)


def decisions() -> list[str]:
    return list(
        AuditEntry.objects.filter(action__startswith="approval.")
        .order_by("pk")
        .values_list("action", flat=True)
    )


def _send(slack: FakeSlack, payload_json: str) -> Any:
    body = urlencode({"payload": payload_json}).encode()
    return slack.send(Client(), body, timestamp=str(int(time.time())))


@pytest.mark.slow  # generated: 150 signed requests
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(changes=CHANGES)
@example(changes=[("user", "UANN")])
@example(changes=[("user", ["UANN"])])
@example(changes=[("actions", ["x"])])
@example(changes=[("actions", [])])
@example(changes=[("actions", {"0": {}})])
@example(changes=[("actions[0].value", "9" * 5000)])
@example(changes=[("actions[0].value", BIG)])
@example(changes=[("actions[0].value", "²")])
@example(changes=[("actions[0].value", str(2**63))])
@example(changes=[("actions[0].value", 1)])
@example(changes=[("actions[0].action_id", ["sagaboard_approve"])])
@example(changes=[("user.id", BIG)])
@example(changes=[("user.id", "U\x00ANN")])
@example(changes=[("user.id", "\udc80")])
@example(changes=[("user.username", "\udc80"), ("user.name", "a\x00b")])
@example(changes=[("user.username", BIG)])
@example(changes=[("response_url", BIG)])
@example(changes=[("response_url", 12)])
@example(changes=[("response_url", "http://127.0.0.1:1/\x00\udc80")])
@example(changes=[("team", "T0001")])
@example(changes=[("team", DEEP)])
@example(changes=[("type", DEEP)])
def test_a_signed_payload_of_any_shape_is_a_200_or_400_and_only_a_click_decides(
    slack: FakeSlack, approval: Approval, changes: list[tuple[str, Any]]
) -> None:
    genuine = slack.payload("UANN", notifications.APPROVE, approval.pk)
    payload = changed(genuine, changes)
    with transaction.atomic():  # each example starts from the same pending approval
        before = decisions()
        response = _send(slack, encoded(payload))
        assert response.status_code != 500, response.content
        assert response.status_code in (200, 400), response.content
        assert response["Content-Type"].startswith("application/json")
        after = Approval.objects.get(pk=approval.pk)
        decided = None if unreadable(payload) else decision_of(payload, approval)
        if unreadable(payload):
            assert response.status_code == 400, response.content
        if decided is not None:  # still ann's click on one of its buttons
            assert response.status_code == 200 and response.json()["ok"] is True
            assert after.status == decided
        else:
            if response.status_code == 400:
                assert response.json()["error"]["code"] == "validation_error"
                assert not Notification.objects.filter(kind="slack.response").exists()
            else:
                assert response.json()["ok"] is False
            assert after.status == Approval.Status.PENDING and not after.votes.exists()
            assert decisions() == before
        transaction.set_rollback(True)


def test_the_named_cases_are_refused_as_not_a_button(slack: FakeSlack, approval: Approval) -> None:
    genuine = slack.payload("UANN", notifications.APPROVE, approval.pk)
    for changes in (
        [("user", "UANN")],
        [("actions", ["x"])],
        [("actions[0].value", "9" * 5000)],
        [("actions[0].value", BIG)],
    ):
        response = _send(slack, encoded(changed(genuine, changes)))
        assert response.status_code == 400, (changes, response.content)
        assert response.json()["error"]["code"] == "validation_error"
    too_long = _send(slack, encoded(changed(genuine, [("team", BIG)]))).json()["error"]
    assert too_long["message"] == "payload holds an integer too large (more than 4300 digits)"
    deep = _send(slack, encoded(changed(genuine, [("team", DEEP)]))).json()["error"]
    assert deep["message"] == "payload nests too deep"
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and not approval.votes.exists()
    assert _send(slack, encoded(genuine)).json()["ok"] is True  # the real click still decides


def test_a_click_with_an_unusable_handle_or_response_url_still_decides_safely(
    slack: FakeSlack, approval: Approval
) -> None:
    payload = slack.payload("UANN", notifications.REJECT, approval.pk)
    payload["user"]["username"] = "a\x00b"
    response = _send(slack, json.dumps(payload))
    assert response.status_code == 200 and response.json()["ok"] is True
    entry = AuditEntry.objects.get(action="approval.reject")
    assert entry.reason == "rejected from Slack by @UANN"  # the id, not the unstorable name
    (update,) = slack.deliver()
    assert "Rejected by ann" in update["text"]


@pytest.mark.parametrize(
    ("timestamp", "signature"),
    [
        ("²", None),
        ("9" * 5000, None),
        ("\u0661\u0667" + "\u0660" * 8, None),  # Arabic-Indic digits: int() takes them
        (None, "v0=é"),
        (None, "v0=\u2603"),
    ],
    ids=["superscript", "5000-digits", "arabic-digits", "latin-1-signature", "unicode-signature"],
)
def test_odd_signature_headers_are_a_401_not_a_500(
    slack: FakeSlack, approval: Approval, timestamp: str | None, signature: str | None
) -> None:
    body = slack.body(slack.payload("UANN", notifications.APPROVE, approval.pk))
    response = slack.send(Client(), body, timestamp=timestamp, signature=signature)
    assert response.status_code == 401, response.content
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
