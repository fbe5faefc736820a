"""Finding sagas: a list URL's query string as a typed ``SagaFilter``, and its SQL.

``parse(request.GET)`` reads every filter the saga list offers (README, "Finding sagas")
into a ``SagaFilter``, or raises ``SearchError`` naming the field a bad value came in;
``apply(qs, filter)`` narrows a queryset of sagas to what it selects (the caller scopes
``qs`` to the user's projects: ``select`` does both, ordered by the filter's sort).

Nothing a user types becomes a column, lookup or key name: ``filter(**user_keys)``
would put them in SQL (CVE-2019-14234, CVE-2024-42005). JSON paths are allow-listed
segments (identifier-ish keys and array indexes), written into a path string that is
itself a bound parameter; every value is bound. Each database uses its own tools:

* PostgreSQL: GIN (jsonb_ops) on ``sagaboard_jsonb(input)`` / ``(output)``, queried with
  ``@>`` containment (then the exact path, ``#>``) and ``@?`` for "has this path"; pg_trgm
  GIN on ``error`` for ``ILIKE '%word%'``.
* SQLite: the FTS5 table ``sagaboard_step_search`` (trigram: substrings) over each step's
  error, input and output, kept by triggers, narrows the steps; ``json_type`` /
  ``json_extract`` then check the exact path. Each user word is one quoted FTS5 string,
  so no text can be FTS5 syntax.

The migration that made those indexes is ``0013_search_list_and_search``; ``benchmarks/search.py``
measures every kind of search at 1M stored steps on both databases.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import (
    BooleanField,
    CharField,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
)
from django.db.models.expressions import RawSQL
from django.http import QueryDict
from django.utils import timezone

from sagaboard.infra import text_policy
from sagaboard.infra.http.limits import BIGINT
from sagaboard.models import ApiToken, Note, Project, Saga, Step, Viewer
from undo_core import RollbackOutcome, SagaStatus

WITH_EXCEPTIONS = "WITH_EXCEPTIONS"
"""A pseudo-status: rolled back with exceptions (rejected, resolved, left, in doubt)."""
WAITING = "WAITING"
"""A pseudo-status: its rollback waits for a person (an approver or an operator)."""
STATUS_CHOICES = [
    *((s.value, s.value) for s in SagaStatus),
    (WITH_EXCEPTIONS, "rolled back with exceptions"),
    (WAITING, "waiting for a person"),
]
SORTS = {"updated": "changed_at", "started": "received_at", "duration": "duration_ms"}
"""Sort name -> column; each has an index ``(project, column, id)`` (``Saga.Meta``)."""
ORDERS = ("desc", "asc")
QUICK_RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
"""``since``: changed within the last hour, day or week (the filter bar's quick ranges)."""
TIME_FIELDS = ("started_after", "started_before", "updated_after", "updated_before")
TEXT_FIELDS = ("project", "q", "tool", "error", "actor", "owner")
OWNER_ME, OWNER_NONE = "me", "none"
"""``owner``: the viewer, or nobody; any other value is a username."""
MAX_TEXT = 200
MAX_JSON_CONDITIONS = 5
MAX_PATH = 10

_KEY = r"[A-Za-z_][A-Za-z0-9_-]{0,99}"
_SEGMENT = re.compile(rf"\.({_KEY})|\[(\d{{1,6}})\]")
_CONDITION = re.compile(
    rf"^\s*(input|output)((?:\.{_KEY}|\[\d{{1,6}}\])+)\s*(?:=\s*(?P<value>.*?))?\s*$"
)
_FTS = "sagaboard_step_search"
_TRIGRAM = 3  # FTS5's trigram tokenizer matches strings of at least 3 characters


class SearchError(ValueError):
    """A query value the list cannot use; ``field`` names the parameter it came in."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class BadCursor(ValueError):
    """A page link this server did not issue (or issued for another sort)."""


Side = Literal["input", "output"]
PathSegment = str | int


@dataclass(frozen=True)
class JsonCondition:
    """``input.orderId = "o-17"`` (``compare``: the value there equals ``value``) or
    ``output.refund.id`` (the path exists) on any step of the saga."""

    side: Side
    path: tuple[PathSegment, ...]
    value: Any = None
    compare: bool = False

    def text(self) -> str:
        """The condition as the search box takes it."""
        path = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in self.path)
        if not self.compare:
            return f"{self.side}{path}"
        return f"{self.side}{path} = {json.dumps(self.value, ensure_ascii=False)}"


@dataclass(frozen=True)
class SagaFilter:
    """What a saga list shows: every filter (empty: not filtered) and the sort.

    Times are the server's clock: ``started_*`` compare ``received_at`` (when this server
    first stored the saga), ``updated_*`` and ``since`` compare ``changed_at``.
    """

    project: str = ""
    statuses: tuple[str, ...] = ()
    outcome: str = ""
    waiting: bool = False
    q: str = ""
    tool: str = ""
    error: str = ""
    json: tuple[JsonCondition, ...] = ()
    actor: str = ""
    owner: str = ""
    since: str = ""
    started_after: datetime | None = None
    started_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    sort: str = "updated"
    order: str = "desc"
    box: str = ""
    """The search box as typed (``q``): a name or id prefix (then ``q`` holds it too), or a
    condition that ``from_box`` names the field of (``json``: the first of ``json``)."""
    from_box: str = ""

    @property
    def newest_first(self) -> bool:
        return self.sort == "updated" and self.order == "desc"

    def live_params(self) -> dict[str, str] | None:
        """The list's filters as the live feed takes them (``visible.saga_matches``), or
        None when the feed cannot tell whether a changed saga belongs on this list: a sort
        other than newest first, or a filter it does not check (error, JSON, actor, time)."""
        unchecked = (
            self.error,
            self.json,
            self.actor,
            self.owner,
            *(getattr(self, name) for name in TIME_FIELDS),
        )
        if not self.newest_first or any(unchecked) or len(self.statuses) > 1:
            return None
        params = {"project": self.project, "tool": self.tool, "q": self.q}
        (status,) = self.statuses or ("",)
        if status == WITH_EXCEPTIONS:
            if self.outcome and self.outcome != WITH_EXCEPTIONS:
                return None
            params["outcome"] = WITH_EXCEPTIONS
        elif status == WAITING:
            params["waiting"] = "1"
        else:
            params["status"] = status
        if self.outcome:
            params["outcome"] = self.outcome
        if self.waiting:
            params["waiting"] = "1"
        return {k: v for k, v in params.items() if v}

    def to_query(self) -> QueryDict:
        """The filter as a canonical query string (no cursor): what a saved view keeps."""
        query = QueryDict(mutable=True)
        for name, value in self.bar().items():
            if value:
                query[name] = value
        query.setlist("status", list(self.statuses))
        if self.outcome:
            query["outcome"] = self.outcome
        if self.waiting:
            query["waiting"] = "1"
        query.setlist("json", [c.text() for c in self.bar_json()])
        if self.since:
            query["since"] = self.since
        for name in TIME_FIELDS:
            at: datetime | None = getattr(self, name)
            if at is not None:
                utc = at.astimezone(UTC)  # the year in four digits: %Y gives "1" on glibc
                query[name] = f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}"
        if not self.newest_first:
            query["sort"], query["order"] = self.sort, self.order
        return query

    def bar(self) -> dict[str, str]:
        """The text fields as the form shows them: the box as typed, the filter bar's fields
        without what the box put there."""
        found = {name: getattr(self, name) for name in TEXT_FIELDS}
        found["q"] = self.box or self.q
        if self.from_box in found:
            found[self.from_box] = ""
        return found

    def bar_json(self) -> tuple[JsonCondition, ...]:
        """The filter bar's JSON conditions (the box's, if it held one, is first)."""
        return self.json[1:] if self.from_box == "json" else self.json

    def sorted_by(self, sort: str) -> SagaFilter:
        """This filter sorted by ``sort``: descending first, then the other way round."""
        order = "asc" if self.sort == sort and self.order == "desc" else "desc"
        return replace(self, sort=sort, order=order)


# ---------------------------------------------------------------- parsing


WAITING_VALUES = ("1", "on", "true", "0", "off", "false")
"""What the ``waiting`` parameter may say: the first three mean yes (a checkbox sends "1")."""


def parse(query: QueryDict) -> SagaFilter:
    """The filter a list URL's query string asks for; ``SearchError`` names a bad field."""
    text = {name: _text(query, name) for name in (*TEXT_FIELDS, "since", "sort", "order")}
    found: dict[str, Any] = {name: text[name] for name in TEXT_FIELDS}
    found["box"] = text["q"]
    found.update(_search_box(text["q"], found))
    found["statuses"] = _statuses(query.getlist("status"))
    found["outcome"] = _choice("outcome", _text(query, "outcome"), list(RollbackOutcome))
    waiting = _choice("waiting", _text(query, "waiting"), list(WAITING_VALUES))
    found["waiting"] = waiting in WAITING_VALUES[:3]
    conditions = [*found.pop("json", ()), *(_condition("json", j) for j in _texts(query, "json"))]
    if len(conditions) > MAX_JSON_CONDITIONS:
        raise SearchError("json", f"at most {MAX_JSON_CONDITIONS} JSON conditions")
    found["json"] = tuple(conditions)
    found["since"] = _choice("since", text["since"], list(QUICK_RANGES))
    for name in TIME_FIELDS:
        found[name] = _time(name, _text(query, name))
    for first, last in (("started_after", "started_before"), ("updated_after", "updated_before")):
        if found[first] and found[last] and found[first] >= found[last]:
            raise SearchError(last, f"must be later than {first}")
    found["sort"] = _choice("sort", text["sort"], list(SORTS)) or "updated"
    found["order"] = _choice("order", text["order"], list(ORDERS)) or "desc"
    return SagaFilter(**found)


