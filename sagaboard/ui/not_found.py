"""The product's own "not found" page, for every page path that has none (or hides one).

An unknown page, or a saga outside the user's projects (``Http404``), answers
templates/404.html in the dashboard's layout, with a way back, whether DEBUG is
on or off: Django's own pages (its bare "Not Found" without DEBUG, its technical
page listing every URL pattern with it) are neither the product nor for operators.
API paths keep their JSON 404 (``sagaboard.api.errors``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase, HttpResponseNotFound
from django.template.loader import render_to_string
from django.utils.decorators import sync_and_async_middleware

from sagaboard.infra.http.api_path import API_PREFIX

TEMPLATE = "404.html"


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
    """``handler404``: the 404 page in the product's layout (DEBUG off)."""
    response = HttpResponseNotFound(render_to_string(TEMPLATE, {}, request))
    response.sagaboard_page = True  # type: ignore[attr-defined]
    return response


@sync_and_async_middleware
def not_found_as_page(get_response: Callable[[HttpRequest], Any]) -> Callable[..., Any]:
    """Django middleware: with DEBUG on, Django answers a 404 with its technical page
    (``handler404`` is not used); give the product's page instead, there too."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponseBase:
            response: Awaitable[HttpResponseBase] = get_response(request)
            answer = await response
            if _django_page(request, answer):
                # Rendering reads the session and the user: not from the event loop.
                return await sync_to_async(page_not_found)(request)
            return answer

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponseBase:
        answer = get_response(request)
        return page_not_found(request) if _django_page(request, answer) else answer

    return sync_middleware


def _django_page(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Django's debug 404 (an ``HttpResponseNotFound`` of HTML), not a view's own 404 (a
    refused htmx action renders its message with status 404) and not an API path."""
    return (
        settings.DEBUG
        and isinstance(response, HttpResponseNotFound)
        and not getattr(response, "sagaboard_page", False)
        and not request.path.startswith(API_PREFIX)
        and response.get("Content-Type", "").startswith("text/html")
    )
