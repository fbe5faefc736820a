"""OpenAI Agents SDK adapter: runs driven by a scripted fake Model (no network)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import UserError
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from undo_core import SagaRollbackError, SagaStatus, StepState
from undo_core.adapters.openai_agents import TOOL_CALL_ID, AgentsSaga

set_tracing_disabled(True)  # no trace export: the tests never touch the network
NO_TRACING = RunConfig(tracing_disabled=True)


class ScriptedModel(Model):
    """Each turn returns the next scripted batch of tool calls, then a final message."""

    def __init__(self, *turns: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.turns = list(turns)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.turns:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    id=f"fc-{call_id}",
                    call_id=call_id,
                    name=name,
                    arguments=json.dumps(arguments),
                    type="function_call",
                    status="completed",
                )
                for call_id, name, arguments in self.turns.pop(0)
            ]
        else:
            output = [
                ResponseOutputMessage(
                    id="msg-1",
                    role="assistant",
                    status="completed",
                    type="message",
                    content=[ResponseOutputText(text="done", type="output_text", annotations=[])],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def build(undone: list[str]) -> tuple[AgentsSaga, list[FunctionTool]]:
    undo = AgentsSaga(name="trip")

    @undo.function_tool(undo=lambda out, args: undone.append(f"flight:{args['city']}"))
    def book_flight(city: str) -> str:
        return f"flight-{city}"

    async def cancel_hotel(out: str, args: dict[str, Any], ctx: Any) -> None:
        undone.append(f"hotel:{out}")

    @undo.function_tool(undo=cancel_hotel)
    async def book_hotel(city: str) -> str:
        return f"hotel-{city}"

    @undo.function_tool
    def charge(amount: int) -> str:
        if amount > 100:
            raise RuntimeError("card declined")
        return "charged"

    return undo, [book_flight, book_hotel, charge]


async def test_successful_run_records_a_step_per_call() -> None:
    undo, tools = build([])
    model = ScriptedModel(
        [("c1", "book_flight", {"city": "Oslo"})],
        [("c2", "book_hotel", {"city": "Oslo"}), ("c3", "charge", {"amount": 5})],
    )
    agent = Agent(name="travel", tools=list(tools), model=model)
    result = await Runner.run(agent, "trip", run_config=NO_TRACING)
    assert result.final_output == "done"
    steps = undo.saga.steps
    assert [s.tool_name for s in steps] == ["book_flight", "book_hotel", "charge"]
    assert all(s.state is StepState.COMPLETED for s in steps)
    assert steps[0].input == {"city": "Oslo"} and steps[0].output == "flight-Oslo"
    assert [s.metadata[TOOL_CALL_ID] for s in steps] == ["c1", "c2", "c3"]
    assert undo.saga.name == "trip"


async def test_failing_tool_rolls_back_lifo_and_the_run_raises() -> None:
    undone: list[str] = []
    undo, tools = build(undone)
    model = ScriptedModel(
        [("c1", "book_flight", {"city": "Oslo"})],
        [("c2", "book_hotel", {"city": "Rome"})],
        [("c3", "charge", {"amount": 500})],
    )
    agent = Agent(name="travel", tools=list(tools), model=model)
    with pytest.raises(UserError) as caught:  # the SDK wraps a tool's exception
        await Runner.run(agent, "trip", run_config=NO_TRACING)
    assert isinstance(caught.value.__cause__, SagaRollbackError)
    assert undone == ["hotel:hotel-Rome", "flight:Oslo"]
    steps = undo.saga.steps
    assert [s.state for s in steps] == [
        StepState.ROLLED_BACK,
        StepState.ROLLED_BACK,
        StepState.FAILED,
    ]
    assert steps[2].metadata[TOOL_CALL_ID] == "c3"
    assert "card declined" in (steps[2].error or "")
    assert undo.saga.status is SagaStatus.ROLLED_BACK


async def test_wrap_an_existing_function_tool() -> None:
    undone: list[Any] = []

    @function_tool(failure_error_function=None)
    def create(name: str) -> str:
        return f"id-{name}"

    @function_tool(failure_error_function=None)
    def explode() -> str:
        raise ValueError("boom")

    undo = AgentsSaga()
    tools = [undo.wrap(create, undo=lambda out: undone.append(out)), undo.wrap(explode)]
    model = ScriptedModel(
        [("a", "create", {"name": "a"}), ("b", "create", {"name": "b"})],
        [("x", "explode", {})],
    )
    with pytest.raises(UserError, match="rolled back"):
        await Runner.run(Agent(name="t", tools=tools, model=model), "go", run_config=NO_TRACING)
    assert undone == ["id-b", "id-a"]
    assert sorted(s.metadata[TOOL_CALL_ID] for s in undo.saga.steps) == ["a", "b", "x"]
