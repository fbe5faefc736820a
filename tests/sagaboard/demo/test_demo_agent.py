"""The demo agent (sagaboard/demo/agent.py): a checkout agent posting over HTTP through the
SDK; an operator's stop from the saga's page reaches it at its next step, and it runs its
own undos. In this process against the Django app (the SDK's httpx transport), and as
``make run`` runs it: its own process against a live server."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from sagaboard.access.services.tokens import token_revoke
from sagaboard.config.wsgi import application
from sagaboard.demo.agent import SAGA_NAME, Agent, wait_for_server
from sagaboard.demo.flows import AGENT_TOKEN, demo_agent_token
from sagaboard.management.commands import sagaboard_demo_agent as agent_command
from sagaboard.models import ApiToken, AuditEntry, Saga

UNDOS = ["undo charge_card", "undo reserve_stock"]  # newest first: the two steps done


def until(check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)
    return found


@pytest.fixture
def demo(settings: Any, tmp_path: Path) -> str:
    """The demo loaded; the agent's token (kept under tmp_path)."""
    settings.DEBUG = True
    call_command("sagaboard_demo", stdout=StringIO())
    return demo_agent_token(tmp_path / "agent.token")


@pytest.fixture
def agent(demo: str) -> Iterator[tuple[Agent, list[str]]]:
    """The agent on a thread of its own, against this process's Django app (each request on
    that thread's own connection: the test is transactional, so it sees them)."""
    said: list[str] = []
    bot = Agent(
        "http://testserver", demo, think_seconds=2.0, pause_seconds=60, stop=threading.Event(),
        transport=httpx.WSGITransport(app=application), rollback_poll=0.1, say=said.append,
    )  # fmt: skip
    thread = threading.Thread(target=bot.run, name="demo-agent")
    thread.start()
    try:
        yield bot, said
    finally:
        bot.stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def running_saga() -> Saga | None:
    return Saga.objects.filter(name=SAGA_NAME, status="IN_PROGRESS").first()


def done_steps(saga: Saga) -> int:
    return saga.steps.filter(state="COMPLETED").count()


@pytest.mark.slow  # the agent runs in a thread of its own, at its own pace
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("record_verified")
def test_a_stop_from_the_saga_page_reaches_the_agent_which_runs_its_own_undos(
    agent: tuple[Agent, list[str]],
) -> None:
    bot, said = agent
    saga = until(running_saga, what="the agent's checkout")
    assert saga.driver == Saga.Driver.CLIENT and saga.agent_driven
    until(lambda: done_steps(saga) == 2, what="two steps done")
    olga = Client()
    assert olga.login(username="olga", password="olga-demo")
    page = olga.get(f"/sagas/demo/{saga.saga_id}/").content.decode()
    assert f'action="/sagas/{saga.pk}/rollback-request/"' in page
    answer = olga.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "wrong address"})
    assert answer.status_code == 302
    until(lambda: bot.ended, what="the checkout to end")
    assert bot.ended == [(saga.saga_id, "ROLLED_BACK")]
    until(  # the SDK sends in the background
        lambda: Saga.objects.filter(pk=saga.pk, status="ROLLED_BACK").exists(),
        what="the rollback on the server",
    )
    states = dict(saga.steps.values_list("tool_name", "state"))
    assert states == {"reserve_stock": "ROLLED_BACK", "charge_card": "ROLLED_BACK"}
    # The agent ran them itself, newest first, and said who stopped it and why.
    undone = [line.split(":")[0].strip() for line in said if line.strip().startswith("undo ")]
    assert undone == UNDOS, said
    assert f"checkout {saga.saga_id} ROLLED_BACK: stopped by user:olga (wrong address)" in said
    assert bot.shop.charges == {} and bot.shop.shipments == {}
    assert bot.shop.stock == {"sku-mug": 50, "sku-tee": 50}
    until(
        lambda: AuditEntry.objects.filter(
            action="saga.stop_done", target=f"saga:{saga.saga_id}"
        ).exists(),
        what="the request closed as carried out",
    )


