"""The inbox (what needs me) and the navigation's badges (``collab.reads.inbox``)."""

from __future__ import annotations

from typing import NamedTuple

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from sagaboard.collab.reads import inbox as needs


class Badge(NamedTuple):
    kind: str
    count: int  # type: ignore[assignment]  # shadows tuple.count, as the templates read it
    shown: str
    label: str
    href: str


def badges_of(counts: needs.Counts) -> list[Badge]:
    """One badge per kind that has anything, each saying what it counts in words."""
    inbox = reverse("inbox")
    found = [
        (
            "approvals",
            counts.approvals,
            "approval{s} wait{v} for your vote",
            reverse("approval_queue"),
        ),
        (
            "failures",
            counts.failures,
            "failed undo{s} wait{v} for an operator",
            reverse("attention"),
        ),
        ("assigned", counts.assigned, "saga{s} assigned to you need{v} you", f"{inbox}#assigned"),
    ]
    shown = []
    for kind, n, words, href in found:
        if n:
            text = f"{needs.CAP}+" if n > needs.CAP else str(n)
            label = words.format(s="" if n == 1 else "s", v="s" if n == 1 else "")
            shown.append(Badge(kind, n, text, f"{text} {label}", href))
    return shown


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    counts = needs.counts(request.user)
    context = {"items": needs.items(request.user), "counts": counts, "badges": badges_of(counts)}
    return render(request, "sagaboard/inbox.html", context)


@login_required
@require_GET
def badges(request: HttpRequest) -> HttpResponse:
    """The badges' fragment, polled by the navigation and asked again on live changes."""
    counts = needs.counts(request.user)
    context = {"counts": counts, "badges": badges_of(counts)}
    return render(request, "sagaboard/inbox.html#badges", context)
