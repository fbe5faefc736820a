"""A client the project did not write: generated from the live OpenAPI schema by
``openapi-python-client``, it drives every operation and parses every answer as typed.

The schema is read from the server (``/api/v1/openapi.json``), the client generated into
a temporary directory (offline: any network use would go to a closed proxy and fail)
and imported; its httpx client talks to Django's test client through a transport, so
the test runs on SQLite and PostgreSQL like the rest. ``raise_on_unexpected_status``
makes any status the schema does not document fail the test, and each typed response
must be the model the schema names for it (enums included: a state the schema does not
list would not parse).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.http import QueryDict
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions
from sagaboard.batches.services import batches
from sagaboard.models import Project, Step
from tests.support.agent_runs import paused_storebot_events
from tests.support.hitl import person

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # generates a client in a subprocess
User = get_user_model()

PACKAGE = "sagaboard_generated_client"


class DjangoTransport(httpx.BaseTransport):
    """httpx requests served by Django's test client (same thread, same transaction)."""

    def __init__(self) -> None:
        self.client = Client()
        self.seen: list[tuple[str, str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "content-type")
        }
        answer = self.client.generic(
            request.method,
            request.url.raw_path.decode("ascii"),
            data=request.read(),
            content_type=request.headers.get("content-type", "application/octet-stream"),
            headers=headers,
        )
        self.seen.append((request.method, request.url.path, answer.status_code))
        return httpx.Response(
            answer.status_code, headers=list(answer.items()), content=answer.content
        )


