"""A database that is away is a 503 with ``Retry-After`` (507 when its disk is full), never a 500.

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

from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.template.loader import render_to_string
from django.views.defaults import server_error as django_server_error

from sagaboard.errors import RETRY_SOON
from sagaboard.infra.db_outage import outage_of, retry_disk_full

TEMPLATE = "503.html"


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: a database outage as 503 (a full disk as 507) with ``Retry-After``;
    anything else, Django's 500."""
    outage = outage_of(sys.exc_info()[1])
    if outage is None:
        response: HttpResponse = django_server_error(request)
        return response
    disk_full = outage == "disk_full"
    body = render_to_string(TEMPLATE, {"disk_full": disk_full})
    response = HttpResponseServerError(body, status=507 if disk_full else 503)
    response["Retry-After"] = str(retry_disk_full() if disk_full else RETRY_SOON)
    return response