def _text(query: QueryDict, name: str) -> str:
    values = _texts(query, name)
    return values[-1] if values else ""


def _texts(query: QueryDict, name: str) -> list[str]:
    values = []
    for value in query.getlist(name):
        problem = text_policy.text_problem(value)
        if problem is not None:  # NUL: nothing stored holds one, PostgreSQL cannot compare it
            raise SearchError(name, problem)
        if len(value) > MAX_TEXT:
            raise SearchError(name, f"longer than {MAX_TEXT} characters")
        if value.strip():
            values.append(value.strip())
    return values


def _search_box(q: str, bar: dict[str, Any]) -> dict[str, Any]:
    """The search box: a name or id prefix, or one ``input.``/``output.`` JSON condition,
    or ``tool:``, ``error:``, ``actor:`` or ``owner:`` followed by what to find."""
    if _CONDITION.match(q) or q.startswith(("input.", "output.", "input[", "output[")):
        return {"q": "", "json": [_condition("q", q)], "from_box": "json"}
    prefix, sep, rest = q.partition(":")
    if sep and prefix in ("tool", "error", "actor", "owner") and rest.strip():
        if bar[prefix] and bar[prefix] != rest.strip():
            raise SearchError("q", f"{prefix} is also in the filter bar; give it once")
        return {"q": "", prefix: rest.strip(), "from_box": prefix}
    return {}


