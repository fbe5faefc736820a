"""PydanticAI adapter: agent runs driven by FunctionModel (no network)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from undo_core import SagaRollbackError, SagaStatus, StepState
from undo_core.adapters.pydantic_ai import TOOL_CALL_ID, SagaToolset


def scripted(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes one tool call per turn, in order, then answers."""
    queue = list(enumerate(calls))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if queue:
            i, (name, args) = queue.pop(0)
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{i}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def build(world: dict[str, Any], undone: list[str]) -> SagaToolset:
    tools = SagaToolset()

    @tools.tool_plain(undo=lambda out, args: undone.append(f"flight:{args['city']}"))
    def book_flight(city: str) -> str:
        world.setdefault("flights", []).append(city)
        return f"flight-{city}"

    async def cancel_hotel(out: str, args: dict[str, Any]) -> None:
        undone.append(f"hotel:{out}")

    @tools.tool(undo=cancel_hotel)
    async def book_hotel(ctx: RunContext[None], city: str) -> str:
        return f"hotel-{city}"

    @tools.tool_plain
    def charge(amount: int) -> str:
        if amount > 100:
            raise RuntimeError("card declined")
        return "charged"

    return tools


async def test_successful_run_records_a_step_per_call() -> None:
    world: dict[str, Any] = {}
    tools = build(world, [])
    model = scripted(
        ("book_flight", {"city": "Oslo"}),
        ("book_hotel", {"city": "Oslo"}),
        ("charge", {"amount": 50}),
    )
    result = await Agent(model, toolsets=[tools]).run("trip")
    assert result.output == "done"
    steps = tools.saga.steps
    assert [s.tool_name for s in steps] == ["book_flight", "book_hotel", "charge"]
    assert [s.state for s in steps] == [StepState.COMPLETED] * 3
    assert steps[0].input == {"city": "Oslo"} and steps[0].output == "flight-Oslo"
    assert [s.metadata[TOOL_CALL_ID] for s in steps] == ["call-0", "call-1", "call-2"]
    assert [s.has_undo for s in steps] == [True, True, False]
    assert tools.saga.status is SagaStatus.IN_PROGRESS


async def test_failing_tool_rolls_back_lifo_and_the_run_raises() -> None:
    undone: list[str] = []
    tools = build({}, undone)
    model = scripted(
        ("book_flight", {"city": "Oslo"}),
        ("book_hotel", {"city": "Rome"}),
        ("charge", {"amount": 500}),
    )
    with pytest.raises(SagaRollbackError) as caught:
        await Agent(model, toolsets=[tools]).run("trip")
    assert "card declined" in str(caught.value.__cause__ or caught.value)
    assert undone == ["hotel:hotel-Rome", "flight:Oslo"]
    steps = tools.saga.steps
    assert [s.state for s in steps] == [
        StepState.ROLLED_BACK,
        StepState.ROLLED_BACK,
        StepState.FAILED,
    ]
    assert steps[2].metadata[TOOL_CALL_ID] == "call-2"
    assert tools.saga.status is SagaStatus.ROLLED_BACK


async def test_wraps_an_existing_toolset_with_an_undo_map() -> None:
    undone: list[Any] = []
    plain: FunctionToolset[None] = FunctionToolset()

    def create(name: str) -> str:
        return f"id-{name}"

    def explode() -> str:
        raise ValueError("boom")

    for fn in (create, explode):  # add_function works on pydantic-ai 1.x and 2.x
        plain.add_function(fn, takes_ctx=False)
    tools = SagaToolset(plain, undo={"create": lambda out: undone.append(out)})
    model = scripted(("create", {"name": "a"}), ("create", {"name": "b"}), ("explode", {}))
    with pytest.raises(SagaRollbackError):
        await Agent(model, toolsets=[tools]).run("go")
    assert undone == ["id-b", "id-a"]


async def test_parallel_tool_calls_become_ordered_steps() -> None:
    tools = build({}, [])
    turns = [
        ModelResponse(
            parts=[
                ToolCallPart("book_flight", {"city": "A"}, tool_call_id="p-1"),
                ToolCallPart("book_hotel", {"city": "A"}, tool_call_id="p-2"),
            ]
        ),
        ModelResponse(parts=[TextPart("ok")]),
    ]
    model = FunctionModel(lambda messages, info: turns.pop(0))
    await Agent(model, toolsets=[tools]).run("go")
    assert sorted(s.metadata[TOOL_CALL_ID] for s in tools.saga.steps) == ["p-1", "p-2"]
    assert [s.position for s in tools.saga.steps] == [0, 1]
