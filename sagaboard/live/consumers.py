"""The live feed: rendered saga fragments pushed to a logged-in browser, for its projects only.

The page says what it shows in the websocket URL: ``?saga=<pk>`` for a saga page,
``?list=1`` (with the list's filters) for the first page of the saga list,
``?queue=1`` for the approval queue, ``?attention=1`` for the failed undos,
``?overview=1`` for the overview, ``?badges=1`` for any other page (it hears only
that something changed, so its navigation badges ask for their counts again), and
``after=<log id>`` for the last event it was rendered with, so a browser that
reconnects catches up on everything it missed from the event log.

The overview and the badges pages hear only the events that can change what they
count (``_Touches``): at once on the first, then at most once per ``SOON_SECONDS``
while more arrive (always once after the last): a page of counts does not need every
one of a burst's thousand events, and the counts are read afresh for each send.

Who may watch is checked at the handshake and again while the socket is open
(``sagaboard.live.access``): a session that ends or a user who may no longer see
a project the page shows gets the socket closed (4401, 4403), and nothing after.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from sagaboard.access.reads import visible
from sagaboard.health.reads.overview import ATTENTION_STEP_STATES
from sagaboard.live import fragments
from sagaboard.live.access import (
    CLOSE_FORBIDDEN,
    CLOSE_UNAUTHENTICATED,
    Access,
    access_for_sessions,
    session_tag,
    user_group,
)
from sagaboard.live.relay import project_group, recheck, relay
from sagaboard.models import OPERATOR_STATES, Event, Saga, Viewer

log = logging.getLogger("sagaboard.live.consumers")

CATCH_UP_PAGE = 1000
CLOSE_TRY_AGAIN = 1013
"""The re-check itself failed: the browser reconnects (a fresh handshake checks again)."""
SENT_KEPT = 20_000
SEND_BATCH = 200
"""At most this many queued fragments rendered in one database thread hop."""
SOON_SECONDS = 1.0
BADGES_PING = '<span id="live-ping" hx-swap-oob="true"></span>'
"""What a page without a live body hears: its badges ask again (static/sagaboard/badges.js)."""


class SagaFeedConsumer(AsyncWebsocketConsumer):
    revoked = False
    groups: tuple[str, ...] = ()
    soon: _Soon | None = None
    sending: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if user is None or not user.is_authenticated or not session_key:
            # Accepted, then closed: a code sent before accepting reaches a browser as an
            # HTTP 403 without it. Nothing is sent in between.
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        params = {k: v[-1] for k, v in parse_qs(self.scope["query_string"].decode()).items()}
        self.view = _View.from_params(params)
        self.user = user
        self.session_key, self.session_tag = session_key, session_tag(session_key)
        # The user's group first: a revocation committed from here on reaches this socket,
        # and one committed before is already in what is read next: the session and the
        # projects, read again after joining (the handshake read the session before it).
        self.groups = (user_group(user.pk),)
        await self.channel_layer.group_add(self.groups[0], self.channel_name)
        access = await _access_of(session_key)
        if access.user is None or access.user.pk != user.pk:
            await self._leave_groups()
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.projects = sorted(access.projects)
        if self.view.saga_pk is not None:
            # A saga page shows one project: only its events, only its membership matters.
            saga_project = await _saga_project(self.view.saga_pk)
            self.projects = [p for p in self.projects if p == saga_project]
        for group in (project_group(pk) for pk in self.projects):
            self.groups += (group,)
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        recheck(access_for_sessions).add(self)
        after, newest = params.get("after", ""), await _newest_id()
        # Never past the log's end: the first browser's ``after`` starts this process's relay,
        # so one typed into the URL would freeze every browser's feed (and overflow SQL).
        start = min(int(after), newest) if after.isdigit() else newest
        # Per project, the newest event this browser has: everything after it is either
        # relayed or refilled from the log, so delivery is complete whatever is dropped.
        self.last: dict[int, int] = dict.fromkeys(self.projects, start)
        self.sent: set[int] = set()
        self.outbox: list[tuple[int, int]] = []  # (saga pk, log id) to render and send, in order
        if relay(start).degraded:
            await self.live_state(True)
        await self._catch_up(start)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Live events skip Channels' per-message hop to the sync thread (it closes stale DB
        # connections, which these handlers reach only through database_sync_to_async):
        # with 200 browsers that hop costs a fifth of the server's CPU.
        if message.get("type") == "saga.event":
            await self.saga_event(message)
        elif message.get("type") == "saga.tail":
            await self.saga_tail(message)
        else:
            await super().dispatch(message)

    async def disconnect(self, code: int) -> None:
        if self.soon is not None:
            self.soon.cancel()
        if self.sending is not None:
            self.sending.cancel()
        recheck(access_for_sessions).discard(self)
        await self._leave_groups()

    async def _leave_groups(self) -> None:
        groups, self.groups = self.groups, ()
        for group in groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def access_changed(self, message: dict[str, Any]) -> None:
        """A revocation pushed by the app (``live_access``): re-check this socket now."""
        if self.revoked:
            return
        if message.get("ended") == self.session_tag:  # this very session logged out
            await self._revoke(CLOSE_UNAUTHENTICATED)
            return
        message_id = message.get("id")
        try:
            access = await (
                _checks.get((message_id, self.session_key))
                if message_id
                else _access_of(self.session_key)
            )
        except Exception:  # the database blinked: closed, never left open unchecked
            log.exception("could not re-check a live feed's access after a revocation")
            await self._revoke(CLOSE_TRY_AGAIN)
            return
        await self.apply_access(access)

    async def apply_access(self, access: Access) -> None:
        """Close the socket if its session or its projects are no longer what it shows.

        Losing a project the page does not show (another project, on a saga page)
        keeps the feed open; gaining one shows on the next page load.
        """
        if self.revoked:
            return
        if access.user is None or access.user.pk != self.user.pk:
            await self._revoke(CLOSE_UNAUTHENTICATED)
        elif not set(self.projects) <= access.projects:
            await self._revoke(CLOSE_FORBIDDEN)
        else:
            self.user = access.user  # current permissions for what is rendered per user

    async def _revoke(self, code: int) -> None:
        """Nothing is sent after this: every send checks ``revoked`` last, then the close."""
        self.revoked = True
        recheck(access_for_sessions).discard(self)
        await self.close(code=code)
        await self._leave_groups()

    async def saga_event(self, message: dict[str, Any]) -> None:
        if self.revoked:
            return
        project, log_id = message["project"], message["log_id"]
        last = self.last.get(project)
        if last is None or log_id in self.sent:
            return  # not this browser's project, or already sent (by a catch-up)
        if log_id <= last:
            # Committed after newer events were relayed (PostgreSQL assigns ids at insert;
            # the relay reads such late ids again): new to this browser, so show it.
            await self._push(project, log_id, message["saga_pk"])
            return
        prev = message["prev"]
        if prev is None or prev > last:
            # A message was dropped (prev is past what we have), or a relay has just
            # (re)started and cannot say what came before: refill from the log.
            await self._catch_up(last, project=project)
            return
        await self._push(project, log_id, message["saga_pk"])

    async def live_state(self, degraded: bool) -> None:
        """The relay of this process failed (or is back): say so in the page's header."""
        if not self.revoked:
            await self._send_or_gone(fragments.live_state(degraded))

    async def saga_tail(self, message: dict[str, Any]) -> None:
        """The relay's newest id for a project: past ours means its last messages were lost."""
        project = message["project"]
        last = self.last.get(project)
        if not self.revoked and last is not None and message["log_id"] > last:
            await self._catch_up(last, project=project)

    async def _catch_up(self, after: int, *, project: int | None = None) -> None:
        while not self.revoked:
            rows = await _missed(self.projects, after, project)
            for log_id, project_pk, saga_pk in rows:
                if log_id not in self.sent and not self.revoked:
                    await self._push(project_pk, log_id, saga_pk)
            if len(rows) < CATCH_UP_PAGE:
                break
            after = rows[-1][0]
        if self.sending is not None:
            # Sent before the next message is handled: a browser that just connected has
            # its catch-up before anything newer, and a closed socket nothing half-sent.
            await self.sending

    async def _push(self, project: int, log_id: int, saga_pk: int) -> None:
        self.last[project] = max(log_id, self.last.get(project, 0))
        self.sent.add(log_id)
        if len(self.sent) > SENT_KEPT * 2:  # forget the oldest half (a resend is harmless)
            self.sent = set(sorted(self.sent)[-SENT_KEPT:])
        if self.view.overview or self.view.badges:
            touches = await shared.touches(log_id)
            if touches.overview if self.view.overview else touches.badges:
                if self.soon is None:
                    self.soon = _Soon(self._send_summary)
                self.soon.ask()
            return
        # Queued, not rendered here: a message is taken off the channel layer at once, and
        # whatever piled up while a render ran is rendered in one thread hop (``_send_queued``).
        # One event at a time, a busy process fell further behind its relay with every burst.
        self.outbox.append((saga_pk, log_id))
        if self.sending is None or self.sending.done():
            self.sending = asyncio.ensure_future(self._send_queued())

    async def _send_queued(self) -> None:
        """Render and send the queued fragments, oldest first, until none is left."""
        try:
            while self.outbox and not self.revoked:
                batch, self.outbox = self.outbox[:SEND_BATCH], self.outbox[SEND_BATCH:]
                if self.view.attention:  # per user: the whole body
                    htmls = [await _render_attention(self.user, log_id) for _, log_id in batch]
                else:
                    htmls = await shared.get_many(self.view, batch)
                for html in htmls:
                    if html and not self.revoked:  # revoked while rendering: dropped
                        await self._send_or_gone(html)
        except Exception:  # as an error in a handler did: closed, the browser reconnects
            log.exception("could not render or send the live feed's fragments")
            self.revoked = True  # nothing more is sent on this socket
            await self.close(code=1011)

    async def _send_or_gone(self, html: str) -> None:
        """Send ``html``; a browser that went away (its tab closed or navigated elsewhere)
        is no error: the server's send raises ``OSError`` then (uvicorn's and gunicorn's
        ``ClientDisconnected``), and nothing more is sent on this socket."""
        try:
            await self.send(text_data=html)
        except OSError as gone:
            name = type(gone).__name__
            log.debug("the live feed's browser went away (%s): nothing more is sent", name)
            self.revoked = True
            self.outbox = []

    async def _send_summary(self) -> None:
        """The overview's live part (for this user's projects, as of the newest event
        this socket has), or the badges' ping."""
        if self.view.overview:
            newest = max(self.last.values(), default=0)
            html = await shared.overview(tuple(self.projects), newest)
        else:
            html = BADGES_PING
        if not self.revoked:
            await self._send_or_gone(html)


