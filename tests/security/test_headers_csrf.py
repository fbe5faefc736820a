"""Hostile users at the HTTP layer: CSRF on every route, security headers on every page,
cookies and HTTPS settings in production, cross-site websockets, CSV formula cells.

CSRF is table-driven from ``sagaboard/config/urls.py`` itself: every route is sent a POST, PUT,
PATCH and DELETE without a token by a logged-in superuser, and must answer 403 and leave
every table as it was. The state-changing routes are also sent the same request with a
token, which must go through: so each row of the table is a real request, not one that
a 403 would have met anyway. The API (bearer tokens, no cookies) and Slack's endpoint
(Slack's signature) are the exceptions: a session cookie alone gets 401 (or 404) there.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern
from django.utils import timezone

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import runner
from sagaboard.models import ApiToken, Approval, ApprovalPolicy, DecisionLink, Project, Step
from sagaboard.notify.services import link_tokens
from tests.support.hitl import person, storebot_server_saga
from tests.support.live_server import ROOT

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
UNSAFE = ("post", "put", "patch", "delete")


# ---------------------------------------------------------------- the world


@dataclass
class World:
    shop: Project
    approval: Approval
    failed: Step
    policy: ApprovalPolicy
    token: ApiToken
    root: Any


@pytest.fixture
def world() -> World:
    shop = Project.objects.create(slug="shop", name="Shop")
    waiting = storebot_server_saga(shop, "s-wait")
    runner.rollback_continue(waiting.pk)
    failing = storebot_server_saga(
        shop, "s-fail", refund_needs_approval=False, return_fails_first=5
    )
    runner.rollback_continue(failing.pk)
    root = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    shop.members.add(root)
    return World(
        shop=shop,
        approval=Approval.objects.get(saga=waiting, status="PENDING"),
        failed=Step.objects.get(saga=failing, state="ROLLBACK_FAILED"),
        policy=ApprovalPolicy.objects.create(project=shop, name="big", tool_glob="refund_*"),
        token=token_create(project=shop, label="agent", acting_user=root).token,
        root=root,
    )


def csrf_client(user: Any | None) -> Client:
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    return client


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (the test database is small): what a refused request
    must leave exactly as it was."""
    rows = {}
    for model in apps.get_models():
        if model._meta.db_table in connection.introspection.table_names():
            rows[model._meta.label] = list(model._default_manager.order_by("pk").values_list())
    with connection.cursor() as cursor:
        cursor.execute("SELECT session_key, session_data FROM django_session ORDER BY 1")
        rows["sessions"] = cursor.fetchall()
    return rows


def token_of(client: Client) -> str:
    """The CSRF token a page of this session carries (as the dashboard's forms do)."""
    page = client.get("/")
    assert page.status_code in (200, 302)
    return str(client.cookies["csrftoken"].value) if "csrftoken" in client.cookies else ""


# ---------------------------------------------------------------- every route


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + _concrete(p.pattern))
        else:
            yield prefix + _concrete(p.pattern), p


def _concrete(pattern: Any) -> str:
    """A URL that matches ``pattern``: every parameter filled with a harmless value."""
    if isinstance(pattern, RoutePattern):
        text = str(pattern)
        for name, converter in pattern.converters.items():
            kind = type(converter).__name__
            value = "1" if kind == "IntConverter" else "shop" if name == "project" else "x1"
            text = text.replace(f"<{_spec(text, name)}>", value)
        return text
    assert isinstance(pattern, RegexPattern)
    text = str(pattern).lstrip("^").rstrip("$").replace("\\Z", "")
    # The admin's regex routes: an app label, or the catch-all "final" route.
    text = text.replace("(?P<app_label>auth|sagaboard)", "sagaboard")
    text = text.replace("(?P<app_label>sagaboard|auth)", "sagaboard")
    return text.replace("(?P<url>.*)", "x1").replace("(?P<path>.*)", "x1")


def _spec(text: str, name: str) -> str:
    start = text.index(f":{name}>") if f":{name}>" in text else text.index(f"<{name}>")
    return text[text.rindex("<", 0, start + 1) + 1 : text.index(">", start)]


