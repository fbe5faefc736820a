"""Hostile agents and hostile sites, in real headless Chromium (Debian's, driven by
Playwright), against a real uvicorn server with DEBUG off and the production CSP.

An agent puts script, image and SVG payloads and a ``javascript:`` URL in every field it
controls, through the SDK (a saga it runs itself, ``SagaboardStore``) and the API (a saga
sagaboard runs, ``SagaboardClient``): saga names, tool names, step inputs and outputs,
errors, undo handlers, webhook URLs and shell commands, rollback reasons, actors, notes.
An operator adds a policy and a token with payload names through the dashboard's forms,
and decides and resolves with payload reasons: by keyboard shortcut on the approval queue
and by bulk action on the needs-attention page. Pages opened beforehand receive all of it
live over the websocket; then every page is visited, the admin's too. On each, nothing
of a payload ran (``window.__xss`` is unset, no dialog opened), none became an element
or an attribute, every payload is there as text, and the browser reported no CSP
violation and no console error while the whole dashboard worked.

A second test frames the dashboard from another origin: the browser refuses to show it.
Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import Server, manage, temp_database
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardClient, SagaboardStore

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000  # an eager undo and a live update take well under a second
PASSWORD = "pw-security-e2e-2718"

SCRIPT = "<script>window.__xss=1</script>"
IMG = '<img src=x onerror="window.__xss=1">'
SVG = '"><svg onload="window.__xss=1">'
ALERT = "<img src=x onerror=alert(1)>"
PROBE = SCRIPT + IMG + SVG
JS_URL = "javascript:window.__xss=1"


def hostile(label: str, payload: str = PROBE) -> str:
    """A payload with a label, so each field's text can be found on the page."""
    return f"{label} {payload}"


# Fields the agent controls (SDK and API) and the operator types.
CLIENT_NAME = hostile("client-saga")
CLIENT_ID = "client/" + SCRIPT  # ids are the agent's choice too (and hold "/")
CLIENT_TOOL_A, CLIENT_TOOL_B = hostile("client-tool-a"), hostile("client-tool-b")
CLIENT_UNDO_ERROR, CLIENT_NOTE = hostile("client-undo-error"), hostile("client-note")
CLIENT_ACTOR = hostile("client-actor", IMG)
SERVER_NAME = hostile("server-saga")
HANDLER_TOOL, WEBHOOK_TOOL = hostile("handler-tool"), "hook_" + PROBE
COMMAND_TOOL, FAILING_TOOL = hostile("command-tool"), hostile("failing-tool")
STEP_ERROR = hostile("error")
# Inputs and outputs show as JSON, one key a line: one payload a key, found on the page as
# '"key": "payload"' (the payload's quotes escaped, as JSON writes them).
STEP_INPUT = {"in-script": SCRIPT, "in-img": IMG, "in-svg": SVG}
STEP_OUTPUT = {"out-script": SCRIPT, "out-img": IMG, "out-svg": SVG}
INPUT_TEXT = tuple(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in STEP_INPUT.items())
OUTPUT_TEXT = tuple(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in STEP_OUTPUT.items())
# The saga pages draw them as JSON trees (docs/operator/saga-page.md): key: "the string".
INPUT_TREE = tuple(f'{k}: "{v}"' for k, v in STEP_INPUT.items())
OUTPUT_TREE = tuple(f'{k}: "{v}"' for k, v in STEP_OUTPUT.items())
HANDLER = hostile("handler")
# Quoted as a shell would need it (an unsplittable command is refused with 422); the
# approver sees the text as sent, payload included.
COMMAND = "echo " + shlex.quote(hostile("command"))
ROLLBACK_REASON, API_ACTOR = hostile("rollback-reason"), hostile("api-actor", SVG)
REJECT_REASON, APPROVE_REASON = hostile("reject-reason"), hostile("approve-reason")
RESOLVE_REASON = hostile("resolve-reason")
POLICY_NAME = "policy " + IMG + ALERT  # at most 100 characters
TOKEN_LABEL = "token " + SVG + ALERT
REVOKE_REASON = hostile("revoke-reason")

MAKE_ROOT = f"""
from django.contrib.auth import get_user_model
from sagaboard.models import Project
project = Project.objects.create(slug="shop", name="Shop")
root = get_user_model().objects.create_superuser("root", password={PASSWORD!r})
project.members.add(root)
"""

