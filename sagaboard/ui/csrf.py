"""The answer to a request refused by Django's CSRF check (``CSRF_FAILURE_VIEW``).

Django's own page has an inline <style>, which the CSP refuses, and an htmx post (its
``hx-swap="none"``) would show nothing at all: the person would click and see no change.
Here an htmx post gets the page's status message, a form post a page of the dashboard,
both saying what to do (the usual cause is a page left open across a logout or login).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

MESSAGE = (
    "Refused: the page's security token (CSRF) is missing or out of date, which happens "
    "when you logged out or in since it was loaded. Reload the page and try again."
)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if request.headers.get("HX-Request") == "true":
        return render(request, "sagaboard/_flash.html", {"flash": MESSAGE, "ok": False}, status=403)
    return render(request, "sagaboard/csrf_failed.html", {"message": MESSAGE}, status=403)