class _Soon:
    """Run ``send`` now, then at most once per ``SOON_SECONDS`` while asked again.

    Asked during the pause, it runs once more at its end, so the last event of a
    burst is always shown; asked never again, it rests.
    """

    def __init__(self, send: Callable[[], Awaitable[None]]) -> None:
        self.send = send
        self.again = False
        self.task: asyncio.Task[None] | None = None

    def ask(self) -> None:
        if self.task is not None and not self.task.done():
            self.again = True
            return
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.again = False
            try:
                await self.send()
            except Exception:  # a blink of the database: the next event asks again
                log.exception("could not send a live summary")
            await asyncio.sleep(SOON_SECONDS)
            if not self.again:
                return

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class _View:
    """What the browser's page shows, so only fragments with a target on it are sent."""

    def __init__(self, saga_pk: int | None, listing: bool, filters: dict[str, str]) -> None:
        self.saga_pk, self.listing, self.filters = saga_pk, listing, filters
        self.queue = self.attention = self.overview = self.badges = False

    @classmethod
    def from_params(cls, params: dict[str, str]) -> _View:
        saga = params.get("saga", "")
        names = ("status", "tool", "q", "project", "outcome", "waiting")
        filters = {k: params[k] for k in names if params.get(k)}
        view = cls(int(saga) if saga.isdigit() else None, params.get("list") == "1", filters)
        view.queue, view.attention = params.get("queue") == "1", params.get("attention") == "1"
        view.overview, view.badges = params.get("overview") == "1", params.get("badges") == "1"
        return view