INSPECT = """() => {
  const bad = [];
  if (typeof window.__xss !== "undefined") bad.push("window.__xss is set");
  const linked = ["href", "src", "action", "formaction", "xlink:href", "data", "srcdoc"];
  for (const el of document.querySelectorAll("*")) {
    for (const a of el.attributes) {
      if (/^on/i.test(a.name)) bad.push(`${el.tagName} has ${a.name}`);
      if (linked.includes(a.name.toLowerCase()) && /^\\s*javascript:/i.test(a.value))
        bad.push(`${el.tagName} ${a.name}=${a.value}`);
    }
  }
  for (const s of document.scripts)
    if (!s.src && s.type !== "application/json") bad.push("an inline <script>");
  for (const sel of ["img[src='x']", "iframe", "object", "embed", "base", "svg svg"])
    if (document.querySelector(sel)) bad.push(`an element ${sel}`);
  return bad;
}"""


# ---------------------------------------------------------------- the site and its user


@dataclass
class Site:
    server: Server
    token: str

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e-sec")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "shell", "-c", MAKE_ROOT)
        token = manage(url, "sagaboard_token", "create", "shop", "--label", "agent")
        # DEBUG off, as in production; undos run in the server process (no worker needed).
        # Command undos on, so the agent may post one (the approver rejects it: it never runs).
        env = {"SAGABOARD_TASKS_EAGER": "1", "SAGABOARD_ALLOW_COMMAND_UNDOS": "1"}
        with Server(url, debug=False, env=env) as server:
            yield Site(server, token)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


# Every CSP violation of every page (a listener the page cannot remove or block: Playwright
# adds it before the page's own scripts, outside the page's CSP).
WATCH_CSP = """document.addEventListener("securitypolicyviolation", (e) =>
  window.__cspViolation(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:` +
                        `${e.lineNumber} ${e.sample}`));"""


@dataclass
class Person:
    """A logged-in browser context that records CSP violations, errors and dialogs."""

    context: Any
    site: Site
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    confirms: list[str] = field(default_factory=list)

    def watch(self) -> None:
        self.context.expose_binding("__cspViolation", lambda _, text: self.violations.append(text))
        self.context.add_init_script(WATCH_CSP)

    def tab(self, path: str) -> Tab:
        tab = Tab(self.context.new_page())
        page = tab.page
        page.set_default_timeout(WAIT_MS)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on(
            "response",
            lambda r: self.errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )
        page.on("dialog", self._dialog)
        page.goto(self.site.url + path)
        return tab

    def _dialog(self, dialog: Any) -> None:
        if dialog.type == "confirm":  # the dashboard's own confirmations: accepted
            self.confirms.append(dialog.message)
            dialog.accept()
        else:
            self.alerts.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.violations == [], "CSP violations"
        assert self.errors == [], "console errors"
        assert self.alerts == [], "a payload opened a dialog"


@pytest.fixture
def root(browser: Any, site: Site) -> Iterator[Person]:
    person = Person(browser.new_context(viewport={"width": 1280, "height": 900}), site)
    try:
        person.watch()
        login = person.tab("/login/")
        login.page.fill("input[name=username]", "root")
        login.page.fill("input[name=password]", PASSWORD)
        login.page.click("button[type=submit]")
        login.page.wait_for_selector("#saga-rows")
        login.page.close()
        yield person
    finally:
        person.context.close()


def assert_inert(tab: Tab, *texts: str) -> None:
    """Nothing of a payload ran or became markup, and each of ``texts`` is there as text."""
    from playwright.sync_api import expect

    bad = tab.page.evaluate(INSPECT)
    assert bad == [], f"{tab.page.url}: {bad}"
    body = tab.page.locator("body")
    for text in texts:
        expect(body).to_contain_text(text)


# ---------------------------------------------------------------- what the agent posts


def client_saga(site: Site) -> None:
    """Through the SDK: a saga the agent runs. Undoing B fails, the agent resolves it with
    a note, then undoing A fails and stays failed (ROLLBACK_FAILED, on the attention page)."""

    def undo_fails(out: Any, inp: Any) -> None:
        raise ConnectionError(CLIENT_UNDO_ERROR)

    a = define_tool(CLIENT_TOOL_A, lambda i: STEP_OUTPUT, undo_fails)
    b = define_tool(CLIENT_TOOL_B, lambda i: STEP_OUTPUT, undo_fails)
    with SagaboardStore(site.url, site.token, flush_interval=0.01) as store:
        saga = Saga(CLIENT_NAME, store=store, saga_id=CLIENT_ID,
                    on_compensation_failure="halt")  # fmt: skip
        saga.execute(a, STEP_INPUT)
        saga.execute(b, STEP_INPUT)
        saga.rollback(actor=CLIENT_ACTOR)
        saga.resolve("step-2", CLIENT_NOTE, actor=CLIENT_ACTOR)
        saga.resume_rollback(actor=CLIENT_ACTOR)
        assert saga.status == "ROLLBACK_FAILED"
        assert store.flush(timeout=30)