def _statuses(values: list[str]) -> tuple[str, ...]:
    allowed = [value for value, _ in STATUS_CHOICES]
    chosen = []
    for value in values:
        if value.strip():
            name = _choice("status", value.strip().upper(), allowed)
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen)


def _choice(name: str, value: str, allowed: list[str]) -> str:
    if value and value not in allowed:
        raise SearchError(name, f"unknown value {value!r}; one of {', '.join(allowed)}")
    return value


def _time(name: str, value: str) -> datetime | None:
    """A time from a ``datetime-local`` input (UTC) or ISO 8601 with an offset."""
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value)
        at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        return at.astimezone(UTC)
    except (ValueError, OverflowError):
        raise SearchError(name, "not a time; use YYYY-MM-DDTHH:MM (UTC)") from None


def _condition(name: str, text: str) -> JsonCondition:
    """``input.a.b[0] = <JSON value>`` or ``output.a.b`` (has the path)."""
    found = _CONDITION.match(text)
    if found is None:
        raise SearchError(
            name,
            "not a JSON path: input. or output. then keys (letters, digits, _ and -) "
            'and [n] indexes, e.g. input.orderId = "o-17" or output.refund.id',
        )
    side, path_text, value = found.group(1), found.group(2), found.group("value")
    path = tuple(key if key else int(index) for key, index in _SEGMENT.findall(path_text))
    if len(path) > MAX_PATH:
        raise SearchError(name, f"a path of at most {MAX_PATH} keys and indexes")
    if value is None:
        return JsonCondition(side, path)  # type: ignore[arg-type]
    return JsonCondition(side, path, _json_value(name, value), compare=True)  # type: ignore[arg-type]


