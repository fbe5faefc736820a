"""Per-tool health pages: a table of every tool, and a page per tool with its charts.

Thin: parse the query (window, project, tool), read ``health.reads.tool_health`` (the
rollups, scoped to the user's projects), lay it out. A bad value is a 400 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sagaboard.access.reads import visible
from sagaboard.health.pages import health_charts
from sagaboard.health.reads import tool_health
from sagaboard.infra import text_policy
from sagaboard.models import Project

TOOL_NAME_MAX = 200


class Refused(ValueError):
    """A query value the page cannot use: answered 400 with ``str(self)``."""


@dataclass(frozen=True)
class Query:
    mine: list[Project]
    projects: list[Project]
    project: str
    window: str


def parse_query(request: HttpRequest) -> Query:
    """The page's filters from its query string; ``Refused`` names the field that is wrong."""
    window = request.GET.get("window", tool_health.DEFAULT_WINDOW)
    if window not in tool_health.WINDOWS:
        raise Refused(f"window: must be one of {', '.join(tool_health.WINDOWS)}")
    mine = visible.projects_for_user(request.user)
    chosen = request.GET.get("project", "")
    projects = mine
    if chosen:
        projects = [p for p in mine if p.slug == chosen]
        if not projects:
            raise Refused("project: not one of your projects")
    return Query(mine, projects, chosen, window)


def check_tool(tool_name: str) -> None:
    problem = text_policy.text_problem(tool_name)
    if problem is not None:
        raise Refused(f"tool {problem}")
    if not tool_name.strip() or len(tool_name) > TOOL_NAME_MAX:
        raise Refused(f"tool: give a tool name of 1 to {TOOL_NAME_MAX} characters")


def _refused(request: HttpRequest, err: Refused) -> HttpResponse:
    return render(request, "sagaboard/bad_request.html", {"message": str(err)}, status=400)


def _common(request: HttpRequest, query: Query) -> dict[str, Any]:
    return {
        "projects": query.mine,
        "chosen_project": query.project,
        "window": query.window,
        "windows": [(w.name, w.label) for w in tool_health.WINDOWS.values()],
        "window_label": tool_health.WINDOWS[query.window].label,
        "no_role": not request.user.has_perm("sagaboard.view_saga"),
    }


@login_required
@require_GET
def tool_list(request: HttpRequest) -> HttpResponse:
    """Every tool of the user's projects: runs, failure rates, p50/p95 over the window."""
    try:
        query = parse_query(request)
    except Refused as err:
        return _refused(request, err)
    rows = tool_health.tools_health(query.projects, query.window)
    tools = [_row(h) for h in rows]
    return render(request, "sagaboard/tools.html", {**_common(request, query), "tools": tools})


@login_required
@require_GET
def tool_detail(request: HttpRequest, tool_name: str) -> HttpResponse:
    """One tool over the window: its totals and charts of runs and durations per bar."""
    try:
        check_tool(tool_name)
        query = parse_query(request)
    except Refused as err:
        return _refused(request, err)
    total, bars = tool_health.tool_health(query.projects, tool_name, query.window)
    daily = query.window == "week"
    charts = [
        (
            title,
            health_charts.runs_chart(bars, undo=undo, daily=daily),
            health_charts.duration_chart(bars, undo=undo, daily=daily),
        )
        for title, undo in (("Forward calls", False), ("Undos", True))
    ]
    context = {**_common(request, query), "tool": _row(total), "tool_name": tool_name}
    context["charts"] = charts
    return render(request, "sagaboard/tool_detail.html", context)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _row(h: tool_health.Health) -> dict[str, Any]:
    """One tool's figures as the table shows them."""
    text = health_charts.duration_text
    return {
        "name": h.tool_name,
        "runs": h.runs,
        "failures": h.failures,
        "failure_rate": _rate(h.failure_rate),
        "undo_runs": h.undo_runs,
        "undo_failures": h.undo_failures,
        "undo_failure_rate": _rate(h.undo_failure_rate),
        "forward_p50": text(h.forward_p50),
        "forward_p95": text(h.forward_p95),
        "undo_p50": text(h.undo_p50),
        "undo_p95": text(h.undo_p95),
    }