ROUTES = sorted({path for path, _ in _walk(get_resolver().url_patterns)})
assert not [r for r in ROUTES if "<" in r or "(?P" in r], "a route parameter was not filled"


def _is_api(path: str) -> bool:
    """Routes without a session: the API (bearer tokens) and Slack's endpoint (its signature)."""
    return path.startswith(("api/", "slack/"))


@pytest.mark.slow  # every route, about 10 s: make test runs it, test-fast does not
def test_every_route_refuses_an_unsafe_method_without_a_csrf_token(world: World) -> None:
    client = csrf_client(world.root)
    before = snapshot()
    let_through = []
    for path in [r for r in ROUTES if not _is_api(r)]:
        for method in UNSAFE:
            for headers in ({}, HTMX):
                response = getattr(client, method)(f"/{path}", {"reason": "x"}, headers=headers)
                if response.status_code != 403 or b"CSRF" not in response.content:
                    let_through.append((method, path, headers, response.status_code))
    assert let_through == []
    assert snapshot() == before


def test_the_api_takes_no_session_cookie_for_a_token(world: World) -> None:
    """The API authenticates bearer tokens only, so a forged cross-site request that
    carries the browser's cookies is anonymous there (401), and CSRF does not apply."""
    client = csrf_client(world.root)
    before = snapshot()
    for path in [r for r in ROUTES if _is_api(r)]:
        for method in UNSAFE:
            response = getattr(client, method)(f"/{path}", "{}", content_type="application/json")
            assert response.status_code in (401, 403, 404, 405), (path, response.status_code)
    assert snapshot() == before


def test_the_table_covers_every_route_of_the_project() -> None:
    names = {p.name for _, p in _walk(get_resolver().url_patterns) if p.name}
    for name in (
        "approval_decide",
        "approvals_bulk",
        "step_action",
        "steps_bulk",
        "policy_list",
        "policy_edit",
        "token_list",
        "token_revoke",
        "login",
        "logout",
    ):
        assert name in names
    assert len(ROUTES) > 40  # the admin's routes are walked too


# ---------------------------------------------------------------- the forms, with a token

Request = Callable[[World], tuple[str, dict[str, Any]]]


def _link_of(user: Any, approval: Approval) -> str:
    """A decision link of ``user`` for ``approval``, as its mail would carry it."""
    link = DecisionLink.objects.create(
        approval=approval, user=user, expires_at=timezone.now() + timedelta(hours=1)
    )
    return link_tokens.link_mint(link)


STATE_CHANGING: dict[str, Request] = {
    "approval_decide": lambda w: (
        f"/approvals/{w.approval.pk}/decide/",
        {"decision": "approve", "reason": "ok"},
    ),
    "approvals_bulk": lambda w: (
        "/approvals/bulk/",
        {"approval": [w.approval.pk], "decision": "reject", "reason": "no"},
    ),
    "step_action": lambda w: (f"/steps/{w.failed.pk}/action/", {"action": "retry"}),
    "steps_bulk": lambda w: (
        "/steps/bulk/",
        {"step": [w.failed.pk], "action": "leave", "reason": "by hand"},
    ),
    "policy_create": lambda w: (
        "/policies/",
        {
            "project": "shop",
            "name": "p2",
            "tool_glob": "*",
            "approvers_required": "1",
            "on_expiry": "reject",
            "enabled": "1",
        },
    ),
    "policy_edit": lambda w: (
        f"/policies/{w.policy.pk}/",
        {
            "name": "big2",
            "tool_glob": "x*",
            "approvers_required": "1",
            "on_expiry": "reject",
            "reason": "tighter",
        },
    ),
    "token_create": lambda w: ("/tokens/", {"project": "shop", "label": "new agent"}),
    "token_revoke": lambda w: (f"/tokens/{w.token.prefix}/revoke/", {"reason": "leaked"}),
    "logout": lambda w: ("/logout/", {}),
    "decision_link": lambda w: (
        f"/decide/{_link_of(w.root, w.approval)}/",
        {"decision": "approve", "reason": "from the mail"},
    ),
    "admin_group_add": lambda w: ("/admin/auth/group/add/", {"name": "g9"}),
}


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
@pytest.mark.parametrize("action", sorted(STATE_CHANGING))
def test_a_state_changing_post_is_refused_without_a_token_and_done_with_one(
    world: World, action: str, htmx: bool
) -> None:
    path, data = STATE_CHANGING[action](world)
    client = csrf_client(world.root)
    headers = HTMX if htmx else {}
    before = snapshot()
    refused = client.post(path, data, headers=headers)
    assert refused.status_code == 403 and b"CSRF" in refused.content
    assert snapshot() == before
    wrong = client.post(path, data, headers={**headers, "X-CSRFToken": "x" * 32})
    assert wrong.status_code == 403 and snapshot() == before
    token = token_of(client)
    done = client.post(path, data, headers={**headers, "X-CSRFToken": token})
    assert done.status_code in (200, 201, 302), (action, done.status_code)
    assert snapshot() != before, f"{action} with a token changed nothing: not a real request"