def _json_value(name: str, text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        value = json.loads(text, parse_constant=refuse)
    except ValueError:
        if not text or any(c in text for c in "\"'[]{}"):
            raise SearchError(name, 'the value is not JSON: quote strings ("o-17")') from None
        return text  # a bare word is the string it reads as
    if isinstance(value, dict | list):
        raise SearchError(name, "compare with a string, number, true, false or null")
    if isinstance(value, float) and not math.isfinite(value):
        raise SearchError(name, "a number must be finite")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > BIGINT:
        raise SearchError(name, "a number out of range")
    return value


# ---------------------------------------------------------------- SQL


def select(
    search: SagaFilter, projects: list[Project], *, viewer: Viewer | None = None
) -> QuerySet[Saga]:
    """The sagas ``search`` selects among ``projects`` (the caller's visible ones), in its
    sort order (id breaking ties): what a list page, or an export, reads from. ``viewer``
    is who "owner: me" means (nobody's sagas without one)."""
    chosen = [p for p in projects if p.slug == search.project] if search.project else projects
    if not chosen:
        return Saga.objects.none()
    # No join on the project (the caller has it): with one, SQLite's planner leaves the
    # (project, <sort>, id) index and sorts the whole project in a temp B-tree.
    qs: QuerySet[Saga] = (
        Saga.objects.filter(project=chosen[0])
        if len(chosen) == 1
        else Saga.objects.filter(project__in=[p.pk for p in chosen])
    )
    column = SORTS[search.sort]
    sign = "-" if search.order == "desc" else ""
    return apply(qs, search, viewer=viewer).order_by(f"{sign}{column}", f"{sign}id")


def apply(
    qs: QuerySet[Saga], search: SagaFilter, *, viewer: Viewer | None = None
) -> QuerySet[Saga]:
    """``qs`` narrowed to what ``search`` selects, but for its ``project`` (``select``)."""
    scope = qs  # the caller's projects, before any filter: what a prefix probe counts in
    if search.statuses:
        qs = qs.filter(_status_q(search.statuses))
    if search.outcome:
        qs = qs.filter(outcome=search.outcome)
    if search.waiting:
        qs = qs.filter(waiting_for__isnull=False)
    if search.q:
        qs = qs.filter(_name_or_error(scope, search.q))
    if search.tool:
        # EXISTS, not IN: a tool is usually common, and SQLite then walks the sort's index
        # and probes (tool_name, saga) per saga, where IN would list every saga of the tool.
        uses = Step.objects.filter(saga_id=OuterRef("pk"), tool_name=search.tool)
        qs = qs.filter(Exists(uses))
    if search.actor:
        tokens = ApiToken.objects.filter(Q(label=search.actor) | Q(prefix=search.actor))
        qs = qs.filter(posted_by_token__in=tokens.values("pk"))
    if search.owner == OWNER_NONE:
        qs = qs.filter(owner__isnull=True)
    elif search.owner == OWNER_ME:
        qs = qs.filter(owner=viewer.pk) if viewer is not None and viewer.pk else qs.none()
    elif search.owner:
        qs = qs.filter(owner__username=search.owner)
    if search.since:
        qs = qs.filter(changed_at__gt=timezone.now() - QUICK_RANGES[search.since])
    for name, lookup in (
        ("started_after", "received_at__gt"),
        ("started_before", "received_at__lt"),
        ("updated_after", "changed_at__gt"),
        ("updated_before", "changed_at__lt"),
    ):
        if getattr(search, name) is not None:
            qs = qs.filter(**{lookup: getattr(search, name)})  # fixed lookups, bound values
    if search.error:
        qs = qs.filter(_with_step(*_error_sql(search.error)))
    for condition in search.json:
        qs = qs.filter(_with_step(*_json_sql(condition)))
    return qs


PROBE = 1000
"""How many matches a search counts, through its own index, before it picks a plan (a name
or id prefix on both databases, a step search on SQLite).

The planners cannot know how many sagas a prefix or a step search finds, and both of
its plans are slow at one end: reading every match and sorting them (a word in every
failed step: 37,000 sagas, 220 ms at 1M steps), or walking the sort's index and testing
each saga (a rare prefix: the whole project, 95 ms). Counting up to ``PROBE`` matches
costs under a millisecond (one more query) and tells which end a search is at: up to
``PROBE``, the matches are read and sorted; more, and the walk finds a page soon."""
_SAGA = '"sagaboard_saga"'


def _prefix(scope: QuerySet[Saga], q: str) -> list[int] | RawSQL:
    """A saga whose name starts with ``q`` (any case) or whose id does (exactly: ids are
    case-sensitive, as the live feed compares them): their ids when there are few, else
    the test itself."""
    like = _like(q)[1:]  # "q%", its wildcards escaped
    if connection.vendor == "sqlite":
        # The name's LIKE is served by the NOCASE index saga_project_name_nocase (0014), the
        # id's GLOB by the unique (project, saga_id) index; "+" keeps a column off its index.
        glob = re.sub(r"([*?\[])", r"[\1]", q) + "*"
        test, params = "({p}{t}.name LIKE %s ESCAPE '\\' OR {p}{t}.saga_id GLOB %s)", [like, glob]
    else:  # the text_pattern_ops indexes saga_project_name_prefix and saga_project_id_prefix
        test = "(upper({t}.name::text) LIKE upper(%s) OR {t}.saga_id::text LIKE %s)"
        params = [like, like]
    found = RawSQL(test.format(p="", t=_SAGA), params, output_field=BooleanField())
    ids = list(scope.filter(found).order_by().values_list("pk", flat=True)[: PROBE + 1])
    if len(ids) <= PROBE:
        return ids
    return RawSQL(test.format(p="+", t=_SAGA), params, output_field=BooleanField())


def _name_or_error(scope: QuerySet[Saga], q: str) -> Q:
    """Plain words in the search box: a saga whose name or id starts with them (``_prefix``),
    or one with a step whose error holds every word (``error:``'s search, ``_error_sql``),
    so ``Stripe API timed out`` finds the saga it failed. Words all shorter than the trigram
    (3 characters: ``s-``, ``ab``) search names and ids only: no index serves them in error
    text, and a prefix that short is a name's or an id's.

    Both sides go through their own index first, as a probe of up to ``PROBE`` matches: few
    and few are one list of ids (the page reads them through the primary key and sorts
    them); many on either side and the page walks the sort's index, testing each saga for
    either (then matches are common, so a page is found soon)."""
    name = _prefix(scope, q)
    named = Q(pk__in=name) if isinstance(name, list) else Q(name)
    if not any(len(w) >= _TRIGRAM for w in _words(q)):
        return named
    where, params = _error_sql(q)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT sagaboard_step.saga_id FROM sagaboard_step WHERE {' AND '.join(where)}"
            " LIMIT %s",
            [*params, PROBE + 1],
        )
        failed = {saga_pk for (saga_pk,) in cursor.fetchall()}
    if len(failed) > PROBE:
        return named | Q(_with_step(where, params))
    if isinstance(name, list):
        return Q(pk__in=sorted({*name, *failed}))
    return named | Q(pk__in=sorted(failed))


