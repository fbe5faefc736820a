"""OpenAPI links of API v1: which answer names what the next call needs.

A client generator (and the stateful phase of the API fuzzer, tests/security) follows them:
a begun saga's ``id`` is the ``saga_id`` of its steps, complete and rollback calls; a new
step's ``id`` is the ``step_id`` of its complete, fail and approval calls; an approval's
``id`` is what ``GET /approvals/{approval_id}`` reads.
"""

from __future__ import annotations

from typing import Any

OPERATION_PREFIX = {
    "sagaboard.record.api.v1": "sagaboard_api_",
    "sagaboard.actions.api.decisions": "sagaboard_api_decisions_",
    "sagaboard.batches.api.batches": "sagaboard_api_batches_",
}
"""Each router's operation ids: this prefix and the handler's name. Clients are generated from
these ids, so they stay what they were whichever module serves the handlers."""
_OP = OPERATION_PREFIX["sagaboard.record.api.v1"] + "{}"
_DECISIONS = OPERATION_PREFIX["sagaboard.actions.api.decisions"] + "{}"

SAGA = {"saga_id": "$response.body#/id"}
SAGA_OF_REQUEST = {"saga_id": "$request.path.saga_id"}
STEP = {"saga_id": "$request.path.saga_id", "step_id": "$response.body#/id"}
FIRST_LISTED = {"saga_id": "$response.body#/items/0/id"}
APPROVAL = {"approval_id": "$response.body#/id"}


def links(status: int, targets: dict[str, dict[str, str]]) -> dict[str, Any]:
    """``openapi_extra`` for an operation whose ``status`` answer feeds ``targets``
    (operation id -> parameters, as runtime expressions)."""
    return {
        "responses": {
            status: {
                "links": {
                    op: {"operationId": op, "parameters": params} for op, params in targets.items()
                }
            }
        }
    }


def _saga_calls(params: dict[str, str]) -> dict[str, dict[str, str]]:
    ops = ["get_saga", "list_saga_events", "add_step", "complete_saga", "rollback_saga"]
    return {_OP.format(op): params for op in ops}


def _step_calls(params: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        **{_OP.format(op): params for op in ("complete_step", "fail_step")},
        **{
            _DECISIONS.format(op): params
            for op in ("approval_rule", "request_approval", "get_decision", "ack_decision")
        },
    }


BEGIN_SAGA = links(201, _saga_calls(SAGA))
LIST_SAGAS = links(200, _saga_calls(FIRST_LISTED))
ADD_STEP = links(201, _step_calls(STEP))
STEP_MOVED = links(200, {_OP.format("get_saga"): SAGA_OF_REQUEST})
REQUEST_APPROVAL = links(200, {_DECISIONS.format("get_approval"): APPROVAL})
