"""The demo on a live server, with something on every page: for the accessibility test
(tests/e2e/test_accessibility_browser.py) and the docs' screenshots (scripts/screenshots.py).

The demo (sagaboard.demo) brings sagas in every state: completed, running, rolled back, an
undo rejected, one waiting in the approval queue, a ROLLBACK_FAILED one halted on a failed
undo. Added here: an approval policy (an audit entry too) and an API token, so the policies,
audit and tokens pages show rows and not only their empty states.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.live_server import LIVE_SECRET_KEY, Server, load_demo, manage, temp_database

EXTRAS = (
    "from django.contrib.auth import get_user_model; from sagaboard.models import Project; "
    "from sagaboard.approvals.services.policies import policy_save; "
    "policy_save(project=Project.objects.get(slug='demo'), "
    "user=get_user_model().objects.get(username='demo'), "
    "data={'name': 'big refunds', 'tool_glob': 'refund_*', 'condition': 'input.amount > 10000', "
    "'approvers_required': '2', 'timeout_seconds': '3600', 'enabled': '1'})"
)

BATCH = "from tests.support.batch_world import demo_batch; demo_batch()"
"""A batch job (``/batch/1/``: the first of a fresh database), cancelled while queued."""

PAGES: dict[str, str] = {
    "overview": "/overview/",
    "saga-list": "/",
    "saga-rollback-failed": "/sagas/demo/demo-refund-stuck/",
    "saga-awaiting": "/sagas/demo/demo-refund-awaiting/",
    "saga-failing-undo": "/sagas/demo/demo-return-failing/",
    "saga-rejected": "/sagas/demo/demo-refund-rejected/",
    "approval-queue": "/approvals/",
    "needs-attention": "/attention/",
    "policies": "/policies/",
    "audit": "/audit/",
    "tokens": "/tokens/",
    "tools": "/tools/",
    "tool": "/tools/refund_payment/",
    "inbox": "/inbox/",
    "decide-link": "/decide/minted-when-the-demo-site-starts/",
    "batch-jobs": "/batch/",
    "batch-confirm": "/batch/new/?action=retry&project=demo",
    "batch-job": "/batch/1/",
}
"""Every page a signed-in user reaches from the navigation, and saga pages with steps in
several states (ROLLBACK_FAILED, AWAITING_APPROVAL, REJECTED, ROLLED_BACK, COMPENSATING)."""

# The demo user's decision link for the approval waiting in the queue (the confirm page a
# mailed link opens): minted with the server's key, as the worker would when it mails it.
MINT_LINK = f"""
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.test.utils import override_settings
from django.utils import timezone
from sagaboard.notify.services import link_tokens
from sagaboard.models import Approval, DecisionLink
link = DecisionLink.objects.create(
    approval=Approval.objects.filter(status="PENDING").order_by("pk").first(),
    user=get_user_model().objects.get(username="demo"),
    expires_at=timezone.now() + timedelta(days=1),
)
with override_settings(SECRET_KEY={LIVE_SECRET_KEY!r}):
    print(f"/decide/{{link_tokens.link_mint(link)}}/")
"""

PUBLIC_PAGES: dict[str, str] = {"login": "/login/", "not-found": "/no-such-page/"}


@contextmanager
def demo_site(kind: str, workdir: Path) -> Iterator[Server]:
    """A server on a fresh ``kind`` ("sqlite" or "postgres") database holding the demo."""
    with temp_database(kind, workdir) as url:
        load_demo(url)
        manage(url, "shell", "-v", "0", "-c", EXTRAS)
        manage(url, "shell", "-v", "0", "-c", BATCH)
        manage(url, "sagaboard_token", "create", "demo", "--label", "storebot in production")
        PAGES["decide-link"] = manage(url, "shell", "-v", "0", "-c", MINT_LINK)
        with Server(url, debug=True) as server:
            yield server


def log_in(browser: Any, base: str, username: str = "demo", password: str = "demo") -> Any:
    """The storage state (session cookie) of ``username``, logged in through the form."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("form.stack button[type=submit]")
        page.wait_for_selector("#saga-rows")
        return context.storage_state()
    finally:
        context.close()