def error_words_match(q: str, errors: Iterable[str]) -> bool:
    """What ``_name_or_error`` finds in error text, decided in Python (the live feed's
    ``visible.saga_matches``): one of ``errors`` holds every word of ``q``, any case, when
    one word at least is as long as a trigram."""
    words = [w.lower() for w in _words(q)]
    if not any(len(w) >= _TRIGRAM for w in words):
        return False
    return any(all(w in error.lower() for w in words) for error in errors)


def _with_step(where: list[str], params: list[Any]) -> RawSQL:
    """A saga with a step where all of ``where`` holds (SQL of this module, values bound)."""
    test = " AND ".join(where)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            probe = f"SELECT COUNT(*) FROM (SELECT 1 FROM sagaboard_step WHERE {test} LIMIT %s)"
            cursor.execute(probe, [*params, PROBE + 1])
            (found,) = cursor.fetchone()
        if found > PROBE:  # many: walk the sort's index, test each saga's own steps
            # "+": the FTS5 matches become a set each step is looked up in (listed once),
            # not the rows the planner starts from for every saga.
            test = " AND ".join(f"+{w}" if w == _FTS_ROWS else w for w in where)
            own = f"sagaboard_step.saga_id = {_SAGA}.id"
            sql = f"EXISTS (SELECT 1 FROM sagaboard_step WHERE {own} AND {test})"
            return RawSQL(sql, params, output_field=BooleanField())
    sql = f"{_SAGA}.id IN (SELECT sagaboard_step.saga_id FROM sagaboard_step WHERE {test})"
    return RawSQL(sql, params, output_field=BooleanField())