@pytest.mark.slow  # the agent runs in a thread of its own, at its own pace
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("record_verified")
def test_a_checkout_held_open_after_its_calls_is_stopped_from_its_page_with_all_four_undos(
    demo: str,
) -> None:
    """make run's agent holds each finished checkout open (``--hold-seconds``, default until
    stopped): there is always one to stop, and the demo's list does not fill up with
    completed checkouts. A stop while it waits rolls back all four calls, newest first."""
    said: list[str] = []
    bot = Agent(
        "http://testserver", demo, think_seconds=0.05, pause_seconds=60, hold_seconds=None,
        stop=threading.Event(), transport=httpx.WSGITransport(app=application),
        rollback_poll=0.1, say=said.append,
    )  # fmt: skip
    thread = threading.Thread(target=bot.run, name="demo-agent")
    thread.start()
    try:
        saga = until(running_saga, what="the agent's checkout")
        until(lambda: done_steps(saga) == 4, what="all four calls done")
        until(lambda: any("waiting for the carrier" in line for line in said), what="the hold")
        time.sleep(0.5)  # held: still open, not completed
        assert Saga.objects.get(pk=saga.pk).status == "IN_PROGRESS"
        olga = Client()
        assert olga.login(username="olga", password="olga-demo")
        answer = olga.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "fraud check"})
        assert answer.status_code == 302
        until(lambda: bot.ended, what="the checkout to end")
    finally:
        bot.stop.set()
        thread.join(timeout=30)
    assert bot.ended == [(saga.saga_id, "ROLLED_BACK")]
    assert f"checkout {saga.saga_id} ROLLED_BACK: stopped by user:olga (fraud check)" in said
    undone = [line.split(":")[0].strip() for line in said if line.strip().startswith("undo ")]
    assert undone == [
        "undo queue_receipt",
        "undo create_shipment",
        "undo charge_card",
        "undo reserve_stock",
    ]
    until(
        lambda: Saga.objects.filter(pk=saga.pk, status="ROLLED_BACK").exists(),
        what="the rollback on the server",
    )
    assert set(saga.steps.values_list("state", flat=True)) == {"ROLLED_BACK"}
    assert bot.shop.charges == {} and bot.shop.shipments == {} and bot.shop.holds == {}


@pytest.mark.slow  # the agent runs in a thread of its own, at its own pace
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("record_verified")
def test_stopping_the_agent_rolls_back_the_checkout_under_way(
    agent: tuple[Agent, list[str]],
) -> None:
    bot, said = agent
    saga = until(running_saga, what="the agent's checkout")
    until(lambda: done_steps(saga) == 1, what="a step done")
    bot.stop.set()
    until(lambda: "stopped" in said, what="the agent to stop")
    assert bot.ended == [(saga.saga_id, "ROLLED_BACK")]
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK"  # the store's close sent it all
    assert f"checkout {saga.saga_id} ROLLED_BACK: the agent is stopping" in said
    assert [line.strip() for line in said if "undo " in line] == [
        "undo reserve_stock: 2 x sku-mug back in stock"
    ]


@pytest.mark.slow  # the agent runs in a thread of its own, at its own pace
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("record_verified")
def test_a_token_revoked_while_the_agent_runs_stops_it_with_one_line_after_its_undos(
    demo: str, monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Path
) -> None:
    """The SDK keeps retrying (and spooling) what a 401 refuses, so without its own check
    the agent would go on printing checkouts nobody sees. It rolls back the checkout under
    way, as a stop does, and the command ends on one line saying why and what to do."""
    said: list[str] = []
    wsgi = httpx.WSGITransport(app=application)
    made: list[Agent] = []

    def agent_here(*args: Any, **kwargs: Any) -> Agent:
        kwargs["say"] = said.append
        made.append(Agent(*args, **kwargs, transport=wsgi, rollback_poll=0.1))
        return made[0]

    settings.VAR_DIR = tmp_path  # the agent's spool
    monkeypatch.setattr(agent_command.signal, "signal", lambda *args: None)  # not the test's
    monkeypatch.setattr(agent_command, "Agent", agent_here)
    monkeypatch.setattr(agent_command, "demo_agent_token", lambda path: demo)
    failed: list[BaseException] = []

    def command() -> None:
        try:
            call_command(
                "sagaboard_demo_agent", "--url", "http://testserver", "--think-seconds", "0.3",
                "--pause-seconds", "0.1", stdout=StringIO(),
            )  # fmt: skip
        except BaseException as err:
            failed.append(err)

    thread = threading.Thread(target=command, name="demo-agent")
    thread.start()
    try:
        saga = until(lambda: failed or running_saga(), what="the agent's checkout")
        assert not failed, failed
        until(lambda: done_steps(saga) >= 1, what="a step done")
        token_revoke(token=ApiToken.objects.get(label=AGENT_TOKEN), reason="leaked")
        thread.join(timeout=20)
        assert not thread.is_alive(), said
    finally:
        if thread.is_alive():
            made[0].stop.set()
            thread.join(timeout=30)
    (error,) = failed
    assert isinstance(error, CommandError)
    assert str(error) == (
        "sagaboard at http://testserver refused the agent's token (401): revoked, or unknown "
        "there; start the agent again to make a new one"
    )
    assert made[0].ended == [(saga.saga_id, "ROLLED_BACK")]
    assert f"checkout {saga.saga_id} ROLLED_BACK: the agent is stopping" in said
    assert not [line for line in said if "COMPLETED" in line or line == "stopped"], said
    assert made[0].shop.charges == {} and made[0].shop.stock == {"sku-mug": 50, "sku-tee": 50}