STORED_BEFORE = """
from sagaboard.models import Step
steps = Step.objects.filter(saga__saga_id="xss-server")
steps.filter(tool_name={handler_tool!r}).update(undo={{"kind": "handler", "handler": {handler!r}}})
steps.filter(tool_name={webhook_tool!r}).update(undo={{"kind": "webhook", "url": {url!r}}})
"""


def server_saga_steps(api: SagaboardClient, site: Site) -> None:
    """Through the API: a saga sagaboard runs, whose undos are a handler nobody registered,
    a webhook to a javascript: URL (a payload-named policy asks for approval) and a shell
    command (always approved first); the last step fails and the agent asks to roll back.
    The API refuses the first two when added (they cannot run here), so they are stored
    as a saga kept from before that check would be: written into the database."""
    sid = "xss-server"
    undos = [
        (HANDLER_TOOL, {"kind": "handler", "handler": "storebot.return_item"}),
        (WEBHOOK_TOOL, {"kind": "webhook", "url": "https://127.0.0.1:9/undo"}),
        (COMMAND_TOOL, COMMAND),
    ]
    for tool, undo in undos:
        step = api.add_step(sid, tool, STEP_INPUT, undo=undo)
        api.complete_step(sid, step["id"], STEP_OUTPUT)
    failing = api.add_step(sid, FAILING_TOOL, STEP_INPUT)
    api.fail_step(sid, failing["id"], STEP_ERROR)
    stored = STORED_BEFORE.format(
        handler_tool=HANDLER_TOOL, handler=HANDLER, webhook_tool=WEBHOOK_TOOL, url=JS_URL
    )
    manage(site.server.database_url, "shell", "-c", stored)
    api.rollback(sid, ROLLBACK_REASON, actor=API_ACTOR)


# ---------------------------------------------------------------- the dashboard's forms


def add_policy(root: Person) -> None:
    from playwright.sync_api import expect

    tab = root.tab("/policies/")
    form = tab.page.locator("form[aria-label='New policy']")
    form.locator("input[name=name]").fill(POLICY_NAME)
    form.locator("input[name=tool_glob]").fill("hook_*")
    form.locator("button[type=submit]").click()
    expect(tab.page.locator("table.policies")).to_contain_text(POLICY_NAME)
    assert_inert(tab, POLICY_NAME)
    tab.page.close()


def add_and_revoke_token(root: Person) -> None:
    from playwright.sync_api import expect

    tab = root.tab("/tokens/")
    form = tab.page.locator("form[aria-label='New token']")
    form.locator("input[name=label]").fill(TOKEN_LABEL)
    form.locator("button[type=submit]").click()
    expect(tab.page.locator("#minted")).to_contain_text(TOKEN_LABEL)
    assert_inert(tab, TOKEN_LABEL)
    row = tab.page.locator("table.tokens tbody tr", has_text=TOKEN_LABEL)
    row.locator("input[name=reason]").fill(REVOKE_REASON)
    row.get_by_role("button", name="Revoke").click()
    expect(tab.page.locator("p.message.success")).to_contain_text(TOKEN_LABEL)
    assert_inert(tab, TOKEN_LABEL)
    tab.page.close()