def _status_q(statuses: tuple[str, ...]) -> Q:
    real = [s for s in statuses if s not in (WITH_EXCEPTIONS, WAITING)]
    found = Q(status__in=real) if real else Q(pk__in=[])
    if WITH_EXCEPTIONS in statuses:
        found |= Q(outcome=RollbackOutcome.WITH_EXCEPTIONS)
    if WAITING in statuses:
        found |= Q(waiting_for__isnull=False)
    return found


def _words(text: str) -> list[str]:
    return text.split()[:10]


def _like(word: str) -> str:
    return "%" + re.sub(r"([\\%_])", r"\\\1", word) + "%"


def _fts_string(text: str) -> str:
    """One FTS5 string: whatever it holds, never an operator, column or syntax error."""
    return '"' + text.replace('"', '""') + '"'


def _fts_match(column: str, strings: list[str]) -> str:
    return f"{column} : ({' AND '.join(_fts_string(s) for s in strings)})"


_FTS_ROWS = f"sagaboard_step.id IN (SELECT rowid FROM {_FTS} WHERE {_FTS} MATCH %s)"
"""The steps an FTS5 query matches (its one parameter: the query)."""


def _in_fts(sql: list[str], params: list[Any], column: str, strings: list[str]) -> None:
    if strings:
        sql.append(_FTS_ROWS)
        params.append(_fts_match(column, strings))


def _error_sql(text: str) -> tuple[list[str], list[Any]]:
    """Steps whose error holds every word of ``text`` (substrings, case-insensitive)."""
    words = _words(text)
    sql: list[str] = []
    params: list[Any] = []
    if connection.vendor == "sqlite":
        # FTS5's trigram index finds words of 3 characters or more; shorter ones are LIKE.
        _in_fts(sql, params, "error", [w for w in words if len(w) >= _TRIGRAM])
        for word in (w for w in words if len(w) < _TRIGRAM):
            sql.append("sagaboard_step.error LIKE %s ESCAPE '\\'")
            params.append(_like(word))
    else:
        for word in words:  # served by the pg_trgm index
            sql.append("sagaboard_step.error ILIKE %s")
            params.append(_like(word))
    return sql, params


def _json_sql(condition: JsonCondition) -> tuple[list[str], list[Any]]:
    if connection.vendor == "postgresql":
        return _postgres_json(condition)
    return _sqlite_json(condition)