def test_logging_in_needs_the_token_of_the_login_page(world: World) -> None:
    client = csrf_client(None)
    credentials = {"username": "root", "password": "pw-root-123456"}
    before = snapshot()
    assert client.post("/login/", credentials).status_code == 403
    assert snapshot() == before
    client.get("/login/")
    credentials["csrfmiddlewaretoken"] = client.cookies["csrftoken"].value
    assert client.post("/login/", credentials).status_code == 302
    assert client.get("/").status_code == 200


def test_the_pages_put_the_csrf_token_where_htmx_sends_it(world: World) -> None:
    """htmx posts carry ``X-CSRFToken`` from ``hx-headers`` on <body>; no script needed."""
    client = csrf_client(world.root)
    page = client.get("/approvals/").content.decode()
    token = client.cookies["csrftoken"].value
    assert "hx-headers='{&quot;X-CSRFToken&quot;: &quot;" in page or "X-CSRFToken" in page
    body = page[page.index("<body") : page.index(">", page.index("<body"))]
    header = body.split("hx-headers='", 1)[1].split("'", 1)[0].replace("&quot;", '"')
    sent = json.loads(header)["X-CSRFToken"]
    url = f"/approvals/{world.approval.pk}/decide/"
    done = client.post(
        url, {"decision": "approve", "reason": "ok"}, headers={**HTMX, "X-CSRFToken": sent}
    )
    assert done.status_code == 200 and token
    world.approval.refresh_from_db()
    assert world.approval.status == "APPROVED"


# ---------------------------------------------------------------- headers on every page

SECURITY_SETTINGS = (
    "SECURE_SSL_REDIRECT",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE",
    "SESSION_COOKIE_HTTPONLY",
    "SESSION_COOKIE_SAMESITE",
    "CSRF_COOKIE_SECURE",
    "CSRF_COOKIE_HTTPONLY",
    "CSRF_COOKIE_SAMESITE",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "SECURE_REFERRER_POLICY",
    "SECURE_CROSS_ORIGIN_OPENER_POLICY",
    "X_FRAME_OPTIONS",
    "SECURE_CSP",
)


