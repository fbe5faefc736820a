"""A database that is away is a 503 with ``Retry-After``, never a 500.

While PostgreSQL restarts (or SQLite's file is locked past its timeout, or its disk is
full), every page fails for a reason that is not a bug and that passes: the operator
should be told to retry in a moment, and a load balancer should see "unavailable", not
"broken". ``handler500`` runs for every exception no view handled, whichever middleware
raised it (the session saved after the response, the user loaded lazily), with the
exception still being handled, so it can tell a database outage from a bug. The page it
renders reads nothing from the database (no user, no session) and is plain HTML.
The API answers the same outage with its JSON 503 (``sagaboard.api.errors``).
"""

from __future__ import annotations

import sys

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.template.loader import render_to_string
from django.views.defaults import server_error as django_server_error

from sagaboard.errors import RETRY_SOON

TEMPLATE = "503.html"
_OUTAGE = (OperationalError, InterfaceError)


def database_away(err: BaseException | None) -> bool:
    """Whether ``err`` (or what caused it) says the database could not be reached or used
    for now, rather than that a query was wrong."""
    while err is not None:
        if isinstance(err, _OUTAGE) or (
            isinstance(err, DatabaseError) and "disk" in str(err).lower()
        ):
            return True
        err = err.__cause__ or err.__context__
    return False


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: a database outage as 503 + ``Retry-After``; anything else, Django's 500."""
    if not database_away(sys.exc_info()[1]):
        response: HttpResponse = django_server_error(request)
        return response
    body = render_to_string(TEMPLATE, {"retry": RETRY_SOON})
    response = HttpResponseServerError(body, status=503)
    response["Retry-After"] = str(RETRY_SOON)
    return response
