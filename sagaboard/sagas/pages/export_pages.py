"""Export the sagas a list filter selects: ``/sagas/export.csv`` and ``/sagas/export.jsonl``.

They take the saga list's query string (``search.reads.saga_search.parse``), stream the
rows as they are read (``StreamingHttpResponse`` over keyset chunks: constant memory at
any size), and audit who exported what. CSV cells that a spreadsheet would run as a
formula (starting with = + - @, a tab or a CR) get a leading apostrophe.
``?steps=1`` (JSON Lines only) adds one line per step after its saga's line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sagaboard.access.reads import visible
from sagaboard.audit.services import audit
from sagaboard.search.reads import export, saga_search

COLUMNS = ["id", "name", "project", "status", "outcome", "started", "updated",
           "duration_seconds", "step_count", "failed_step", "failed_tool"]  # fmt: skip
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula (CSV injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _iso(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat() if at is not None else None


def saga_record(row: export.ExportRow) -> dict[str, Any]:
    """One saga's exported fields (times in UTC, ISO 8601)."""
    s = row.saga
    return {
        "id": s.saga_id,
        "name": s.name,
        "project": row.project,
        "status": s.status,
        "outcome": s.outcome,
        "started": _iso(s.created_at),
        "updated": _iso(s.changed_at),
        "duration_seconds": row.duration_seconds,
        "step_count": row.step_count,
        "failed_step": s.failed_step,
        "failed_tool": row.failed_tool,
    }


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_lines(rows: Iterable[export.ExportRow]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(COLUMNS)
    for row in rows:
        record = saga_record(row)
        yield writer.writerow([csv_cell(record[c]) for c in COLUMNS])


def jsonl_lines(rows: Iterable[export.ExportRow], *, steps: bool) -> Iterator[str]:
    def line(value: dict[str, Any]) -> str:
        return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False) + "\n"

    for row in rows:
        yield line({"type": "saga", **saga_record(row)})
        if steps:
            for step in row.steps:
                yield line({"type": "step", "saga": row.saga.saga_id, "project": row.project,
                            **step, "created_at": _iso(step["created_at"]),
                            "completed_at": _iso(step["completed_at"])})  # fmt: skip


def _filename(f: saga_search.SagaFilter, extension: str) -> str:
    """Only [a-z0-9-] from the filter (a project slug), so the header needs no quoting."""
    scope = "".join(c for c in f.project.lower() if c.isascii() and (c.isalnum() or c == "-"))
    stamp = timezone.now().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"sagaboard-sagas-{scope or 'all'}-{stamp}.{extension}"


def _export(request: HttpRequest, what: str) -> HttpResponse:
    steps_param = request.GET.get("steps", "")
    try:
        if steps_param not in ("", "0", "1"):
            raise saga_search.SearchError("steps", "must be 1 or 0")
        if steps_param == "1" and what == "csv":
            raise saga_search.SearchError(
                "steps", "one line per step is for JSON Lines (export.jsonl)"
            )
        f = saga_search.parse(request.GET)
        projects = export.projects_chosen(visible.projects_for_user(request.user), f)
    except saga_search.SearchError as err:
        return render(request, "sagaboard/bad_request.html", {"message": str(err)}, status=400)
    steps = steps_param == "1"
    chosen = {name: values for name, values in f.to_query().lists() if values}
    audit.export_recorded(user=request.user, projects=projects, what=what,
                          data={"format": what, "filter": chosen, "steps": steps})  # fmt: skip
    rows = export.export_rows(projects, f, steps=steps, viewer=request.user)
    if what == "csv":
        body, content_type = csv_lines(rows), "text/csv; charset=utf-8"
    else:
        body, content_type = jsonl_lines(rows, steps=steps), "application/jsonl; charset=utf-8"
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{_filename(f, what)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def export_csv(request: HttpRequest) -> HttpResponse:
    """The list's sagas as CSV, one row per saga."""
    return _export(request, "csv")


@login_required
@require_GET
def export_jsonl(request: HttpRequest) -> HttpResponse:
    """The list's sagas as JSON Lines; ``?steps=1`` adds a line per step."""
    return _export(request, "jsonl")
