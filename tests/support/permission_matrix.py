"""Who may do what: every route x every persona -> the one answer sagaboard gives.

This table is the single source for the permission rules of the dashboard, the
API and the live feed. ``test_permission_matrix.py`` sends every request of
every row as every persona and compares the answers it observes, written in
the same notation, with the ones here; ``docs/security.md`` holds this table
rendered, and a test compares the two, so neither can drift. Every route the
URL configuration, the API's OpenAPI schema and the websocket routing declare
must have a row: a new one without a row fails the test.

Render (or rewrite the docs section) with::

    python -m tests.security.permission_matrix --markdown
    python -m tests.support.permission_matrix --write docs/security.md

The objects every row acts on belong to project ``shop``; the personas are
members of ``shop`` except the stranger, who is an admin of project ``other``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- personas

PERSONAS: dict[str, str] = {
    "anonymous": "no session, no token",
    "viewer": "member of shop, role viewer",
    "operator": "member of shop, role operator",
    "approver": "member of shop, role approver",
    "admin": "member of shop, role admin (not Django staff)",
    "superuser": "Django superuser (staff), member of no project: sees every project",
    "stranger": "member of project other with role admin: a user of another project",
    "norole": "member of shop in no role group",
    "token": "a valid API token of shop (no session)",
    "revoked": "a revoked API token of shop",
    "other_token": "a valid API token of project other",
}
"""Persona key -> who it is. Column order of the table."""

SESSION = ("viewer", "operator", "approver", "admin", "superuser", "stranger", "norole")
"""Personas logged in to the dashboard."""
BEARERS = ("token", "revoked", "other_token")
"""Personas that send ``Authorization: Bearer <token>`` and have no session."""
MEMBERS = ("viewer", "operator", "approver", "admin")
"""Members of shop with a role: they read everything of shop."""

# ---------------------------------------------------------------- notation
#
# An answer is the HTTP status, then what it led to:
#   "302 → login"   redirected to the login page (``/login/?next=...``)
#   "302 → /x/"     redirected there (post/redirect/get, with a message)
#   "✎"             changed data of project shop (and wrote an audit entry, for people)
#   "✎ other"       changed data of project other only (a token of other, in its own project)
#   "∅"             answered, but shows nothing of shop (the marker of the row is absent)
# A websocket answers "accept" (and catches up on shop's events), "accept ∅" (and sends
# nothing of shop), "close 4401" (no session) or "close 4403" (refused for its Origin):
# a refusal accepts the handshake and closes with the code at once, sending nothing.

LOGIN = "302 → login"
ADMIN_LOGIN = "302 → admin login"
CHANGED = "✎"
NOTHING = "∅"
OTHER_CHANGED = "✎ other"
WS_CLOSED = "close 4401"


@dataclass(frozen=True)
class Row:
    """One request, and the answer each persona gets.

    ``path``, ``data`` values and ``shows`` are templates filled from the test's
    world (``{saga_id}``, ``{approval}``...). ``shows`` is text of shop that the
    answer carries when it shows shop's data; "∅" in a cell says it must not.
    """

    section: str
    route: str
    """What it covers: a URL name, ``admin``, ``METHOD /api/v1/...`` or ``ws /ws/...``."""
    method: str
    path: str
    answers: dict[str, str]
    action: str = ""
    """What the row does, for the table (blank: read the page)."""
    data: dict[str, Any] | None = None
    htmx: bool = False
    shows: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """Request headers beyond the persona's own (a websocket's Origin)."""

    @property
    def label(self) -> str:
        what = f"{self.method} {self.path}"
        return f"{what} ({self.action})" if self.action else what


def _cells(no_session: str, **given: str) -> dict[str, str]:
    """Every persona's answer: ``no_session`` for anonymous and the bearers unless given.

    The superuser answers as shop's admin unless given.
    """
    answers = {p: no_session for p in ("anonymous", *BEARERS)}
    for name, value in given.items():
        targets = MEMBERS if name == "members" else (name,)
        for persona in targets:
            answers[persona] = value
    answers.setdefault("superuser", answers["admin"])
    missing = set(PERSONAS) - set(answers)
    assert not missing, f"no answer for {sorted(missing)}"
    return {p: answers[p] for p in PERSONAS}


def page(**given: str) -> dict[str, str]:
    """A dashboard route: no session (a bearer token counts for nothing here) -> log in."""
    return _cells(LOGIN, **given)


def everyone(answer: str) -> dict[str, str]:
    return {p: answer for p in PERSONAS}


def api(**given: str) -> dict[str, str]:
    """An API operation: tokens only; a session or a revoked token is 401."""
    answers = {p: "401" for p in PERSONAS}
    answers.update(given)
    return answers


def ws(**given: str) -> dict[str, str]:
    return _cells(WS_CLOSED, **given)


def _need(role_answer: str, allowed: tuple[str, ...], refused: str, **rest: str) -> dict[str, str]:
    """A page action: ``allowed`` personas get ``role_answer``, the other members ``refused``."""
    given = {p: role_answer if p in allowed else refused for p in MEMBERS}
    return page(**given, **rest)


OPERATORS = ("operator", "admin")
COLLABORATORS = ("operator", "approver", "admin")
APPROVERS = ("approver", "admin")
ADMINS = ("admin",)

HTMX_OK = f"200 {CHANGED}"


def _step_action(action: str, reason: str) -> Row:
    return Row(
        "Pages", "step_action", "POST", "/steps/{failed_step}/action/",
        _need(HTMX_OK, OPERATORS, "403", stranger="404", norole="403"),
        action=f"{action} a failed undo, htmx",
        data={"action": action, "reason": reason}, htmx=True,
    )  # fmt: skip


def _decide(decision: str) -> Row:
    return Row(
        "Pages", "approval_decide", "POST", "/approvals/{approval}/decide/",
        _need(HTMX_OK, APPROVERS, "403", stranger="404", norole="403"),
        action=f"{decision}, htmx", data={"decision": decision, "reason": "checked"}, htmx=True,
    )  # fmt: skip


def _get_on_post_only(route: str, path: str) -> Row:
    """A GET on an action answers 405 (a link or an image can never act)."""
    return Row(
        "Pages", route, "GET", path, page(**{p: "405" for p in SESSION}), action="an action, by GET"
    )


# ---------------------------------------------------------------- the rows

PAGES: list[Row] = [
    Row("Pages", "saga_list", "GET", "/",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows="{saga_id}"),
    Row("Pages", "saga_list", "GET", "/?project=shop",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        action="filter on shop", shows="{saga_id}"),
    Row("Pages", "overview", "GET", "/overview/",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows="{saga_id}"),
    Row("Pages", "saga_detail", "GET", "/sagas/shop/{saga_id}/",
        page(members="200", stranger="404", norole="404"), shows="{saga_id}"),
    Row("Pages", "step_payload", "GET", "/sagas/shop/{saga_id}/steps/step-3/input.json",
        page(members="200", stranger="404", norole="404"), action="raw JSON of a step",
        shows="orderId"),
    Row("Pages", "step_trees", "GET", "/sagas/shop/{saga_id}/steps/step-3/payloads.html",
        page(members="200", stranger="404", norole="404"), shows="orderId"),
    Row("Pages", "step_outcome", "GET", "/steps/{failed_step}/outcome/?action=retry&after=0",
        page(members="200", stranger="404", norole="404"),
        action="a retry's message, read again until it is the outcome"),
    Row("Pages", "token_list", "GET", "/tokens/",
        _need("200", ADMINS, "403", stranger=f"200 {NOTHING}", norole="403"),
        shows="{prefix}"),
    Row("Pages", "token_list", "POST", "/tokens/",
        _need(f"201 {CHANGED}", ADMINS, "403", stranger="400", norole="403"),
        action="mint a token for shop", data={"project": "shop", "label": "new-agent"}),
    Row("Pages", "token_revoke", "POST", "/tokens/{prefix}/revoke/",
        _need(f"302 → /tokens/ {CHANGED}", ADMINS, "403", stranger="302 → /tokens/",
              norole="403"),
        action="revoke", data={"reason": "leaked"}),
    _get_on_post_only("token_revoke", "/tokens/{prefix}/revoke/"),
    Row("Pages", "saved_view_save", "POST", "/views/",
        page(members=f"302 → / {CHANGED}", stranger="302 → /", norole="302 → /"),
        action="save a view of shop", data={"name": "shop view", "query": "project=shop"}),
    _get_on_post_only("saved_view_save", "/views/"),
    Row("Pages", "saved_view_delete", "POST", "/views/{saved_view}/delete/",
        page(members="404", viewer=f"302 → / {CHANGED}", stranger="404", norole="404",
             superuser="404"),
        action="delete the viewer's saved view"),
    _get_on_post_only("saved_view_delete", "/views/{saved_view}/delete/"),
    Row("Pages", "approval_queue", "GET", "/approvals/",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows='id="approval-{approval}"'),
    Row("Pages", "approval_permalink", "GET", "/approvals/{approval}/",
        page(members="302 → /sagas/shop/storebot-1/", stranger="404", norole="404"),
        action="an approval's permalink: its record on the saga page"),
    _decide("approve"),
    _decide("reject"),
    Row("Pages", "approval_decide", "POST", "/approvals/{approval}/decide/",
        _need(f"302 → /approvals/ {CHANGED}", APPROVERS, "302 → /approvals/",
              stranger="302 → /approvals/", norole="302 → /approvals/"),
        action="approve, no htmx: the message follows the redirect",
        data={"decision": "approve", "reason": "checked"}),
    _get_on_post_only("approval_decide", "/approvals/{approval}/decide/"),
    Row("Pages", "approvals_bulk", "POST", "/approvals/bulk/",
        _need(HTMX_OK, APPROVERS, "403", stranger="404", norole="403"),
        action="bulk approve, htmx",
        data={"approval": "{approval}", "decision": "approve", "reason": "checked"}, htmx=True),
    _get_on_post_only("approvals_bulk", "/approvals/bulk/"),
    Row("Pages", "decision_link", "GET", "/decide/{decide_token}/",
        page(members="403", approver="200", stranger="403", norole="403"),
        action="the approver's mailed link: the confirm page, nothing decided", shows="{saga_id}"),
    Row("Pages", "decision_link", "POST", "/decide/{decide_token}/",
        page(members="403", approver=f"200 {CHANGED}", stranger="403", norole="403"),
        action="approve through the approver's link",
        data={"decision": "approve", "reason": "checked"}),
    Row("Pages", "decision_link", "GET", "/decide/forged-token/",
        page(members="404", stranger="404", norole="404"), action="a forged link"),
    Row("Pages", "inbox", "GET", "/inbox/",
        page(viewer=f"200 {NOTHING}", operator=f"200 {NOTHING}", approver="200", admin="200",
             stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows="{saga_id}"),  # the approval waiting for a vote
    Row("Pages", "inbox_badges", "GET", "/inbox/badges/",
        page(members="200", stranger="200", norole="200")),
    Row("Pages", "attention", "GET", "/attention/",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows="{failed_saga_id}"),
    _step_action("retry", ""),
    _step_action("resolve", "fixed by hand"),
    _step_action("leave", "known issue"),
    _get_on_post_only("step_action", "/steps/{failed_step}/action/"),
    Row("Pages", "step_acknowledge", "POST", "/steps/{failed_step}/acknowledge/",
        _need(HTMX_OK, COLLABORATORS, "403", stranger="404", norole="403"),
        action="acknowledge a failed undo, htmx", htmx=True),
    _get_on_post_only("step_acknowledge", "/steps/{failed_step}/acknowledge/"),
    Row("Pages", "note_add", "POST", "/notes/saga/{saga_pk}/",
        _need(f"302 → /sagas/shop/storebot-1/ {CHANGED}", COLLABORATORS, "403", stranger="404",
              norole="403"),
        action="write a note", data={"body": "carrier called back"}),
    _get_on_post_only("note_add", "/notes/saga/{saga_pk}/"),
    Row("Pages", "saga_notes", "GET", "/sagas/{saga_pk}/notes/",
        page(members="200", stranger="404", norole="404"),
        action="a saga's owner and notes, read again live", shows="Owner and notes"),
    Row("Pages", "note_edit", "POST", "/notes/{note}/edit/",
        page(viewer="403", operator=f"302 → /sagas/shop/storebot-1/ {CHANGED}", approver="403",
             admin="403", stranger="404", norole="403"),
        action="edit a note (the operator wrote it)", data={"body": "carrier called twice"}),
    _get_on_post_only("note_edit", "/notes/{note}/edit/"),
    Row("Pages", "note_delete", "POST", "/notes/{note}/delete/",
        page(viewer="403", operator=f"302 → /sagas/shop/storebot-1/ {CHANGED}", approver="403",
             admin=f"302 → /sagas/shop/storebot-1/ {CHANGED}", stranger="404", norole="403"),
        action="delete a note (the operator wrote it)"),
    _get_on_post_only("note_delete", "/notes/{note}/delete/"),
    Row("Pages", "saga_assign", "POST", "/owners/saga/{saga_pk}/",
        _need(f"302 → /sagas/shop/storebot-1/ {CHANGED}", COLLABORATORS, "403", stranger="404",
              norole="403"),
        action="assign to a colleague", data={"owner": "approver-1"}),
    _get_on_post_only("saga_assign", "/owners/saga/{saga_pk}/"),
    Row("Pages", "saga_rollback_request", "POST", "/sagas/{running_saga_pk}/rollback-request/",
        _need(f"302 → /sagas/shop/manual-1/ {CHANGED}", OPERATORS, "403", stranger="404",
              norole="403"),
        action="request the rollback of a running saga", data={"reason": "wrong customer"}),
    _get_on_post_only("saga_rollback_request", "/sagas/{running_saga_pk}/rollback-request/"),
    Row("Pages", "steps_bulk", "POST", "/steps/bulk/",
        _need(HTMX_OK, OPERATORS, "403", stranger="404", norole="403"),
        action="bulk retry, htmx", data={"step": "{failed_step}", "action": "retry"}, htmx=True),
    _get_on_post_only("steps_bulk", "/steps/bulk/"),
    Row("Pages", "batch_list", "GET", "/batch/",
        page(members="200", stranger=f"200 {NOTHING}", norole=f"200 {NOTHING}"),
        shows='id="batch-{batch}"'),
    Row("Pages", "batch_new", "GET", "/batch/new/?action=retry&project=shop",
        _need("200", OPERATORS, "403", stranger=f"200 {NOTHING}", norole="403"),
        action="confirm page: the exact count and a sample", shows="{failed_saga_id}"),
    Row("Pages", "batch_new", "POST", "/batch/new/",
        _need(HTMX_OK, OPERATORS, "403", stranger="400", norole="403"),
        action="start a batch retry over a filter, htmx",
        data={"action": "retry", "filter": "project=shop", "reason": "outage over"},
        htmx=True),
    Row("Pages", "batch_detail", "GET", "/batch/{batch}/",
        page(members="200", stranger="404", norole="404"), shows="batch #{batch}"),
    Row("Pages", "batch_progress", "GET", "/batch/{batch}/progress/",
        page(members="200", stranger="404", norole="404"), shows="0 of 1"),
    Row("Pages", "batch_cancel", "POST", "/batch/{batch}/cancel/",
        page(viewer="403", operator=HTMX_OK, approver="403", admin=HTMX_OK, stranger="404",
             norole="404"),
        action="cancel a queued batch job, htmx", htmx=True),
    _get_on_post_only("batch_cancel", "/batch/{batch}/cancel/"),
    Row("Pages", "policy_list", "GET", "/policies/",
        page(members="200", stranger=f"200 {NOTHING}", norole="403"), shows="{policy_name}"),
    Row("Pages", "policy_list", "POST", "/policies/",
        _need(f"302 → /policies/ {CHANGED}", ADMINS, "403", stranger="400", norole="403"),
        action="create a policy in shop",
        data={"project": "shop", "name": "all refunds", "tool_glob": "refund_*",
              "approvers_required": "1", "enabled": "on"}),
    Row("Pages", "policy_edit", "POST", "/policies/{policy}/",
        _need(f"302 → /policies/ {CHANGED}", ADMINS, "403", stranger="302 → /policies/",
              norole="403"),
        action="edit",
        data={"name": "big refunds", "tool_glob": "refund_*", "approvers_required": "2",
              "enabled": "on"}),
    _get_on_post_only("policy_edit", "/policies/{policy}/"),
    Row("Pages", "audit", "GET", "/audit/",
        _need("200", ADMINS, "403", stranger=f"200 {NOTHING}", norole="403"),
        shows="saga:{saga_id}"),
    Row("Pages", "audit", "GET", "/audit/?format=csv",
        _need("200", ADMINS, "403", stranger=f"200 {NOTHING}", norole="403"),
        action="CSV export", shows="saga:{saga_id}"),
    Row("Pages", "tool_list", "GET", "/tools/",
        page(members="200", stranger="200", norole="200")),
    Row("Pages", "tool_detail", "GET", "/tools/charge/",
        page(members="200", stranger="200", norole="200")),
    Row("Pages", "saga_export_csv", "GET", "/sagas/export.csv",
        page(members=f"200 {CHANGED}", stranger=f"200 {OTHER_CHANGED} {NOTHING}",
             norole=f"200 {NOTHING}"),
        action="export, audited", shows="{saga_id}"),
    Row("Pages", "saga_export_jsonl", "GET", "/sagas/export.jsonl?steps=1",
        page(members=f"200 {CHANGED}", stranger=f"200 {OTHER_CHANGED} {NOTHING}",
             norole=f"200 {NOTHING}"),
        action="export with steps, audited", shows="{saga_id}"),
    Row("Pages", "login", "GET", "/login/", everyone("200")),
    Row("Pages", "logout", "POST", "/logout/", everyone(LOGIN)),
    Row("Pages", "logout", "GET", "/logout/", everyone("405")),
    Row("Pages", "healthz", "GET", "/healthz", everyone("200")),
    Row("Pages", "favicon", "GET", "/favicon.ico", everyone("302 → /static/sagaboard/favicon.svg")),
    Row("Pages", "metrics", "GET", "/metrics", everyone("200"),
        action="no SAGABOARD_METRICS_TOKEN"),
    Row("Pages", "metrics", "GET", "/metrics", everyone("401"),
        action="SAGABOARD_METRICS_TOKEN set", settings={"SAGABOARD_METRICS_TOKEN": "m-secret"}),
    Row("Pages", "admin", "GET", "/admin/", {**everyone(ADMIN_LOGIN), "superuser": "200"}),
    Row("Pages", "admin", "GET", "/admin/sagaboard/apitoken/",
        {**everyone(ADMIN_LOGIN), "superuser": "200"}, shows="{prefix}"),
]  # fmt: skip

_OWN = "200"

API: list[Row] = [
    Row("API", "api-root", "GET", "/api/v1/", everyone("404")),
    Row("API", "openapi-json", "GET", "/api/v1/openapi.json", everyone("200")),
    Row("API", "openapi-view", "GET", "/api/v1/docs", everyone("200")),
    Row("API", "POST /api/v1/events", "POST", "/api/v1/events",
        api(token=f"200 {CHANGED}", other_token="422"),
        action="the next event of a saga shop's agent runs", data={"events": "{more_events}"}),
    Row("API", "GET /api/v1/rollback-requests", "GET", "/api/v1/rollback-requests",
        api(token="200", other_token="200")),
    Row("API", "GET /api/v1/sagas", "GET", "/api/v1/sagas",
        api(token="200", other_token=f"200 {NOTHING}"), shows="{saga_id}"),
    Row("API", "POST /api/v1/sagas", "POST", "/api/v1/sagas",
        api(token=f"201 {CHANGED}", other_token=f"201 {OTHER_CHANGED}"),
        action="begin", data={"event_id": "begin-1", "name": "new saga", "id": "new-1"}),
    Row("API", "GET /api/v1/sagas/{saga_id}", "GET", "/api/v1/sagas/{saga_id}",
        api(token="200", other_token="404")),
    Row("API", "GET /api/v1/sagas/{saga_id}/events", "GET", "/api/v1/sagas/{saga_id}/events",
        api(token="200", other_token="404")),
    Row("API", "POST /api/v1/sagas/{saga_id}/steps", "POST", "/api/v1/sagas/{hand_saga}/steps",
        api(token=f"201 {CHANGED}", other_token="404"),
        action="a saga of shop driven by hand",
        data={"event_id": "add-1", "tool_name": "send_mail"}),
    Row("API", "POST /api/v1/sagas/{saga_id}/steps/{step_id}/complete", "POST",
        "/api/v1/sagas/{hand_saga}/steps/step-1/complete",
        api(token=f"200 {CHANGED}", other_token="404"), data={"event_id": "done-1"}),
    Row("API", "POST /api/v1/sagas/{saga_id}/steps/{step_id}/fail", "POST",
        "/api/v1/sagas/{hand_saga}/steps/step-1/fail",
        api(token=f"200 {CHANGED}", other_token="404"),
        data={"event_id": "fail-1", "error": "boom"}),
    Row("API", "POST /api/v1/sagas/{saga_id}/complete", "POST",
        "/api/v1/sagas/{empty_hand_saga}/complete",
        api(token=f"200 {CHANGED}", other_token="404"), data={"event_id": "end-1"}),
    Row("API", "POST /api/v1/sagas/{saga_id}/rollback", "POST",
        "/api/v1/sagas/{hand_saga}/rollback",
        api(token=f"202 {CHANGED}", other_token="404"),
        data={"event_id": "undo-1", "reason": "changed my mind"}),
    Row("API", "GET /api/v1/sagas/{saga_id}/steps/{step_id}/approval-rule", "GET",
        "/api/v1/sagas/{mirrored_saga}/steps/step-2/approval-rule",
        api(token="200", other_token="404")),
    Row("API", "POST /api/v1/sagas/{saga_id}/steps/{step_id}/approval", "POST",
        "/api/v1/sagas/{mirrored_saga}/steps/step-2/approval",
        api(token=f"200 {CHANGED}", other_token="404"), action="ask", data={}),
    Row("API", "GET /api/v1/approvals/{approval_id}", "GET",
        "/api/v1/approvals/{api_approval}?wait=0", api(token="200", other_token="404")),
    Row("API", "GET /api/v1/sagas/{saga_id}/steps/{step_id}/decision", "GET",
        "/api/v1/sagas/{halted_saga}/steps/step-1/decision?wait=0",
        api(token="200", other_token="404")),
    Row("API", "POST /api/v1/sagas/{saga_id}/steps/{step_id}/decision/ack", "POST",
        "/api/v1/sagas/{halted_saga}/steps/step-1/decision/ack",
        api(token=f"200 {CHANGED}", other_token="404"),
        action="an operator's retry, done", data={"action": "retry"}),
    Row("API", "GET /api/v1/batches/{job_id}", "GET", "/api/v1/batches/{batch}",
        api(token="200", other_token="404"), action="a batch job of shop: totals, items",
        shows="{failed_saga_id}"),
    Row("API", "GET /api/v1/sagas/{saga_id}", "DELETE", "/api/v1/sagas/{saga_id}",
        everyone("405"), action="no such method"),
]  # fmt: skip

SLACK: list[Row] = [
    Row("Slack", "slack_interactions", "POST", "/slack/interactions", everyone("401"),
        action="not signed by Slack: a session or an API token counts for nothing",
        data={"payload": "unsigned"}, settings={"SAGABOARD_SLACK_SIGNING_SECRET": "slack-secret"}),
    Row("Slack", "slack_interactions", "POST", "/slack/interactions", everyone("404"),
        action="no SAGABOARD_SLACK_SIGNING_SECRET", data={"payload": "unsigned"}),
]  # fmt: skip
"""Slack's interactivity endpoint: Slack's signature is its authentication (its own tests
sign requests as Slack does: tests/sagaboard/approvals/test_slack_interactions.py)."""

WEBSOCKETS: list[Row] = [
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?list=1&after=0",
        ws(members="accept", stranger=f"accept {NOTHING}", norole=f"accept {NOTHING}"),
        action="saga list", shows="{saga_id}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?saga={saga_pk}&after=0",
        ws(members="accept", stranger=f"accept {NOTHING}", norole=f"accept {NOTHING}"),
        action="a saga of shop", shows="{saga_id}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?queue=1&after=0",
        ws(members="accept", stranger=f"accept {NOTHING}", norole=f"accept {NOTHING}"),
        action="approval queue", shows="approval-{approval}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?attention=1&after=0",
        ws(members="accept", stranger=f"accept {NOTHING}", norole=f"accept {NOTHING}"),
        action="needs attention", shows="{failed_saga_id}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?list=1&after=0", everyone("close 4403"),
        action="opened by another site's page", headers={"origin": "https://evil.example"},
        shows="{saga_id}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?list=1&after=0", everyone("close 4403"),
        action="opened from another port of the dashboard's host",
        headers={"origin": "http://localhost:8000"}, shows="{saga_id}"),
    Row("Websocket", "ws /ws/sagas/", "WS", "/ws/sagas/?list=1&after=0", everyone("close 4403"),
        action="opened from another scheme on the dashboard's host",
        headers={"origin": "https://localhost"}, shows="{saga_id}"),
]  # fmt: skip

ROWS: list[Row] = [*PAGES, *API, *SLACK, *WEBSOCKETS]

# ---------------------------------------------------------------- rendering

HEADING = "## Permission matrix"


def render_markdown(rows: list[Row] | None = None) -> str:
    """The docs section: heading, personas, notation, one table per section."""
    rows = ROWS if rows is None else rows
    out = [
        HEADING,
        "",
        "<!-- Generated by `python -m tests.support.permission_matrix --write docs/security.md`"
        " from tests/support/permission_matrix.py; tests/security/test_permission_matrix.py"
        " sends every request below as every persona and fails when an answer or this text"
        " differs. Do not edit by hand. -->",
        "",
        "Every route of the dashboard, the API and the live feed, as every persona. The objects"
        " acted on belong to project `shop`.",
        "",
        "| persona | who |",
        "|---|---|",
        *[f"| {name} | {who} |" for name, who in PERSONAS.items()],
        "",
        "Notation: the HTTP status; `302 → login`: sent to the login page; `302 → /x/`:"
        " redirected there with a message; `✎`: changed shop's data (a person's action also"
        " wrote an audit entry); `✎ other`: changed only project other's data; `∅`: answered"
        " with nothing of shop in it. A cell without `✎` changed nothing at all (no audit"
        " entry, no state). Websockets: `accept` (and catch up on shop's events),"
        " `accept ∅` (and never send anything of shop), `close 4401` (not logged in) or"
        " `close 4403` (the page's Origin, scheme, host and port, is not the dashboard's:"
        " refused before the feed). A refusal accepts the handshake and closes at once with"
        " the code, which is what a browser's `CloseEvent.code` shows; nothing is sent.",
    ]
    for section in dict.fromkeys(r.section for r in rows):
        out += ["", f"### {section}", ""]
        out.append("| request | " + " | ".join(PERSONAS) + " |")
        out.append("|---|" + "---|" * len(PERSONAS))
        for row in (r for r in rows if r.section == section):
            cells = " | ".join(row.answers[p] for p in PERSONAS)
            out.append(f"| `{row.label}` | {cells} |")
    return "\n".join(out) + "\n"


def section_of(text: str) -> str:
    """The ``## Permission matrix`` section of a markdown text ("" if none), to the next ``## ``."""
    start = text.find(HEADING + "\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start : end + 1]


def write_section(path: Path) -> None:
    """Put the rendered section in ``path``: replace it, or append it (creating the file)."""
    text = path.read_text() if path.exists() else ""
    old = section_of(text)
    new = render_markdown()
    if old:
        text = text.replace(old, new + ("\n" if old.endswith("\n\n") else ""))
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + new
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the docs section")
    parser.add_argument("--write", type=Path, metavar="FILE", help="update the section in FILE")
    args = parser.parse_args(argv)
    if args.write:
        write_section(args.write)
    if args.markdown or not args.write:
        sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