@database_sync_to_async
def _saga_project(saga_pk: int) -> int | None:
    return Saga.objects.filter(pk=saga_pk).values_list("project_id", flat=True).first()


@database_sync_to_async
def _access_of(session_key: str) -> Access:
    return access_for_sessions([session_key])[session_key]


class _Checks:
    """One check per session per revocation message, however many of its sockets hear it.

    A user with 200 tabs open who logs out elsewhere costs one session check, not 200.
    Keyed by the message's id too: a check started for an earlier message may have read
    the state before this one's change, so it is never reused for a later message.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.tasks: OrderedDict[tuple[str, str], asyncio.Task[Access]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> asyncio.Task[Access]:
        task = self.tasks.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = self.tasks[key] = asyncio.ensure_future(_access_of(key[1]))
            while len(self.tasks) > self.size:
                self.tasks.popitem(last=False)
        return task


_checks = _Checks()


@database_sync_to_async
def _missed(projects: list[int], after: int, project: int | None) -> list[tuple[int, int, int]]:
    wanted = [project] if project is not None else projects
    return list(
        Event.objects.filter(project_id__in=wanted, pk__gt=after)
        .order_by("pk")
        .values_list("pk", "project_id", "saga_id")[:CATCH_UP_PAGE]
    )


@database_sync_to_async
def _newest_id() -> int:
    return visible.last_event_id()


@database_sync_to_async
def _render_detail(saga_pk: int, log_id: int) -> str:
    return fragments.saga_detail(saga_pk, log_id)


@database_sync_to_async
def _render_rows(items: list[tuple[int, int]]) -> dict[tuple[int, int], Any]:
    """``_render_row`` for each (saga pk, log id), in one thread hop and two queries."""
    sagas = visible.saga_rows({saga_pk for saga_pk, _ in items})
    return {
        (saga_pk, log_id): (*sagas[saga_pk], fragments.saga_row(sagas[saga_pk][0], log_id))
        for saga_pk, log_id in items
        if saga_pk in sagas
    }


@database_sync_to_async
def _render_row(saga_pk: int, log_id: int) -> tuple[Saga, frozenset[str], frozenset[str], str]:
    saga = visible.saga_row(saga_pk)  # with what the list's row shows (step count, ...)
    steps = list(saga.steps.values_list("tool_name", "error"))
    tools = frozenset(tool for tool, _ in steps)
    errors = frozenset(error for _, error in steps if error)
    return saga, tools, errors, fragments.saga_row(saga, log_id)


# Events that change what the needs-attention page lists.
_ATTENTION_STATES = frozenset(OPERATOR_STATES)


@database_sync_to_async
def _render_attention(user: Viewer, log_id: int) -> str:
    event = Event.objects.filter(pk=log_id).values("kind", "from_state", "to_state").first()
    if event is None:
        return ""
    touches = event["from_state"] in _ATTENTION_STATES or event["to_state"] in _ATTENTION_STATES
    if not (touches or event["kind"].startswith("step.")):
        return ""
    return fragments.attention_body(visible.projects_for_user(user))


class _Touches:
    """What an event can change: the overview's counts and lists, the badges' counts."""

    def __init__(self, event: dict[str, Any] | None) -> None:
        if event is None:  # gone (retention): nothing to show for it
            self.overview = self.badges = False
            return
        kind, states = event["kind"], {event["from_state"], event["to_state"]}
        # Forward progress of a step (added, completed) moves no count: the saga's own
        # events (begin, complete, rollback...) and the undo side do.
        self.overview = kind not in ("step.add", "step.complete") or bool(states & _OVERVIEW_STATES)
        # Approvals waiting, failed undos, and the sagas someone owns (any move of one).
        self.badges = (
            kind.startswith("approval.")
            or bool(states & _ATTENTION_STATES)
            or kind == "saga.assign"
            or event["saga__owner_id"] is not None
        )


_OVERVIEW_STATES = frozenset(ATTENTION_STEP_STATES)


@database_sync_to_async
def _touches(log_id: int) -> _Touches:
    event = (
        Event.objects.filter(pk=log_id)
        .values("kind", "from_state", "to_state", "saga__owner_id")
        .first()
    )
    return _Touches(event)


@database_sync_to_async
def _render_overview(projects: tuple[int, ...]) -> str:
    return fragments.overview_live(projects)


@database_sync_to_async
def _render_queue(saga_pk: int, log_id: int) -> str:
    """Queue items touched by this event: a new one appended, a decided one removed."""
    event = Event.objects.filter(pk=log_id).values("kind", "step_id").first()
    if event is None or not event["kind"].startswith("approval."):
        return ""
    saga = Saga.objects.select_related("project").get(pk=saga_pk)
    return fragments.queue_changes([saga.project], saga_pk, event["step_id"], event["kind"])


class _Fragments:
    """Each fragment rendered once per process, however many browsers show it.

    With 200 browsers on one list, an event costs one query and one render, not
    200: the first consumer to ask renders, the others await the same task.
    Fragments hold no per-user content (scoping happens before: a consumer only
    hears its projects' events), so sharing them leaks nothing.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.tasks: OrderedDict[tuple[Any, ...], asyncio.Task[Any]] = OrderedDict()

    def _task(self, key: tuple[Any, ...]) -> asyncio.Task[Any] | None:
        """The render of ``key`` this loop may share; a cancelled one (cancelled from
        outside: sockets only ever await it shielded) is not shared, it is made again."""
        task = self.tasks.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop() or task.cancelled():
            return None
        return task

    def _once(self, key: tuple[Any, ...], make: Callable[[], Awaitable[Any]]) -> Any:
        """The shared render of ``key``, shielded: a socket that closes while it waits
        (a browser leaving the page) must not cancel the render other sockets wait for;
        a cancelled shared render once left a saga page's feed failing on every
        reconnect, its status stuck."""
        task = self._task(key)
        if task is None:
            task = self.tasks[key] = asyncio.ensure_future(make())
            while len(self.tasks) > self.size:
                self.tasks.popitem(last=False)
        return asyncio.shield(task)

    async def get(self, view: _View, saga_pk: int, log_id: int) -> str:
        if view.queue:
            queue: str = await self._once(
                ("queue", saga_pk, log_id), lambda: _render_queue(saga_pk, log_id)
            )
            return queue
        if view.saga_pk is not None:
            if view.saga_pk != saga_pk:
                return ""
            html: str = await self._once(
                ("detail", saga_pk, log_id), lambda: _render_detail(saga_pk, log_id)
            )
            return html
        if not view.listing:
            return ""
        saga, tools, errors, row = await self._once(
            ("row", saga_pk, log_id), lambda: _render_row(saga_pk, log_id)
        )
        return self._on_list(view, saga, tools, errors, row)

    @staticmethod
    def _on_list(
        view: _View, saga: Saga, tools: frozenset[str], errors: frozenset[str], row: str
    ) -> str:
        if visible.saga_matches(saga, tools, errors=errors, **view.filters):
            return row
        # No longer on this filtered list (it left the status shown): take the row away.
        return fragments.saga_row_gone(saga.pk)

    async def get_many(self, view: _View, items: list[tuple[int, int]]) -> list[str]:
        """``get`` for each (saga pk, log id), in order; list rows not rendered yet by this
        process are rendered together, in one thread hop."""
        if not view.listing or view.queue or view.saga_pk is not None:
            return [await self.get(view, saga_pk, log_id) for saga_pk, log_id in items]
        keys = [("row", saga_pk, log_id) for saga_pk, log_id in items]
        tasks: dict[tuple[Any, ...], asyncio.Future[Any]] = {}
        for key in dict.fromkeys(keys):
            task = self._task(key)
            if task is not None:
                tasks[key] = asyncio.shield(task)
        missing = [key for key in dict.fromkeys(keys) if key not in tasks]
        if missing:
            together = asyncio.ensure_future(_render_rows([(k[1], k[2]) for k in missing]))
            for key in missing:
                tasks[key] = self._once(key, partial(_picked, together, (key[1], key[2])))
        found = [await tasks[key] for key in keys]
        return [self._on_list(view, *one) if one else "" for one in found]

    async def touches(self, log_id: int) -> _Touches:
        """What the event can change: read once per process, for all its sockets."""
        found: _Touches = await self._once(("touches", log_id), lambda: _touches(log_id))
        return found

    async def overview(self, projects: tuple[int, ...], log_id: int) -> str:
        """The overview for a set of projects as of ``log_id``: once for all its watchers
        (users of the same projects show the same overview)."""
        html: str = await self._once(
            ("overview", projects, log_id), lambda: _render_overview(projects)
        )
        return html


async def _picked(together: asyncio.Future[dict[Any, Any]], key: tuple[int, int]) -> Any:
    """One row of a render of several (None: its saga is gone)."""
    return (await together).get(key)


shared = _Fragments()
"""The process's renders, shared by its consumers."""
