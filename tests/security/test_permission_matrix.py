"""The permission matrix, enforced: every route x every persona answers as documented.

The rows live in ``permission_matrix.py`` (rendered into docs/security.md). Each
row's request is sent as each persona, inside a savepoint that is rolled back,
so every persona acts on the same world; what it observes is written in the
matrix's own notation (status, redirect, whether shop's data changed, whether
shop's data showed), and the row must equal the documented one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection, transaction
from django.test import Client, override_settings
from django.urls import URLPattern
from django.utils import timezone

from sagaboard.access.services.roles import roles_sync
from sagaboard.access.services.tokens import token_create, token_revoke
from sagaboard.actions.services import decisions, operator_actions, runner
from sagaboard.collab.services import notes
from sagaboard.config import urls
from sagaboard.config.api import api
from sagaboard.config.asgi import application
from sagaboard.health.services import health
from sagaboard.live.relay import stop_all
from sagaboard.live.routing import websocket_urlpatterns
from sagaboard.models import (
    ApiToken,
    Approval,
    ApprovalPolicy,
    ApprovalVote,
    AuditEntry,
    BatchItem,
    BatchJob,
    CompensationAttempt,
    DecisionLink,
    Event,
    Project,
    Saga,
    SavedView,
    Step,
)
from sagaboard.notify.services import link_tokens
from sagaboard.record.services import manual_flow
from tests.support.agent_runs import Recorder, paused_storebot_events
from tests.support.hitl import storebot_server_saga
from tests.support.permission_matrix import (
    BEARERS,
    CHANGED,
    NOTHING,
    OTHER_CHANGED,
    PERSONAS,
    ROWS,
    SESSION,
    Row,
    render_markdown,
    section_of,
)
from undo_core import Saga as LocalSaga
from undo_core import define_tool

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


# ---------------------------------------------------------------- the world every row acts on


@dataclass
class World:
    values: dict[str, Any]
    """What the rows' templates name: ids, prefixes, event batches."""
    users: dict[str, Any]
    sessions: dict[str, str]
    """Session key of each logged-in persona (logged in once, for the whole module)."""
    bearers: dict[str, str]


def _completed_run(saga_id: str) -> list[Any]:
    store = Recorder()
    saga = LocalSaga("agent-done", store=store, saga_id=saga_id)
    saga.execute(define_tool("send_mail", lambda i: {"sent": True}, lambda o: None), {})
    saga.complete()
    return store.sent