def decide_by_keyboard(queue: Tab, tool: str, reason: str, how: str) -> None:
    """Type the reason, then decide with the queue's shortcuts: Escape then ``r`` (reject)
    or ``a`` (approve) opens the decision dialog, which shows the item's text and the
    reason; its own button decides (no key, and no Enter in a reason field, ever does)."""
    from playwright.sync_api import expect

    item = queue.page.locator("#approval-items li.approval", has_text=tool)
    expect(item).to_have_count(1)
    reason_box = item.locator("input[name=reason]")
    reason_box.fill(reason)
    reason_box.press("Escape")
    expect(item).to_be_focused()
    queue.page.keyboard.press("r" if how == "reject" else "a")
    dialog = queue.page.locator("#decide-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(tool)
    expect(dialog.locator("input[name=reason]")).to_have_value(reason)
    assert_inert(queue, tool)  # the dialog's copy of the item is text too
    dialog.locator("button.decide-go").click()
    expect(queue.page.locator("#flash")).to_contain_text(tool)
    expect(item).to_have_count(0)


# ---------------------------------------------------------------- the tests


def test_hostile_text_from_agents_and_people_stays_text_everywhere_under_a_strict_csp(
    site: Site, root: Person
) -> None:
    from playwright.sync_api import expect

    add_policy(root)
    add_and_revoke_token(root)

    # Open before anything exists: everything that follows reaches them live.
    listing, queue, attention = root.tab("/"), root.tab("/approvals/"), root.tab("/attention/")
    for tab in (listing, queue, attention):
        tab.mark()

    client_saga(site)
    with SagaboardClient(site.url, site.token) as api:
        api.begin(SERVER_NAME, saga_id="xss-server",
                  options={"on_compensation_failure": "continue"}, actor=API_ACTOR)  # fmt: skip
        detail = root.tab("/sagas/shop/xss-server/")
        detail.mark()
        server_saga_steps(api, site)

    # The approval queue: the shell command first (newest undo), then the webhook.
    expect(queue.page.locator("#approval-items li.approval")).to_have_count(1)
    assert_inert(queue, COMMAND_TOOL, COMMAND, STEP_ERROR, *INPUT_TEXT, *OUTPUT_TEXT)
    queue.screenshot("xss-approval-queue.png")
    decide_by_keyboard(queue, COMMAND_TOOL, REJECT_REASON, "reject")
    expect(queue.page.locator("#approval-items li.approval")).to_have_count(1)
    assert_inert(queue, WEBHOOK_TOOL, POLICY_NAME, JS_URL)
    decide_by_keyboard(queue, WEBHOOK_TOOL, APPROVE_REASON, "approve")
    queue.assert_not_reloaded()

    # The webhook's URL is not http(s) and the handler is not registered: neither can run
    # here, so both undos fail (the plan and the queue said so before anyone approved).
    failures = attention.page.locator("li.failure")
    expect(failures).to_have_count(3)  # two of the server's saga, one of the agent's
    assert_inert(attention, HANDLER_TOOL, WEBHOOK_TOOL, CLIENT_TOOL_A, HANDLER,
                 CLIENT_UNDO_ERROR, SERVER_NAME, CLIENT_NAME)  # fmt: skip
    attention.screenshot("xss-needs-attention.png")
    # Let the rollback come to rest first: a later live update redraws the items, and
    # with them their ticks.
    with SagaboardClient(site.url, site.token) as api:
        deadline = time.monotonic() + 30
        while api.get_saga("xss-server")["status"] != "ROLLBACK_FAILED":
            assert time.monotonic() < deadline, "the server's saga never came to rest"
            time.sleep(0.2)
    expect(failures).to_have_count(3)
    attention.page.bring_to_front()
    attention.page.locator("h1").click()  # the keys go to this page
    attention.page.keyboard.press("j")  # the first with the keyboard: j to move, x to tick
    attention.page.keyboard.press("x")
    ticks = attention.page.locator("li.failure input[type=checkbox]:checked")
    expect(ticks).to_have_count(1)
    for n in (1, 2):
        failures.nth(n).locator("input[type=checkbox]").check()
    expect(ticks).to_have_count(3)
    attention.page.locator("#bulk-steps input[name=reason]").fill(RESOLVE_REASON)
    ticked = attention.page.locator("li.failure input[type=checkbox]:checked")
    expect(ticked).to_have_count(3)
    attention.page.locator("#bulk-steps button[value=resolve]").click()
    # The server's two undos are resolved at once (tasks run eagerly here); the agent's is
    # only requested: its own process carries it out.
    report = attention.page.locator("#flash")
    expect(report.locator(".summary")).to_have_text(
        "Force-resolve, 3 selected: 2 succeeded, 1 requested, not run yet."
    )
    expect(report.locator("li[data-result=succeeded]")).to_have_count(2)
    expect(report.locator("li[data-result=requested]")).to_contain_text(
        "resolve waiting for the agent's process to carry it out"
    )
    assert len(root.confirms) == 1 and "(3 selected)" in root.confirms[0]
    attention.assert_not_reloaded()

    # Live, then rendered afresh: the list, the saga's page.
    for how in ("live", "rendered"):
        if how == "rendered":
            listing.page.reload()
            detail.page.reload()
        expect(listing.page.locator("#saga-rows tr")).to_have_count(2)
        assert_inert(listing, SERVER_NAME, CLIENT_NAME, CLIENT_ID)
        expect(detail.page.locator("h1 > .status")).to_have_text(
            "ROLLED BACK with exceptions (1 rejected, 2 resolved by hand)"
        )
        assert_inert(detail, SERVER_NAME, HANDLER_TOOL, WEBHOOK_TOOL, COMMAND_TOOL,
                     FAILING_TOOL, *INPUT_TREE, *OUTPUT_TREE, STEP_ERROR, HANDLER,
                     REJECT_REASON, APPROVE_REASON, RESOLVE_REASON, API_ACTOR)  # fmt: skip
        listing.screenshot(f"xss-list-{how}.png")
        detail.screenshot(f"xss-server-saga-{how}.png")

    # Every other page, rendered.
    pages = {
        f"/sagas/shop/{quote(CLIENT_ID)}/": (CLIENT_ID, CLIENT_NAME, CLIENT_TOOL_A,
                                             CLIENT_TOOL_B, *INPUT_TREE, CLIENT_UNDO_ERROR,
                                             CLIENT_NOTE, CLIENT_ACTOR, RESOLVE_REASON),
        "/overview/": (SERVER_NAME, CLIENT_NAME),
        "/approvals/": (),
        "/attention/": (),
        "/policies/": (POLICY_NAME,),
        "/audit/": (REJECT_REASON, APPROVE_REASON, RESOLVE_REASON, REVOKE_REASON),
        "/tokens/": (TOKEN_LABEL,),
        "/?q=client": (CLIENT_NAME, CLIENT_ID),
        # Reflected: payloads in the filters come back in the search boxes and the feed URL.
        f"/?q={quote(SVG)}&tool={quote(IMG)}": (),
        f"/audit/?user={quote(SVG)}&action={quote(SCRIPT)}": (),
    }  # fmt: skip
    for path, texts in pages.items():
        tab = root.tab(path)
        assert_inert(tab, *texts)
        tab.page.close()
    # A status that is none is refused (400), the value named as text in the message.
    tab = root.tab(f"/?status={quote(SCRIPT)}")
    assert_inert(tab)
    shown = tab.page.locator("p.message.error").inner_text()
    assert f"status: unknown value '{SCRIPT.upper()}'" in shown  # as text, upper-cased
    tab.page.close()
    root.errors[:] = [e for e in root.errors if "400" not in e]  # that refusal's own
    visit_the_admin(root)
    root.assert_clean()


def visit_the_admin(root: Person) -> None:
    """Every model's list in the admin, and the first object of each."""
    tab = root.tab("/admin/")
    links = tab.page.eval_on_selector_all(
        "#content-main a[href*='/admin/sagaboard/']", "as => as.map(a => a.pathname)"
    )
    lists = sorted({link for link in links if not link.endswith("/add/")})
    assert len(lists) >= 8
    changes = 0
    for path in lists:
        tab.page.goto(root.site.url + path)
        assert_inert(tab)
        first = tab.page.locator("#result_list tbody tr th a").first
        if first.count():
            first.click()
            tab.page.wait_for_selector("#content")
            assert_inert(tab)
            changes += 1
    assert changes >= 6
    tab.page.goto(root.site.url + "/admin/sagaboard/saga/?q=xss")
    assert_inert(tab, SERVER_NAME, CLIENT_NAME)
    tab.page.close()


def test_the_api_docs_page_works_under_the_csp(site: Site, root: Person) -> None:
    from playwright.sync_api import expect

    tab = root.tab("/api/v1/docs")
    expect(tab.page.locator(".swagger-ui .info")).to_contain_text("sagaboard")
    root.assert_clean()


INJECT = """async () => {
  const inline = document.createElement("script");
  inline.textContent = "window.__ran = 1";
  document.body.append(inline);
  const file = document.createElement("script");  // a same-origin file that calls eval
  file.src = "/static/sagaboard/probe-eval.js";
  const loaded = new Promise((done) => { file.onload = done; file.onerror = done; });
  document.body.append(file);
  await loaded;
  return [typeof window.__ran, window.__evaluated, htmx.config.allowEval];
}"""


def test_the_browser_enforces_the_policy_and_the_watch_sees_a_violation(
    site: Site, root: Person
) -> None:
    """Were a payload to reach a page as markup, the browser would refuse to run it: an
    inline script and eval (even from one of our own files) are blocked, htmx is told not
    to eval, and the test's watch reports both violations (so the other tests' empty
    lists of violations mean something)."""
    tab = root.tab("/")
    tab.page.route(
        "**/static/sagaboard/probe-eval.js",
        lambda route: route.fulfill(
            content_type="text/javascript",
            body="try { eval('1'); window.__evaluated = 'ran'; }"
            " catch (e) { window.__evaluated = e.name; }",
        ),
    )
    assert tab.page.evaluate(INJECT) == ["undefined", "EvalError", False]
    for _ in range(50):  # violation events are reported asynchronously
        if len(root.violations) >= 2:
            break
        tab.page.wait_for_timeout(20)
    directives = sorted(v.split(" ", 1)[0] for v in root.violations)
    assert directives == ["script-src", "script-src-elem"], root.violations
    root.violations.clear()
    root.errors.clear()  # Chromium logs both refusals in the console too


EVIL = "http://evil.example"


def test_another_site_cannot_frame_the_dashboard(site: Site, browser: Any) -> None:
    """Clickjacking: a page on another origin puts the dashboard in a frame. The browser
    shows nothing of it (CSP frame-ancestors 'none', X-Frame-Options DENY); a page without
    those headers, framed the same way, does show (the check can fail)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)

        def serve(route: Any) -> None:
            if route.request.url == f"{EVIL}/plain":
                route.fulfill(content_type="text/html", body="<form><input name=username></form>")
            else:
                target = route.request.url.split("?frame=", 1)[1]
                route.fulfill(content_type="text/html", body=f'<iframe src="{target}"></iframe>')

        page.route(f"{EVIL}/**", serve)
        for target, shown in ((f"{EVIL}/plain", True), (f"{site.url}/login/", False)):
            page.goto(f"{EVIL}/?frame={target}")
            page.wait_for_load_state("load")  # the frame's load (or refusal) included
            frame = page.frames[1]
            assert frame.locator("input[name=username]").count() == (1 if shown else 0), target
            # A refused frame holds Chromium's error page instead of the dashboard.
            assert (frame.url == target) if shown else frame.url.startswith("chrome-error://")
    finally:
        context.close()


def test_a_page_left_open_across_a_new_login_says_why_its_action_was_refused(
    site: Site, root: Person
) -> None:
    """Logging in again rotates the CSRF token: a page from before posts a stale one. The
    htmx post is refused (403) and the page says so and what to do; no CSP violation.

    A live page whose session ends reloads itself once (to the login page); this one
    reloaded for that reason moments ago, so it stays as it is (no reload loop) and says
    its live updates stopped: it is the stale page an operator may still act on."""
    from playwright.sync_api import expect

    stale = root.tab("/approvals/")
    stale.page.evaluate(
        "window.sessionStorage.setItem('sagaboard.live-closed.4401', String(Date.now()))"
    )
    stale.mark()
    other = root.tab("/")
    other.page.get_by_role("button", name="Log out").click()
    other.page.wait_for_url("**/login/")
    other.page.fill("input[name=username]", "root")
    other.page.fill("input[name=password]", PASSWORD)
    other.page.click("button[type=submit]")
    other.page.wait_for_selector("#saga-rows")
    expect(stale.page.locator("#flash")).to_contain_text("you are no longer logged in")

    stale.page.locator("#bulk-reason").fill("anything")
    stale.page.get_by_role("button", name="Approve selected").click()
    flash = stale.page.locator("#flash")
    expect(flash).to_contain_text("security token (CSRF) is missing or out of date")
    expect(flash).to_contain_text("Reload the page and try again.")
    stale.assert_not_reloaded()
    assert root.errors and all("403" in e for e in root.errors), root.errors  # that post only
    root.errors.clear()
    stale.page.reload()  # as the message says: now the same action goes through
    stale.page.locator("#bulk-reason").fill("anything")
    stale.page.get_by_role("button", name="Approve selected").click()
    expect(stale.page.locator("#flash")).to_have_text("Select at least one.")
    root.errors.clear()  # its 400 (nothing selected) is logged by the browser
    root.assert_clean()