def _postgres_json(c: JsonCondition) -> tuple[list[str], list[Any]]:
    column = f"sagaboard_jsonb(sagaboard_step.{c.side})"  # side: "input" or "output"
    if not c.compare:
        # jsonb_ops GIN serves containment and key existence, not a path test: narrow by
        # what the path's parents must be ({"refund": {}} for output.refund.id), then test
        # the exact path (strict: no looking inside arrays on the way).
        path = "strict $" + "".join(f"[{s}]" if isinstance(s, int) else f'."{s}"' for s in c.path)
        if len(c.path) == 1:
            if isinstance(c.path[0], int):
                return [f"{column} @? %s::jsonpath"], [path]
            return [f"{column} ? %s", f"{column} @? %s::jsonpath"], [c.path[0], path]
        parents: Any = [] if isinstance(c.path[-1], int) else {}
        for segment in reversed(c.path[:-1]):
            parents = [parents] if isinstance(segment, int) else {segment: parents}
        return [f"{column} @> %s::jsonb", f"{column} @? %s::jsonpath"], [json.dumps(parents), path]
    document: Any = c.value
    for segment in reversed(c.path):
        document = [document] if isinstance(segment, int) else {segment: document}
    return (
        [f"{column} @> %s::jsonb", f"{column} #> %s::text[] = %s::jsonb"],
        [json.dumps(document), [str(s) for s in c.path], json.dumps(c.value)],
    )


_SQLITE_TYPES = {bool: None, str: ("text",), int: ("integer", "real"), float: ("integer", "real")}


def _sqlite_json(c: JsonCondition) -> tuple[list[str], list[Any]]:
    column = f"sagaboard_step.{c.side}"  # side: "input" or "output"
    path = "$" + "".join(f"[{s}]" if isinstance(s, int) else f'."{s}"' for s in c.path)
    sql: list[str] = []
    params: list[Any] = []
    keys = [f'"{s}"' for s in c.path if isinstance(s, str)]  # as keys are in JSON text
    if not c.compare:
        _in_fts(sql, params, c.side, keys)
        sql.append(f"json_type({column}, %s) IS NOT NULL")
        return sql, [*params, path]
    value = c.value
    plain = isinstance(value, str) and value and not re.search(r'["\\\x00-\x1f]', value)
    last_key = isinstance(c.path[-1], str)
    if plain:  # stored as "<value>" whatever the writer's separators: a selective string
        _in_fts(sql, params, c.side, [f'"{value}"'])
    elif last_key and (value is None or isinstance(value, bool | int)):
        # A number, true, false or null is stored after its key, with or without a space
        # (json.dumps or orjson wrote it): "order": 17 or "order":17.
        literal = json.dumps(value)
        sql.append(_FTS_ROWS)
        either = (f'"{c.path[-1]}": {literal}', f'"{c.path[-1]}":{literal}')
        params.append(f"{c.side} : ({' OR '.join(_fts_string(e) for e in either)})")
    else:
        _in_fts(sql, params, c.side, keys[-1:])
    if value is None or isinstance(value, bool):
        kind = "null" if value is None else ("true" if value else "false")
        sql.append(f"json_type({column}, %s) = %s")
        return sql, [*params, path, kind]
    types = _SQLITE_TYPES[type(value)] or ()
    marks = ", ".join(["%s"] * len(types))
    sql += [f"json_type({column}, %s) IN ({marks})", f"json_extract({column}, %s) = %s"]
    return sql, [*params, path, *types, path, value]


# ---------------------------------------------------------------- pages


def with_row_facts(qs: QuerySet[Saga]) -> QuerySet[Saga]:
    """What a list row shows beside the saga's own columns, each one indexed lookup per
    row inside the same query: its step count, the failing step's tool, the posting
    token's label, the owner's name and how many notes it has.

    Written as SQL, not as ``Subquery`` expressions: the ORM builds five inner querysets and
    resolves them against the outer one on every request, which took about 5 ms of a list
    page's CPU (more than its queries); this SQL is built once a process."""
    return qs.annotate(**_row_facts())