def _build() -> World:
    roles_sync(Group, Permission)  # a transactional test elsewhere may have flushed them
    health.worker_heartbeat("matrix")
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    users = {}
    for name in SESSION:
        if name == "superuser":
            users[name] = get_user_model().objects.create_superuser(f"{name}-1", "", None)
            continue
        user = get_user_model().objects.create_user(f"{name}-1")
        role = {"stranger": "admin", "norole": None}.get(name, name)
        if role:
            user.groups.add(Group.objects.get(name=role))
        (other if name == "stranger" else shop).members.add(user)
        users[name] = user
    token = token_create(project=shop, label="storebot")
    revoked = token_create(project=shop, label="old")
    token_revoke(token=revoked.token, reason="rotated")
    bearers = {
        "token": token.secret,
        "revoked": revoked.secret,
        "other_token": token_create(project=other, label="elsewhere").secret,
    }
    target = token_create(project=shop, label="ci-bot").token

    waiting = storebot_server_saga(shop, "storebot-1")
    runner.rollback_continue(waiting.pk)
    failing = storebot_server_saga(shop, "storebot-2", refund_needs_approval=False,
                                   return_fails_first=5)  # fmt: skip
    runner.rollback_continue(failing.pk)
    failed_step = Step.objects.get(saga=failing, state="ROLLBACK_FAILED")
    policy = ApprovalPolicy.objects.create(project=shop, name="shop-big-refunds",
                                           tool_glob="refund_*", approvers_required=1)  # fmt: skip

    agent = Client()
    auth = {"Authorization": f"Bearer {token.secret}"}
    done = _completed_run("agent-more")
    for saga_id, events in (
        (
            "agent-awaiting",
            paused_storebot_events("agent-awaiting", refund_approval=True, return_undo_fails=False),
        ),
        (
            "agent-asked",
            paused_storebot_events("agent-asked", refund_approval=True, return_undo_fails=False),
        ),
        (
            "agent-halted",
            paused_storebot_events("agent-halted", refund_approval=False, return_undo_fails=True),
        ),
        ("agent-more", done[:-1]),
    ):
        sent = agent.post("/api/v1/events", {"events": events}, "application/json", headers=auth)
        assert sent.status_code == 200, (saga_id, sent.content)
    asked = decisions.approval_request(project=shop, saga_id="agent-asked", step_id="step-2",
                                       why=None)  # fmt: skip
    halted = Step.objects.get(saga__saga_id="agent-halted", step_id="step-1")
    operator_actions.step_act(step_pk=halted.pk, user=users["operator"], action="retry", reason="")

    manual_flow.saga_begin(project=shop, event_id="m-1", name="manual", saga_id="manual-1",
                     token_pk=None)  # fmt: skip
    manual_flow.step_add(project=shop, event_id="m-2", saga_id="manual-1", tool_name="charge",
                   input={}, undo={"kind": "none"})  # fmt: skip
    manual_flow.saga_begin(project=shop, event_id="m-3", name="manual", saga_id="manual-2",
                     token_pk=None)  # fmt: skip

    note = notes.note_add(user=users["operator"], saga_pk=waiting.pk, body="on it")
    link = DecisionLink.objects.create(
        approval=Approval.objects.get(saga=waiting, status="PENDING"), user=users["approver"],
        expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    saved = SavedView.objects.create(
        user=users["viewer"], name="mine", query="project=shop", project=shop
    )
    batch = BatchJob.objects.create(user=users["operator"], actor="user:operator-1",
                                    action="retry", reason="outage over", query="project=shop",
                                    total=1)  # fmt: skip
    batch.projects.set([shop])
    BatchItem.objects.create(job=batch, position=0, kind="step", target_pk=failed_step.pk,
                             project=shop, label="return_item (step-2) in storebot")  # fmt: skip
    values = {
        "batch": batch.pk,
        "shop_pk": shop.pk,
        "saved_view": saved.pk,
        "note": note.pk,
        "saga_id": waiting.saga_id,
        "saga_pk": waiting.pk,
        "approval": Approval.objects.get(saga=waiting, status="PENDING").pk,
        "failed_saga_id": failing.saga_id,
        "failed_step": failed_step.pk,
        "prefix": target.prefix,
        "policy": policy.pk,
        "policy_name": policy.name,
        "more_events": done[-1:],
        "hand_saga": "manual-1",
        "running_saga_pk": Saga.objects.get(saga_id="manual-1").pk,
        "empty_hand_saga": "manual-2",
        "mirrored_saga": "agent-awaiting",
        "api_approval": asked.pk,
        "halted_saga": "agent-halted",
        "decide_token": link_tokens.link_mint(link),
    }
    sessions = {}
    for name, user in users.items():
        browser = Client()
        browser.force_login(user)
        sessions[name] = browser.cookies["sessionid"].value
    return World(values, users, sessions, bearers)


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """Built once for the module inside a transaction that is rolled back at its end."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            yield _build()
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


# ---------------------------------------------------------------- asking, and describing the answer


def _fill(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    if isinstance(template, str) and template.startswith("{") and template.endswith("}"):
        key = template[1:-1]
        if key in values:
            return values[key]  # the value itself (a list of events), not its text
    return template.format(**values) if isinstance(template, str) else template


_TABLES: list[tuple[Any, str, tuple[str, ...]]] = [
    (Saga, "project_id", ("saga_id", "status", "seq", "updated_at")),
    (Step, "saga__project_id", ("pk", "state", "pending_action", "left_at", "updated_at")),
    (Approval, "project_id", ("pk", "status", "required")),
    (ApprovalVote, "approval__project_id", ("pk",)),
    (ApiToken, "project_id", ("prefix", "revoked_at")),
    (ApprovalPolicy, "project_id", ("pk", "version", "name", "enabled")),
    (AuditEntry, "project_id", ("pk",)),
    (Event, "project_id", ("pk",)),
    (CompensationAttempt, "step__saga__project_id", ("pk",)),
]
"""Everything a request could change, as (model, its project, the columns that change)."""
_STATE_SQL: list[tuple[str, str, Any]] = []


def _state() -> dict[int, list[tuple[Any, ...]]]:
    """Every row of ``_TABLES``, per project (SQL compiled once: this runs twice a cell)."""
    if not _STATE_SQL:
        for model, project, fields in _TABLES:
            query = model.objects.values_list(project, *fields).order_by(*fields).query
            _STATE_SQL.append((model.__name__, *query.sql_with_params()))
    state: dict[int, list[tuple[Any, ...]]] = {}
    with connection.cursor() as cursor:
        for name, sql, params in _STATE_SQL:
            cursor.execute(sql, params)
            for project_pk, *values in cursor.fetchall():
                state.setdefault(project_pk, []).append((name, *values))
    return state


def _body(response: Any) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def _where(location: str) -> str:
    path = location.split("?")[0].split("#")[0]  # the fragment never reaches a server
    if path == "/login/":
        return "login"
    return "admin login" if path == "/admin/login/" else path


def _describe(
    persona: str, status: str, body: str, before: Any, after: Any, shows: str | None, shop: int
) -> str:
    words = [status]
    if before.get(shop) != after.get(shop):
        words.append(CHANGED)
        audits = [[r for r in s.get(shop, []) if r[0] == "AuditEntry"] for s in (before, after)]
        if persona in SESSION and audits[0] == audits[1]:
            words.append("(not audited!)")
    elif before != after:
        words.append(OTHER_CHANGED)
    if shows is not None and status[:1] in ("2", "a") and shows not in body:
        words.append(NOTHING)
    return " ".join(words)


def _http(row: Row, persona: str, world: World) -> str:
    client = Client(raise_request_exception=False)
    headers = {"HX-Request": "true"} if row.htmx else {}
    headers.update(row.headers)
    if persona in SESSION:
        client.cookies["sessionid"] = world.sessions[persona]
    if persona in BEARERS:
        headers["Authorization"] = f"Bearer {world.bearers[persona]}"
    path, data = _fill(row.path, world.values), _fill(row.data or {}, world.values)
    before = _state()
    with override_settings(**row.settings):
        if row.method == "GET":
            response = client.get(path, headers=headers)
        elif path.startswith("/api/"):
            response = client.generic(row.method, path, json.dumps(data),
                                      "application/json", headers=headers)  # fmt: skip
        else:
            response = client.post(path, data, headers=headers)
    status = str(response.status_code)
    if response.status_code in (301, 302):
        status += f" → {_where(response['Location'])}"
    shows = _fill(row.shows, world.values) if row.shows else None
    shop = world.values["shop_pk"]
    return _describe(persona, status, _body(response), before, _state(), shows, shop)


def _websocket(row: Row, persona: str, world: World) -> str:
    origin = row.headers.get("origin", "http://localhost")
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if persona in SESSION:
        headers.append((b"cookie", f"sessionid={world.sessions[persona]}".encode()))
    if persona in BEARERS:
        headers.append((b"authorization", f"Bearer {world.bearers[persona]}".encode()))
    shows = str(_fill(row.shows, world.values))

    async def listen() -> tuple[str, list[str]]:
        comm = WebsocketCommunicator(application, _fill(row.path, world.values), headers=headers)
        connected, _ = await comm.connect()
        if not connected:  # closed before accepting: a browser sees an HTTP 403, no code
            return "403", []
        try:
            # The consumer handles one message at a time: once the disconnect is handled,
            # its connect (and the catch-up from after=0) has sent everything it would.
            await comm.disconnect(timeout=30)
        finally:
            stop_all()
        sent = []
        while not comm.output_queue.empty():
            sent.append(comm.output_queue.get_nowait())
        texts = [m.get("text") or "" for m in sent if m["type"] == "websocket.send"]
        closed = [m.get("code", 1000) for m in sent if m["type"] == "websocket.close"]
        return (f"close {closed[0]}" if closed else "accept"), texts

    before = _state()
    status, texts = async_to_sync(listen)()
    shop = world.values["shop_pk"]
    return _describe(persona, status, "".join(texts), before, _state(), shows, shop)


def _isolated[T](ask: Callable[[], T]) -> T:
    """The answer, with whatever the request changed rolled back."""
    with transaction.atomic():
        answer = ask()
        transaction.set_rollback(True)
    return answer


@pytest.fixture(autouse=True)
def _consumers_keep_the_test_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    # Channels closes "old" connections around each database call; inside a test's
    # transaction that would end it. The consumer runs on this thread's connection here.
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("row", ROWS, ids=[r.label for r in ROWS])
def test_every_persona_gets_the_documented_answer(row: Row, world: World) -> None:
    ask = _websocket if row.method == "WS" else _http
    health.worker_heartbeat("matrix")  # the matrix's worker lives as long as the module runs
    observed = {p: _isolated(lambda p=p: ask(row, p, world)) for p in PERSONAS}
    assert observed == row.answers


PAGE_POSTS = [r for r in ROWS if r.section == "Pages" and r.method == "POST"]


@pytest.mark.parametrize("row", PAGE_POSTS, ids=[r.label for r in PAGE_POSTS])
def test_a_cross_site_post_is_refused_and_changes_nothing(row: Row, world: World) -> None:
    """The persona allowed to act, posting from another site (no CSRF token): 403, nothing."""
    actor = next((p for p in SESSION if CHANGED in row.answers[p]), "admin")

    def ask() -> tuple[int, bool]:
        client = Client(enforce_csrf_checks=True, raise_request_exception=False)
        client.cookies["sessionid"] = world.sessions[actor]
        before = _state()
        response = client.post(
            _fill(row.path, world.values), _fill(row.data or {}, world.values),
            headers={"HX-Request": "true"} if row.htmx else {},
        )  # fmt: skip
        return response.status_code, _state() == before

    assert _isolated(ask) == (403, True)


def _declared_routes() -> set[str]:
    """Every route the URL configuration, the API schema and the websocket routing declare."""
    paths = api.get_openapi_schema()["paths"]
    routes = {f"{m.upper()} {path}" for path, methods in paths.items() for m in methods}
    for entry in urls.urlpatterns:
        if isinstance(entry, URLPattern):
            routes.add(str(entry.name))
        elif str(entry.pattern) == "admin/":
            routes.add("admin")
        else:  # the API: its operations are in the schema; the rest by URL name
            for sub in entry.url_patterns:
                as_path = "/" + str(entry.pattern) + str(sub.pattern)
                if as_path.replace("<", "{").replace(">", "}") not in paths:
                    routes.add(str(sub.name))
    routes |= {f"ws /{p.pattern}" for p in websocket_urlpatterns}
    return routes


def test_every_route_has_a_row_and_every_row_a_route() -> None:
    covered = {row.route for row in ROWS}
    declared = _declared_routes()
    assert declared - covered == set(), "routes without a row in the permission matrix"
    assert covered - declared == set(), "rows for routes that do not exist any more"


def test_the_matrix_has_one_answer_per_persona_and_row() -> None:
    assert all(list(row.answers) == list(PERSONAS) for row in ROWS)
    assert len({(r.method, r.path, r.action) for r in ROWS}) == len(ROWS)


def test_the_docs_table_is_the_rendered_matrix() -> None:
    documented = section_of(DOCS.read_text()) if DOCS.exists() else ""
    assert documented.rstrip() == render_markdown().rstrip(), (
        "docs/security.md is stale: python -m tests.security.permission_matrix "
        "--write docs/security.md"
    )
