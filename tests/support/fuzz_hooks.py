"""schemathesis hooks for fuzzing sagaboard's API (loaded with ``SCHEMATHESIS_HOOKS=fuzz_hooks``).

- ``refusals_change_nothing``: a check that a refused request (4xx), or any read, left
  every table a request could touch as it was (digests taken just before the call);
- path parameters name seeded rows half the time, so calls reach real sagas;
- generated long-poll ``wait``s are cut short, or each approval read would hold 30 s (in
  every phase: the coverage phase's boundary values do not pass through ``map_query``, and
  ``approval_id``'s minimum, 1, is the seeded approval).

The fuzzing test sets ``SAGABOARD_FUZZ_DATABASE_URL`` (the server's database),
``SAGABOARD_FUZZ_SEED`` (the rows ``fuzz_data.seed`` made, as JSON) and
``SAGABOARD_FUZZ_STATS`` (where to write how many answers the state check compared).
"""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import strategies as st

from tests.support.fuzz_data import DatabaseState

LONG_POLL = 0.2

_db = DatabaseState(os.environ["SAGABOARD_FUZZ_DATABASE_URL"])
_seed = json.loads(os.environ.get("SAGABOARD_FUZZ_SEED", "{}"))
_known: dict[frozenset[str], list[dict[str, Any]]] = {
    frozenset({"saga_id"}): [{"saga_id": s} for s in _seed.get("saga_ids", [])],
    frozenset({"saga_id", "step_id"}): [
        {"saga_id": s, "step_id": step} for s, step in _seed.get("steps", [])
    ],
    frozenset({"approval_id"}): [{"approval_id": a} for a in _seed.get("approval_ids", [])],
}
# How many answers the state check compared, by kind; written for the test at exit.
_compared: Counter[str] = Counter()
_stats = os.environ.get("SAGABOARD_FUZZ_STATS")
if _stats:
    atexit.register(lambda: Path(_stats).write_text(json.dumps(_compared)))
# The digests taken just before the latest call (one worker: calls never overlap).
# Checks' own probes go through the transport, not Case.call, and take none.
_before: dict[str, dict[str, str]] = {}


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if isinstance(case.query, dict):
        case.query.update(_short_wait(case.query))
    _before.clear()
    _before[case.id] = _db.snapshot()


def _short_wait(query: dict[str, Any]) -> dict[str, Any]:
    # The coverage phase may carry the number as the text it sends ("29.0").
    wait = query.get("wait")
    try:
        seconds = float(wait) if isinstance(wait, int | float | str) else None
    except ValueError:
        seconds = None
    if seconds is not None and not isinstance(wait, bool) and LONG_POLL < seconds <= 30:
        return {**query, "wait": LONG_POLL}
    return query


@schemathesis.check
def refusals_change_nothing(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx answer, or any GET, left the database as it was."""
    before = _before.pop(case.id, None)
    refused = 400 <= response.status_code < 500
    if before is None or not (refused or case.method.upper() == "GET"):
        return None
    changed = DatabaseState.changed(before, _db.snapshot())
    _compared["refused" if refused else "read"] += 1
    if changed:
        raise AssertionError(
            f"{case.method.upper()} {case.formatted_path} answered {response.status_code} "
            f"and yet changed {', '.join(changed)}"
        )
    return None


@schemathesis.hook
def flatmap_path_parameters(ctx: Any, params: Any) -> Any:
    # Half the time a row that exists: otherwise nearly every call is a plain 404. Only
    # where the generated values have the schema's types: a schema-breaking value stays.
    options = _known.get(frozenset(params), []) if isinstance(params, dict) else []
    well_typed = options and all(
        type(params[name]) is type(value) for name, value in options[0].items()
    )
    if not well_typed:
        return st.just(params)
    return st.one_of(st.just(params), st.sampled_from(options).map(lambda p: {**params, **p}))


@schemathesis.hook
def map_query(ctx: Any, query: Any) -> Any:
    return _short_wait(query) if isinstance(query, dict) else query
