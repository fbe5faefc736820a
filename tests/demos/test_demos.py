"""The three demos run as a user runs them (``python -m ...``) and tell the seed's story.

Each runs in a subprocess with a clean environment for the sagaboard token, so
a demo that needs more than the standard library (or a server) without
``--url`` fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_demo(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``python -m undo_core.demos.<name>``; assert it exits 0 and return its stdout."""
    base = {k: v for k, v in os.environ.items() if k != "SAGABOARD_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", f"undo_core.demos.{name}", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # the demo runs in a subprocess
def test_storebot_rolls_back_the_refund_then_the_return() -> None:
    out = run_demo("storebot")
    assert (
        'Task failed at step "step-3" (generate_label). '
        "All prior side-effects successfully rolled back." in out
    )
    assert "saga.status: ROLLED_BACK" in out
    refund_undone = out.index("undo refund_payment: refund re_1 cancelled")
    return_undone = out.index("undo return_item: item #882 is active again")
    assert out.index("FedEx: 500") < refund_undone < return_undone  # LIFO
    assert re.search(r"step-1\s+return_item\s+ROLLED_BACK", out)
    assert re.search(r"step-2\s+refund_payment\s+ROLLED_BACK", out)
    assert re.search(r"step-3\s+generate_label\s+FAILED", out)
    assert "DB: item #882 is active; Stripe: 0 refund(s) outstanding" in out


@pytest.mark.slow  # the demo runs in a subprocess
def test_checkout_completes_one_order_and_rolls_back_the_other() -> None:
    out = run_demo("checkout")
    first, second = out.split("Order 2:")
    assert "saga.status: COMPLETED" in first
    assert "email: confirmation sent to ada@example.com" in first
    assert "undo" not in first
    assert (
        'Task failed at step "step-3" (send_email). '
        "All prior side-effects successfully rolled back." in second
    )
    assert "saga.status: ROLLED_BACK" in second
    assert second.index("undo charge_customer") < second.index("undo deduct_inventory")
    assert "Inventory abc: 9 (10 - 1 sold); charges kept: ch_1" in out


@pytest.mark.slow  # the demo runs in a subprocess
def test_crash_recovery_kills_the_agent_and_a_second_process_undoes_once(tmp_path: Path) -> None:
    db = tmp_path / "sagas.sqlite3"
    out = run_demo("crash_recovery", "--db", str(db))
    killed = re.search(r"\[process 1, pid (\d+)\]", out)
    recovered = re.search(r"\[process 2, pid (\d+)\]", out)
    assert killed and recovered and killed.group(1) != recovered.group(1)
    assert re.search(r"SIGKILL sent to pid \d+ mid-saga \(exit -9\)", out)
    after_kill = out.split("SIGKILL", 1)[1]
    assert "DB: item" not in after_kill and "Stripe:" not in after_kill  # nothing re-executed
    assert "): ROLLED_BACK" in after_kill
    assert "rolled back (newest first): step-2 (refund_payment), step-1 (return_item)" in out
    assert after_kill.index("undo refund_payment") < after_kill.index("undo return_item")
    assert "a second recover() finds 0 saga(s)" in out
    assert "undos in the ledger: refund_payment x1, return_item x1" in out
    assert out.count("undo refund_payment:") == 1 and out.count("undo return_item:") == 1
    assert db.exists()


@pytest.mark.slow  # the demo runs in a subprocess
def test_url_without_a_token_is_refused_before_anything_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "undo_core.demos.storebot", "--url", "http://127.0.0.1:9"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "SAGABOARD_TOKEN"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--url needs a token" in done.stderr
    assert "StoreBot" not in done.stdout


PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real sagaboard server on its own throw-away database, and a token for its project."""
    from tests.support.live_server import Server, prepare, temp_database

    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        token = prepare(url)
        with Server(url) as server:
            yield server.url, token


@pytest.mark.slow
def test_storebot_with_url_shows_up_rolled_back_on_a_live_sagaboard(
    live: tuple[str, str],
) -> None:
    url, token = live
    out = run_demo("storebot", "--url", url, env={"SAGABOARD_TOKEN": token})
    link = re.search(rf"On the dashboard: {re.escape(url)}/sagas/shop/([\w-]+)/", out)
    assert link, out
    answer = httpx.get(f"{url}/api/v1/sagas", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    [saga] = answer.json()["items"]
    assert (saga["id"], saga["name"], saga["status"]) == (
        link.group(1),
        "storebot-return",
        "ROLLED_BACK",
    )
    detail = httpx.get(
        f"{url}/api/v1/sagas/{saga['id']}", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert [(s["tool_name"], s["state"]) for s in detail["steps"]] == [
        ("return_item", "ROLLED_BACK"),
        ("refund_payment", "ROLLED_BACK"),
        ("generate_label", "FAILED"),
    ]
