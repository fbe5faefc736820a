"""Property-based fuzzing of API v1 from its own OpenAPI schema, against a live server.

schemathesis reads ``/api/v1/openapi.json`` from a real server (uvicorn, DEBUG off, its own
database, seeded through the API by ``fuzz_data.seed``) and runs its phases on every
operation: coverage (boundary values and every way to break each field), fuzzing
(schema-valid and schema-breaking input), and stateful (chains along the OpenAPI links:
begin a saga, add its steps, complete, fail, ask for approval...); examples, if the schema
had any. For every answer:

- no 5xx (``not_a_server_error``);
- status, content type, headers and body as the schema documents them, error bodies
  included (``status_code_conformance``, ``content_type_conformance``,
  ``response_schema_conformance``...); schema-breaking input refused
  (``negative_data_rejection``); auth enforced (``ignored_auth``);
- a refused request (4xx), and any read, changed nothing (``fuzz_hooks``: a digest of
  every table a request could touch, before and after).

``SAGABOARD_FUZZ_EXAMPLES`` sets the examples per operation (default 6: a minute or two);
``SAGABOARD_FUZZ_SECONDS``, if set, makes the fuzzing and stateful phases go on, new
examples each round, until that many seconds are spent. ``make fuzz`` runs 100 examples
for 10 minutes on each database. A failure prints its request as a curl command.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fuzz_data import TABLES, DatabaseState, seed
from tests.support.live_server import ROOT, Server, prepare, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
EXAMPLES = int(os.environ.get("SAGABOARD_FUZZ_EXAMPLES", "6"))
SECONDS = int(os.environ.get("SAGABOARD_FUZZ_SECONDS", "0"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("fuzz")) as url:
        token = prepare(url)
        with Server(url) as server:
            yield {"url": server.url, "token": token, "database_url": url,
                   "seed": seed(server.url, token)}  # fmt: skip


def schemathesis_run(
    live: dict[str, Any], workdir: Path, *args: str
) -> tuple[int, str, dict[str, int]]:
    """``schemathesis run`` against the live server with our hooks.

    Returns its exit code, its report, and how many answers the state check compared.
    """
    stats = workdir / "state-check.json"
    # Unknown query parameters are ignored, as HTTP APIs commonly do (unknown body fields
    # are refused): don't count a request that only adds some as schema-breaking.
    # A body over SAGABOARD_API_MAX_BODY is refused with 413 before it is read: that is a
    # rejection too (schemathesis's default list of rejection statuses leaves 413 out).
    (workdir / "schemathesis.toml").write_text(
        "[generation]\nallow-extra-parameters = false\n\n"
        "[checks.negative_data_rejection]\n"
        'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415",'
        ' "422", "428", "429"]\n'
    )
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.support.fuzz_hooks",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SAGABOARD_FUZZ_DATABASE_URL": live["database_url"],
        "SAGABOARD_FUZZ_SEED": json.dumps(dataclasses.asdict(live["seed"])),
        "SAGABOARD_FUZZ_STATS": str(stats),
    }
    done = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--no-color", "run",
         f"{live['url']}/api/v1/openapi.json",
         "--header", f"Authorization: Bearer {live['token']}",
         "--checks", "all",
         # Accepting schema-valid input is no rule here: a well-formed event can still break
         # the saga's state machine (409) or name a saga that is not there (422).
         "--exclude-checks", "positive_data_acceptance",
         "--mode", "all", "--workers", "1", "--request-timeout", "60",
         "--generation-database", "none", "--continue-on-failure", "--output-truncate", "false",
         *args],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=SECONDS + 900,
    )  # fmt: skip
    compared = json.loads(stats.read_text()) if stats.exists() else {}
    return done.returncode, done.stdout + done.stderr, compared


def test_every_operation_answers_as_documented_and_refusals_change_nothing(
    live: dict[str, Any], tmp_path: Path
) -> None:
    budget = ["--max-time", str(SECONDS)] if SECONDS else []
    code, report, compared = schemathesis_run(
        live, tmp_path, "--max-examples", str(EXAMPLES), *budget
    )
    assert code == 0, report
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, f"{phase} did not run to the end:\n{report}"
    # The state check really compared refusals and reads (it could pass vacuously otherwise).
    assert compared.get("refused", 0) >= 50 and compared.get("read", 0) >= 50, compared


def test_the_state_check_sees_a_change(live: dict[str, Any]) -> None:
    """The check the fuzzer relies on notices a row that changed (it could not fail otherwise)."""
    db = DatabaseState(live["database_url"])
    try:
        before = db.snapshot()
        assert set(before) == set(TABLES) and db.changed(before, db.snapshot()) == []
        response = httpx.post(
            f"{live['url']}/api/v1/sagas",
            json={"event_id": "state-check", "name": "state-check"},
            headers={"Authorization": f"Bearer {live['token']}"},
        )
        assert response.status_code == 201
        assert {"sagaboard_saga", "sagaboard_event", "sagaboard_apirequest"} <= set(
            db.changed(before, db.snapshot())
        )
    finally:
        db.close()


def test_the_schema_documents_every_error_the_api_answers(live: dict[str, Any]) -> None:
    """Each operation lists the error statuses its handlers produce, all with ErrorOut."""
    doc = httpx.get(f"{live['url']}/api/v1/openapi.json").json()
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            documented = set(op["responses"])
            assert {"401", "404", "422", "503"} <= documented, (method, path, documented)
            if method == "post":
                assert {"400", "409", "413"} <= documented, (method, path, documented)
            for status in documented - {"200", "201", "202"}:
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorOut"), (method, path, status, ref)


def test_every_link_names_an_operation_and_its_parameters(live: dict[str, Any]) -> None:
    """The links the stateful phase walks (sagaboard.api.links) point at real operations."""
    doc = httpx.get(f"{live['url']}/api/v1/openapi.json").json()
    operations = {
        op["operationId"]: {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        for ops in doc["paths"].values()
        for op in ops.values()
    }
    links = [
        link
        for ops in doc["paths"].values()
        for op in ops.values()
        for answer in op["responses"].values()
        for link in answer.get("links", {}).values()
    ]
    assert len(links) >= 15
    for link in links:
        assert set(link["parameters"]) == operations[link["operationId"]], link


def test_an_oversized_upload_gets_a_json_413_from_the_live_server(live: dict[str, Any]) -> None:
    """Through uvicorn: declared (Content-Length) or chunked, the body limit answers first."""
    headers = {"Authorization": f"Bearer {live['token']}", "Content-Type": "application/json"}
    url = f"{live['url']}/api/v1/events"
    body = b'{"events": ["' + b"x" * (1024 * 1024) + b'"]}'  # just over the default 1 MiB

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    for content in (body, chunks()):
        response = httpx.post(url, content=content, headers=headers, timeout=30)
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