@functools.cache
def _row_facts() -> dict[str, RawSQL]:
    q = connection.ops.quote_name

    def col(model: Any, field: str) -> str:
        return q(model._meta.get_field(field).column)

    saga = q(Saga._meta.db_table)
    step, token, note = q(Step._meta.db_table), q(ApiToken._meta.db_table), q(Note._meta.db_table)
    user_model = get_user_model()
    user = q(user_model._meta.db_table)
    saga_pk, step_saga = f"{saga}.{col(Saga, 'id')}", f"s.{col(Step, 'saga')}"
    facts = {
        "step_count": (
            f"SELECT COUNT(*) FROM {step} s WHERE {step_saga} = {saga_pk}",
            IntegerField,
        ),
        "failed_tool": (
            f"SELECT s.{col(Step, 'tool_name')} FROM {step} s WHERE {step_saga} = {saga_pk}"
            f" AND s.{col(Step, 'step_id')} = {saga}.{col(Saga, 'failed_step')} LIMIT 1",
            CharField,
        ),
        "token_label": (
            f"SELECT t.{col(ApiToken, 'label')} FROM {token} t"
            f" WHERE t.{col(ApiToken, 'id')} = {saga}.{col(Saga, 'posted_by_token')}",
            CharField,
        ),
        "owner_name": (
            f"SELECT u.{col(user_model, user_model.USERNAME_FIELD)} FROM {user} u"
            f" WHERE u.{col(user_model, 'id')} = {saga}.{col(Saga, 'owner')}",
            CharField,
        ),
        "note_count": (
            f"SELECT COUNT(*) FROM {note} n WHERE n.{col(Note, 'saga')} = {saga_pk}"
            f" AND n.{col(Note, 'deleted_at')} IS NULL",
            IntegerField,
        ),
    }
    return {name: RawSQL(sql, (), output_field=kind()) for name, (sql, kind) in facts.items()}


def page(
    search: SagaFilter,
    projects: list[Project],
    *,
    cursor: str | None,
    limit: int,
    viewer: Viewer | None = None,
) -> tuple[list[Saga], str | None]:
    """One keyset page of ``select`` after ``cursor``; the cursor of the next (or None).

    A row-value comparison on (sort column, id) walks the sort's index from the cursor
    on, so every page costs the same however deep; ``BadCursor`` for a forged cursor.
    """
    qs = select(search, projects, viewer=viewer)
    if cursor:
        at, pk = decode_cursor(cursor, search)
        table = connection.ops.quote_name(Saga._meta.db_table)
        column = SORTS[search.sort]
        sign = "<" if search.order == "desc" else ">"
        qs = qs.extra(where=[f"({table}.{column}, {table}.id) {sign} (%s, %s)"], params=[at, pk])
    by_pk = {p.pk: p for p in projects}
    rows = list(with_row_facts(qs)[: limit + 1])
    for row in rows:
        row.project = by_pk[row.project_id]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1], search) if more and rows else None)


def encode_cursor(saga: Saga, search: SagaFilter | None = None) -> str:
    """A page link's cursor: the sort, and the last row's sort value and id."""
    sort, order = (search.sort, search.order) if search else ("updated", "desc")
    value = getattr(saga, SORTS[sort])
    shown = value.isoformat() if isinstance(value, datetime) else value
    raw = json.dumps([shown, saga.pk] if sort == "updated" and order == "desc" else
                     [shown, saga.pk, sort, order]).encode()  # fmt: skip
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, search: SagaFilter | None = None) -> tuple[Any, int]:
    """The sort value and id a cursor holds, as the database compares them."""
    sort, order = (search.sort, search.order) if search else ("updated", "desc")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk, *rest = json.loads(raw)
        if (rest or ["updated", "desc"]) != [sort, order]:
            raise ValueError("a cursor of another sort")
        pk = int(pk)
        if not 0 < pk <= BIGINT:
            raise ValueError("out of range")
        if sort == "duration":
            if not isinstance(value, int) or not 0 <= value <= BIGINT:
                raise ValueError("out of range")
            return value, pk
        # A forged cursor's time must still fit the column it is compared with.
        at = datetime.fromisoformat(value)
        if at.tzinfo is None:
            raise ValueError("no zone")
        return connection.ops.adapt_datetimefield_value(at.astimezone(UTC)), pk
    except (ValueError, TypeError, OverflowError, AttributeError) as err:
        raise BadCursor("cursor is not one this server issued") from err
