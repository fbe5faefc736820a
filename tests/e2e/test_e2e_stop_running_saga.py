"""End to end: an operator stops a saga that a real agent process is running.

A real ASGI server (``tests.support.live_server``) on its own database; the agent
(``tests/e2e/stop_agent.py``) runs a long saga in its own process with
``SagaboardStore``. An operator logs in over HTTP, opens the saga page and posts its
"Request rollback" form (with its CSRF token), as a browser does. The agent's SDK hears
the request, its engine undoes the completed steps newest first at the next step
boundary, and the server ends up with the saga ROLLED_BACK and the request closed.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import ROOT, Server, manage, prepare, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

OPERATOR = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
olga = get_user_model().objects.create_user("olga", password="pw-olga-123456")
olga.groups.add(Group.objects.get(name="operator"))
Project.objects.get(slug="shop").members.add(olga)
"""

STORED = """
from sagaboard.models import AuditEntry, Saga
s = Saga.objects.get(saga_id="{saga_id}")
print(s.status, s.rollback_requested_by.username, s.rollback_request_heard_at is not None,
      s.rollback_request_done_at is not None)
print(" ".join(AuditEntry.objects.filter(target="saga:{saga_id}").order_by("id")
               .values_list("action", flat=True)))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        token = prepare(url)
        manage(url, "shell", "-c", OPERATOR)
        with Server(url) as srv:
            yield srv, token


def signed_in(base: str) -> httpx.Client:
    http = httpx.Client(base_url=base, timeout=10, trust_env=False)
    http.get("/login/").raise_for_status()
    form = {"username": "olga", "password": "pw-olga-123456",
            "csrfmiddlewaretoken": http.cookies["csrftoken"]}  # fmt: skip
    http.post("/login/", data=form, headers={"Referer": f"{base}/login/"})
    assert "sessionid" in http.cookies, "the login failed"
    return http


def read_line(agent: subprocess.Popen[str], wanted: str, timeout: float = 60) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = agent.stdout.readline() if agent.stdout else ""
        if not line:
            break
        seen.append(line.strip())
        if line.startswith(wanted):
            return seen
    raise AssertionError(f"the agent never printed {wanted!r}: {seen}")


def test_an_operator_stops_a_real_agents_saga_from_the_page_and_it_rolls_back_newest_first(
    server: tuple[Server, str], tmp_path: Path
) -> None:
    srv, token = server
    saga_id = "long-run-1"
    undo_log = tmp_path / "undone.txt"
    agent = subprocess.Popen(
        [sys.executable, "tests/e2e/stop_agent.py", srv.url, saga_id, str(undo_log)],
        cwd=ROOT, env={**os.environ, "SAGABOARD_TOKEN": token}, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        before = read_line(agent, "done step-3")
        with contextlib.closing(signed_in(srv.url)) as http:
            page = http.get(f"/sagas/shop/{saga_id}/")
            assert page.status_code == 200 and "Request rollback</button>" in page.text
            action = re.search(r'action="(/sagas/\d+/rollback-request/)"', page.text)
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
            assert action and csrf
            asked_at = time.monotonic()
            asked_wall = time.time()
            answer = http.post(
                action.group(1),
                data={"csrfmiddlewaretoken": csrf.group(1), "reason": "wrong customer"},
                headers={"Referer": f"{srv.url}/sagas/shop/{saga_id}/"},
            )
            assert answer.status_code == 302, answer.text
            lines = read_line(agent, "rolled back")
            heard_in = time.monotonic() - asked_at
            assert agent.wait(timeout=60) == 0
            rest = agent.stdout.read() if agent.stdout else ""
            after = http.get(f"/sagas/shop/{saga_id}/").text
    finally:
        if agent.poll() is None:
            agent.kill()
    done = [line.split()[1] for line in before + lines if line.startswith("done ")]
    after_ask = [
        line for line in lines if line.startswith("done ") and float(line.split()[2]) > asked_wall
    ]
    rolled_back = lines[-1].split()[2:]
    # Heard at a step boundary soon after (the step running then, at most one more: the
    # answer to its events and the idle poll race the next boundary), never all 40.
    assert len(after_ask) <= 2 and heard_in < 10, (after_ask, heard_in)
    # Every completed step was undone, newest first; nothing ran after the rollback began.
    assert done == [f"step-{n}" for n in range(1, len(done) + 1)]
    assert rolled_back == list(reversed(done))
    assert undo_log.read_text().split() == rolled_back
    assert "by user:olga: wrong customer" in rest
    # What the server stored: the saga rolled back, the request heard and closed, audited.
    with httpx.Client(base_url=srv.url, timeout=10) as api:
        saga = api.get(f"/api/v1/sagas/{saga_id}", headers={"Authorization": f"Bearer {token}"})
    mirrored = saga.json()
    assert mirrored["status"] == "ROLLED_BACK"
    assert {s["state"] for s in mirrored["steps"]} == {"ROLLED_BACK"}
    assert len(mirrored["steps"]) == len(rolled_back)
    stored = manage(srv.database_url, "shell", "-c", STORED.format(saga_id=saga_id)).splitlines()[
        -2:
    ]
    assert stored[0] == "ROLLED_BACK olga True True"
    assert stored[1].split() == ["saga.stop_requested", "saga.stop_done"]
    assert "Rollback requested by olga" in after and "wrong customer" in after
    print(f"rolled back {len(rolled_back)} steps, {len(after_ask)} more ran after the request;"
          f" done {heard_in:.2f} s after it")  # fmt: skip