def _generator() -> list[str]:
    script = Path(sys.executable).with_name("openapi-python-client")
    if script.exists():
        return [str(script)]
    found = shutil.which("openapi-python-client")
    assert found is not None, "openapi-python-client is not installed (pip install it: dev extra)"
    return [found]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The generated package, imported; the schema it came from is ``module.SCHEMA``."""
    work = tmp_path_factory.mktemp("generated-client")
    schema = Client().get("/api/v1/openapi.json")
    assert schema.status_code == 200
    (work / "openapi.json").write_bytes(schema.content)
    (work / "config.json").write_text(
        json.dumps({"post_hooks": [], "package_name_override": PACKAGE})
    )
    closed = "http://127.0.0.1:9"  # nothing listens there: generation must not need a network
    env = {**os.environ, "HTTP_PROXY": closed, "HTTPS_PROXY": closed, "ALL_PROXY": closed}
    done = subprocess.run(
        [*_generator(), "generate", "--path", str(work / "openapi.json"),
         "--output-path", str(work / PACKAGE), "--meta", "none",
         "--config", str(work / "config.json")],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(work))
    try:
        package = importlib.import_module(PACKAGE)
        package.SCHEMA = json.loads(schema.content)  # type: ignore[attr-defined]
        yield package
    finally:
        sys.path.remove(str(work))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _module(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


class Driver:
    """Calls generated operations by operationId; remembers which ones it called."""

    def __init__(self, package: ModuleType, token: str) -> None:
        self.package = package
        self.transport = DjangoTransport()
        self.client = package.AuthenticatedClient(
            base_url="http://testserver",
            token=token,
            raise_on_unexpected_status=True,
            httpx_args={"transport": self.transport},
        )
        self.models = _module(package, "models")
        self.operations = {
            op["operationId"]: (op.get("tags") or ["default"])[0].replace(" ", "_")
            for ops in package.SCHEMA["paths"].values()
            for op in ops.values()
        }
        self.called: set[str] = set()

    def call(self, operation_id: str, status: int, expected: str, /, **kwargs: Any) -> Any:
        tag = self.operations[operation_id]
        module = _module(self.package, f"api.{tag}.{operation_id}")
        response = module.sync_detailed(client=self.client, **kwargs)
        assert response.status_code == status, (operation_id, response.content)
        model = getattr(self.models, expected)
        assert isinstance(response.parsed, model), (operation_id, type(response.parsed))
        self.called.add(operation_id)
        return response.parsed


def test_a_generated_client_drives_every_operation_and_parses_every_answer(
    generated: ModuleType,
) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    api = Driver(generated, token_create(project=shop, label="generated").secret)
    m = api.models

    # Events: a mirrored run paused at an approval, one halted on a failed undo.
    for saga_id, approval, fails in [("agent-1", True, False), ("agent-2", False, True)]:
        sent = paused_storebot_events(saga_id, refund_approval=approval, return_undo_fails=fails)
        batch = m.EventBatchIn(events=[m.TransitionIn.from_dict(e) for e in sent])
        out = api.call("sagaboard_api_post_events", 200, "EventBatchOut", body=batch)
        assert {r.status for r in out.results} == {m.EventResultOutStatus.APPLIED}

    # Reads.
    saga = api.call("sagaboard_api_get_saga", 200, "SagaOut", saga_id="agent-1")
    assert saga.status is m.SagaStatus.COMPENSATING
    assert {s.state for s in saga.steps} <= set(m.StepState)
    page = api.call(
        "sagaboard_api_list_sagas", 200, "SagaPageOut",
        status=[m.SagaStatus.COMPENSATING, m.SagaStatus.ROLLBACK_FAILED], limit=10,
    )  # fmt: skip
    assert sorted(s.id for s in page.items) == ["agent-1", "agent-2"]
    events = api.call("sagaboard_api_list_saga_events", 200, "EventPageOut", saga_id="agent-1")
    assert events.items and all(isinstance(e.kind, m.EventKind) for e in events.items)

    # Decisions.
    rule = api.call(
        "sagaboard_api_decisions_approval_rule", 200, "ApprovalRuleOut",
        saga_id="agent-1", step_id="step-2",
    )  # fmt: skip
    assert isinstance(rule.needed, bool)
    asked = api.call(
        "sagaboard_api_decisions_request_approval", 200, "ApprovalOut",
        saga_id="agent-1", step_id="step-2", body=m.ApprovalAskIn(why="refunds need a person"),
    )  # fmt: skip
    assert asked.status is m.ApprovalStatus.PENDING
    read = api.call(
        "sagaboard_api_decisions_get_approval", 200, "ApprovalOut", approval_id=asked.id, wait=0
    )
    assert read.id == asked.id
    step = Step.objects.get(saga__saga_id="agent-2", step_id="step-1")
    operator_actions.step_act(step_pk=step.pk, user=person("olga", "operator", shop),
                              action="retry", reason="upstream is back")  # fmt: skip
    decision = api.call(
        "sagaboard_api_decisions_get_decision", 200, "DecisionOut",
        saga_id="agent-2", step_id="step-1", wait=0,
    )  # fmt: skip
    assert decision.state is m.StepState.ROLLBACK_FAILED
    ack = api.call(
        "sagaboard_api_decisions_ack_decision", 200, "AckOut",
        saga_id="agent-2", step_id="step-1", body=m.AckIn(action=m.CarriedOut.RETRY),
    )  # fmt: skip
    assert ack.acknowledged is m.CarriedOut.RETRY

    # A batch job an operator ran over the project: its totals and each item's result.
    olga = User.objects.get(username="olga")
    job = batches.batch_create(user=olga, action="leave", query=QueryDict("project=shop"),
                               reason="handled by hand", expected=1)  # fmt: skip
    batches.batch_run(job.pk)
    read = api.call("sagaboard_api_batches_get_batch", 200, "BatchJobOut", job_id=job.pk)
    assert read.state is m.BatchJobOutState.FINISHED and read.totals.succeeded == 1
    assert read.items[0].result is m.BatchItemOutResult.SUCCEEDED

    # The manual flow.
    begun = api.call(
        "sagaboard_api_begin_saga", 201, "SagaOut",
        body=m.SagaBeginIn(event_id="g-begin", name="checkout", id="manual-1"),
    )  # fmt: skip
    assert begun.driver is m.SagaOutDriver.SERVER
    for n, tool in enumerate(("charge", "reserve", "ship")):
        added = api.call(
            "sagaboard_api_add_step", 201, "StepOut", saga_id="manual-1",
            body=m.StepAddIn(event_id=f"g-add-{n}", tool_name=tool,
                             undo=m.UndoIn(kind=m.UndoKind.HANDLER,
                                           handler="storebot.return_item")),
        )  # fmt: skip
        assert added.state is m.StepState.PENDING
    done = api.call(
        "sagaboard_api_complete_step", 200, "StepOut", saga_id="manual-1", step_id="step-1",
        body=m.StepCompleteIn(event_id="g-done"),
    )  # fmt: skip
    assert done.state is m.StepState.COMPLETED
    failed = api.call(
        "sagaboard_api_fail_step", 200, "StepOut", saga_id="manual-1", step_id="step-2",
        body=m.StepFailIn(event_id="g-fail", error="out of stock"),
    )  # fmt: skip
    assert failed.state is m.StepState.FAILED
    rolled = api.call(
        "sagaboard_api_rollback_saga", 202, "SagaOut", saga_id="manual-1",
        body=m.SagaActionIn(event_id="g-rollback", reason="out of stock"),
    )  # fmt: skip
    assert isinstance(rolled.status, m.SagaStatus)
    api.call("sagaboard_api_begin_saga", 201, "SagaOut",
             body=m.SagaBeginIn(event_id="g-begin-2", name="quick", id="manual-2"))  # fmt: skip
    completed = api.call(
        "sagaboard_api_complete_saga", 200, "SagaOut", saga_id="manual-2",
        body=m.SagaActionIn(event_id="g-complete"),
    )  # fmt: skip
    assert completed.status is m.SagaStatus.COMPLETED
    # Nobody asked to stop a saga of this project: the agent's poll hears nothing.
    asked = api.call("sagaboard_api_list_rollback_requests", 200, "RollbackRequestsOut")
    assert asked.rollback_requested == []

    assert api.called == set(api.operations), set(api.operations) - api.called


def test_the_generated_client_parses_refusals_as_the_schema_documents_them(
    generated: ModuleType, settings: Any
) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    api = Driver(generated, token_create(project=shop, label="generated").secret)
    m = api.models
    refused = api.call(
        "sagaboard_api_begin_saga", 422, "ErrorOut",
        body=m.SagaBeginIn(event_id="b", name="n", id="p\u0430ypal"),  # a Cyrillic a
    )  # fmt: skip
    assert refused.error.field == "id" and "Cyrillic" in refused.error.message
    missing = api.call("sagaboard_api_get_saga", 404, "ErrorOut", saga_id="nope")
    assert missing.error.code == "not_found"

    settings.SAGABOARD_API_AUTH_RATE = "2/1m"
    stranger = Driver(generated, "not-a-token")
    for _ in range(2):
        denied = stranger.call("sagaboard_api_list_sagas", 401, "ErrorOut")
        assert denied.error.code == "unauthorized"
    assert ("GET", "/api/v1/sagas", 401) in stranger.transport.seen
    limited = stranger.call("sagaboard_api_get_saga", 429, "ErrorOut", saga_id="x")
    assert limited.error.code == "rate_limited"