def production_settings() -> dict[str, Any]:
    """The security settings as ``SAGABOARD_HTTPS=1`` makes them (a fresh interpreter)."""
    env = {
        **os.environ,
        "SAGABOARD_DEBUG": "0",
        "SAGABOARD_HTTPS": "1",
        "SAGABOARD_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
    }
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {SECURITY_SETTINGS!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    values: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    values["SECURE_PROXY_SSL_HEADER"] = tuple(values["SECURE_PROXY_SSL_HEADER"])
    return values


@pytest.fixture(scope="module")
def production() -> dict[str, Any]:
    return production_settings()


@pytest.mark.slow  # production settings read in a subprocess
def test_https_turns_on_secure_cookies_hsts_and_the_redirect(production: dict[str, Any]) -> None:
    assert production["SECURE_SSL_REDIRECT"] is True
    assert production["SESSION_COOKIE_SECURE"] is True and production["CSRF_COOKIE_SECURE"]
    assert production["SECURE_HSTS_SECONDS"] >= 31536000
    assert production["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and production["SECURE_HSTS_PRELOAD"]
    assert production["SESSION_COOKIE_HTTPONLY"] and production["CSRF_COOKIE_HTTPONLY"]
    assert production["SESSION_COOKIE_SAMESITE"] == production["CSRF_COOKIE_SAMESITE"] == "Lax"
    assert production["X_FRAME_OPTIONS"] == "DENY"


@pytest.mark.slow  # production settings read in a subprocess
def test_the_csp_allows_no_inline_script_no_eval_and_no_framing(
    production: dict[str, Any],
) -> None:
    csp = production["SECURE_CSP"]
    assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
    assert csp["default-src"] == csp["object-src"] == csp["base-uri"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["form-action"] == csp["connect-src"] == ["'self'"]
    every = [v for values in csp.values() for v in values]
    assert not {"'unsafe-inline'", "'unsafe-eval'", "'unsafe-hashes'", "data:", "*"} & set(every)


def pages(world: World) -> list[str]:
    """Every GET route, with real objects where a route names one."""
    saga = world.approval.saga
    return sorted(
        {f"/{r}" for r in ROUTES if not r.endswith(("/delete/", "logout/"))}
        | {
            f"/sagas/shop/{saga.saga_id}/",
            f"/policies/{world.policy.pk}/",
            f"/admin/sagaboard/saga/{saga.pk}/change/",
            "/audit/?format=csv",
            "/api/v1/docs",
            "/api/v1/openapi.json",
        }
    )


@pytest.mark.slow  # production settings read in a subprocess
def test_every_page_carries_the_security_headers_over_https(
    world: World, production: dict[str, Any], settings: Any
) -> None:
    for name, value in production.items():
        setattr(settings, name, value)
    client = Client()
    client.force_login(world.root)
    https = {"secure": True, "headers": {"X-Forwarded-Proto": "https"}}
    checked = 0
    for url in pages(world):
        response = client.get(url, **https)
        assert response.status_code < 500 or url == "/healthz", (url, response.status_code)
        h = response.headers
        assert h["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        assert h["X-Content-Type-Options"] == "nosniff", url
        assert h["Referrer-Policy"] == "same-origin", url
        assert h["Cross-Origin-Opener-Policy"] == "same-origin", url
        assert h["X-Frame-Options"] == "DENY", url
        assert "frame-ancestors 'none'" in h["Content-Security-Policy"], url
        assert "script-src 'self';" in h["Content-Security-Policy"], url
        checked += 1
    assert checked > 40
    plain = client.get("/approvals/")  # plain HTTP: sent to https
    assert plain.status_code == 301 and plain["Location"].startswith("https://")


@pytest.mark.slow  # production settings read in a subprocess
def test_the_session_and_csrf_cookies_are_secure_httponly_and_lax_over_https(
    world: World, production: dict[str, Any], settings: Any
) -> None:
    for name, value in production.items():
        setattr(settings, name, value)
    client = Client(enforce_csrf_checks=True)
    # Over HTTPS, Django's CSRF check also wants a Referer of this site (browsers send it).
    https = {
        "secure": True,
        "headers": {"X-Forwarded-Proto": "https", "Referer": "https://testserver/login/"},
    }
    client.get("/login/", **https)
    csrf = client.cookies["csrftoken"]
    answer = client.post(
        "/login/",
        {"username": "root", "password": "pw-root-123456", "csrfmiddlewaretoken": csrf.value},
        **https,
    )
    assert answer.status_code == 302
    for name in ("sessionid", "csrftoken"):
        cookie = answer.cookies[name] if name in answer.cookies else client.cookies[name]
        assert cookie["secure"] is True, name
        assert cookie["httponly"] is True, name
        assert cookie["samesite"] == "Lax", name


def test_the_headers_are_there_without_https_too(world: World) -> None:
    """CSP, nosniff, referrer and framing rules do not wait for HTTPS (local installs)."""
    client = Client()
    client.force_login(world.root)
    response = client.get("/")
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "Strict-Transport-Security" not in response  # HSTS over HTTPS only


# ---------------------------------------------------------------- websockets and CSV


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_from_another_origin_is_refused_even_with_the_cookie() -> None:
    from asgiref.sync import sync_to_async

    from sagaboard.config.asgi import application

    @sync_to_async
    def session() -> str:
        shop = Project.objects.create(slug="ws", name="WS")
        client = Client()
        client.force_login(person("wendy", "viewer", shop))
        return str(client.cookies["sessionid"].value)

    cookie = f"sessionid={await session()}".encode()
    for origin, accepted in ((b"http://evil.example", False), (b"http://localhost", True)):
        headers = [(b"origin", origin), (b"host", b"localhost"), (b"cookie", cookie)]
        comm = WebsocketCommunicator(application, "/ws/sagas/?list=1", headers=headers)
        assert await comm.connect(timeout=5) == (True, None)  # a refusal is accepted, then...
        if accepted:
            assert await comm.receive_nothing(timeout=0.2)
        else:  # ...closed at once with 4403, nothing sent before
            assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
        await comm.disconnect()


FORMULAS = ['=HYPERLINK("http://evil")', "+1+1", "-1+1", "@SUM(A1)", "\t=1", "\r=1"]


def test_the_audit_csv_export_defuses_formula_cells(world: World) -> None:
    client = csrf_client(world.root)
    client.get("/")
    token = client.cookies["csrftoken"].value
    for reason in FORMULAS:
        policy = ApprovalPolicy.objects.get(pk=world.policy.pk)
        client.post(
            f"/policies/{policy.pk}/",
            {
                "name": policy.name,
                "tool_glob": policy.tool_glob,
                "approvers_required": "1",
                "on_expiry": "reject",
                "reason": reason,
                "csrfmiddlewaretoken": token,
            },
        )
    export = client.get("/audit/?format=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    reasons = [row[5] for row in rows[1:] if row[3].startswith("policy.")]
    assert sorted(reasons) == sorted("'" + f for f in FORMULAS)
    for row in rows[1:]:
        assert all(cell[:1] not in ("=", "+", "-", "@", "\t", "\r") for cell in row), row


def test_a_refused_htmx_post_says_why_in_the_pages_status_message(world: World) -> None:
    """Its ``hx-swap="none"`` would show nothing: the answer swaps the #flash message."""
    client = csrf_client(world.root)
    url = f"/approvals/{world.approval.pk}/decide/"
    answer = client.post(url, {"decision": "approve", "reason": "ok"}, headers=HTMX)
    text = answer.content.decode()
    assert answer.status_code == 403
    assert text.startswith('<p id="flash" hx-swap-oob="true"') and "Reload the page" in text
    page = client.post(url, {"decision": "approve", "reason": "ok"})
    assert page.status_code == 403 and "<h1>Refused</h1>" in page.content.decode()
    assert "<style" not in page.content.decode()  # Django's own page has one: the CSP refuses it


TEMPLATES = ROOT / "templates"
COMMENT = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", re.S)
# What the CSP refuses, or what htmx would evaluate: none of it in a template.
FORBIDDEN_MARKUP = {
    "an inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),
    "an event handler attribute": re.compile(r"\son[a-z]+\s*=", re.I),
    "a style attribute or element": re.compile(r"\sstyle\s*=|<style", re.I),
    "hx-on": re.compile(r"hx-on", re.I),
    "a javascript: URL": re.compile(r"javascript:", re.I),
    "a js: value for htmx": re.compile(r"""=\s*['"]\s*js:""", re.I),
    "an inline data: resource": re.compile(r"""(?:src|href)\s*=\s*['"]data:""", re.I),
}


def test_no_template_has_inline_script_handlers_styles_or_eval() -> None:
    found = [
        (str(path.relative_to(ROOT)), what)
        for path in sorted(TEMPLATES.rglob("*.html"))
        for what, pattern in FORBIDDEN_MARKUP.items()
        if pattern.search(COMMENT.sub("", path.read_text()))
    ]
    assert len(list(TEMPLATES.rglob("*.html"))) > 15
    assert found == []


def test_no_script_of_ours_evaluates_strings_or_writes_html() -> None:
    """The CSP refuses eval; writing HTML from strings would bypass the templates' escaping."""
    risky = re.compile(
        r"\beval\(|new Function|setTimeout\(\s*['\"]|innerHTML|outerHTML|document\.write"
    )
    scripts = sorted((ROOT / "static" / "sagaboard").glob("*.js"))
    assert len(scripts) >= 2
    assert [p.name for p in scripts if risky.search(p.read_text())] == []