@pytest.mark.django_db
def test_the_agent_keeps_its_token_and_makes_a_new_one_only_when_it_stops_working(
    settings: Any, tmp_path: Path
) -> None:
    settings.DEBUG = True
    call_command("sagaboard_demo", "--no-user", stdout=StringIO())
    path = tmp_path / "var" / "demo-agent.token"
    first = demo_agent_token(path)
    assert path.read_text().strip() == first and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert demo_agent_token(path) == first
    assert ApiToken.objects.filter(label=AGENT_TOKEN).count() == 1
    token_revoke(token=ApiToken.objects.get(label=AGENT_TOKEN), reason="test")
    second = demo_agent_token(path)
    assert second != first and path.read_text().strip() == second


def test_the_agent_waits_for_the_server_and_gives_up_on_a_refused_token() -> None:
    answers = iter([None, None, 503, 200])

    def server(request: httpx.Request) -> httpx.Response:
        answer = next(answers)
        if answer is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(answer, json={"rollback_requested": []})

    said: list[str] = []
    up = wait_for_server(
        "http://sagaboard", "sgb_x", stop=threading.Event(), every=0.01,
        transport=httpx.MockTransport(server), say=said.append,
    )  # fmt: skip
    assert up and said == ["waiting for sagaboard at http://sagaboard ..."]
    refused = httpx.MockTransport(lambda request: httpx.Response(401, json={}))
    with pytest.raises(PermissionError, match="refused the agent's token"):
        wait_for_server("http://sagaboard", "sgb_x", stop=threading.Event(), transport=refused)
    stopped = threading.Event()
    stopped.set()
    assert not wait_for_server("http://nowhere", "sgb_x", stop=stopped)


# ---------------------------------------------------------------- as `make run` runs it

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


def states(api: Any, saga_id: str) -> list[str]:
    return [step["state"] for step in api.get_saga(saga_id)["steps"]]


@pytest.mark.slow
def test_the_agent_process_hears_an_operators_stop_on_a_live_server(tmp_path: Path) -> None:
    from tests.support.live_server import ROOT, Server, load_demo, session_cookie, temp_database
    from undo_core.remote import SagaboardClient

    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        load_demo(url)
        log = tmp_path / "agent.log"
        env = {
            **os.environ, "DATABASE_URL": url, "SAGABOARD_DEBUG": "1",
            "SAGABOARD_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE":
            "sagaboard.config.settings",
        }  # fmt: skip
        server = Server(url)
        with log.open("wb") as out:
            # Started before the server, as `make run` does: it waits for it.
            agent = subprocess.Popen(
                [sys.executable, "manage.py", "sagaboard_demo_agent", "--url", server.url,
                 "--think-seconds", "3", "--pause-seconds", "60"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            with server:

                def text() -> str:
                    return log.read_text(errors="replace")

                started = until(
                    lambda: re.search(r"checkout (agent-checkout-\w+) started", text()), 60,
                    "the agent's first checkout",
                )  # fmt: skip
                saga_id = started.group(1)
                token = (tmp_path / "var" / "demo-agent.token").read_text().strip()
                cookie = session_cookie(server.url, "olga", "olga-demo")
                csrf = re.search(r"csrftoken=([^;]+)", cookie)[1]  # type: ignore[index]
                with SagaboardClient(server.url, token) as api:
                    until(lambda: states(api, saga_id) == ["COMPLETED"] * 2, 30, "two steps")
                    with httpx.Client(
                        base_url=server.url, timeout=30, headers={"Cookie": cookie}
                    ) as olga:
                        page = olga.get(f"/sagas/demo/{saga_id}/").text
                        action = re.search(r'action="(/sagas/\d+/rollback-request/)"', page)
                        assert action, page[:2000]
                        answer = olga.post(
                            action.group(1), data={"reason": "customer called"},
                            headers={"X-CSRFToken": csrf, "Referer": f"{server.url}/"},
                        )  # fmt: skip
                        assert answer.status_code == 302, answer.text[:2000]
                    until(
                        lambda: api.get_saga(saga_id)["status"] != "IN_PROGRESS", 30,
                        "the saga to end",
                    )  # fmt: skip
                    assert api.get_saga(saga_id)["status"] == "ROLLED_BACK", text()
                    assert states(api, saga_id) == ["ROLLED_BACK"] * 2
                until(lambda: "stopped by user:olga (customer called)" in text(), 10)
                printed = text()
                assert "rolling back " + saga_id in printed
                assert printed.index("undo charge_card") < printed.index("undo reserve_stock")
                agent.send_signal(signal.SIGTERM)  # as make run's trap does
                assert agent.wait(timeout=30) == 0, text()
                assert text().rstrip().endswith("demo agent: stopped"), text()
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(timeout=10)
