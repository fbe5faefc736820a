"""LangChain adapter: a small agent loop over GenericFakeChatModel (no network)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from undo_core import AsyncSaga, SagaRollbackError, SagaStatus, StepState
from undo_core.adapters.langchain import TOOL_CALL_ID, LangChainSaga


@tool
def book_flight(city: str) -> str:
    """Book a flight."""
    return f"flight-{city}"


@tool
async def book_hotel(city: str) -> str:
    """Book a hotel."""
    return f"hotel-{city}"


@tool
def charge(amount: int) -> str:
    """Charge the card."""
    if amount > 100:
        raise RuntimeError("card declined")
    return "charged"


def scripted(*turns: list[tuple[str, str, dict[str, Any]]]) -> GenericFakeChatModel:
    messages = [
        AIMessage(
            content="",
            tool_calls=[{"id": cid, "name": name, "args": args} for cid, name, args in turn],
        )
        for turn in turns
    ]
    return GenericFakeChatModel(messages=iter([*messages, AIMessage(content="done")]))


def run_agent(model: GenericFakeChatModel, tools: Sequence[BaseTool]) -> str:
    by_name = {t.name: t for t in tools}
    history: list[BaseMessage] = [HumanMessage("trip")]
    while True:
        reply = model.invoke(history)
        assert isinstance(reply, AIMessage)
        history.append(reply)
        if not reply.tool_calls:
            return str(reply.content)
        for call in reply.tool_calls:
            message = by_name[call["name"]].invoke(call)
            assert isinstance(message, ToolMessage) and message.tool_call_id == call["id"]
            history.append(message)


async def arun_agent(model: GenericFakeChatModel, tools: Sequence[BaseTool]) -> str:
    by_name = {t.name: t for t in tools}
    history: list[BaseMessage] = [HumanMessage("trip")]
    while True:
        reply = await model.ainvoke(history)
        assert isinstance(reply, AIMessage)
        history.append(reply)
        if not reply.tool_calls:
            return str(reply.content)
        for call in reply.tool_calls:
            history.append(await by_name[call["name"]].ainvoke(call))


def test_successful_run_records_a_step_per_call() -> None:
    undo = LangChainSaga(name="trip")
    tools = undo.wrap_all([book_flight, charge], undo={"book_flight": lambda out: None})
    model = scripted(
        [("c1", "book_flight", {"city": "Oslo"}), ("c2", "book_flight", {"city": "Rome"})],
        [("c3", "charge", {"amount": 5})],
    )
    assert run_agent(model, tools) == "done"
    steps = undo.saga.steps
    assert [s.tool_name for s in steps] == ["book_flight", "book_flight", "charge"]
    assert all(s.state is StepState.COMPLETED for s in steps)
    assert steps[0].input == {"city": "Oslo"} and steps[0].output == "flight-Oslo"
    assert [s.metadata[TOOL_CALL_ID] for s in steps] == ["c1", "c2", "c3"]
    assert [s.has_undo for s in steps] == [True, True, False]


def test_failing_tool_rolls_back_lifo_and_the_run_raises() -> None:
    undone: list[str] = []
    undo = LangChainSaga()
    tools = [
        undo.wrap(book_flight, undo=lambda out, args: undone.append(args["city"])),
        undo.wrap(charge),
    ]
    model = scripted(
        [("c1", "book_flight", {"city": "Oslo"})],
        [("c2", "book_flight", {"city": "Rome"}), ("c3", "charge", {"amount": 500})],
    )
    with pytest.raises(SagaRollbackError):
        run_agent(model, tools)
    assert undone == ["Rome", "Oslo"]
    steps = undo.saga.steps
    assert [s.state for s in steps] == [
        StepState.ROLLED_BACK,
        StepState.ROLLED_BACK,
        StepState.FAILED,
    ]
    assert steps[2].metadata[TOOL_CALL_ID] == "c3"
    assert undo.saga.status is SagaStatus.ROLLED_BACK


def test_direct_invoke_without_a_tool_call_id() -> None:
    undo = LangChainSaga()
    wrapped = undo.wrap(book_flight)
    assert wrapped.invoke({"city": "Oslo"}) == "flight-Oslo"
    assert wrapped.name == "book_flight" and wrapped.args == book_flight.args
    assert undo.saga.steps[0].metadata == {}


async def test_async_saga_with_ainvoke_rolls_back() -> None:
    undone: list[str] = []

    async def cancel_hotel(out: str) -> None:
        undone.append(out)

    undo = LangChainSaga(async_=True)
    assert isinstance(undo.saga, AsyncSaga)
    tools = [
        undo.wrap(book_hotel, undo=cancel_hotel),
        undo.wrap(book_flight, undo=lambda out: undone.append(out)),
        undo.wrap(charge),
    ]
    model = scripted(
        [("h", "book_hotel", {"city": "Oslo"}), ("f", "book_flight", {"city": "Oslo"})],
        [("x", "charge", {"amount": 500})],
    )
    with pytest.raises(SagaRollbackError):
        await arun_agent(model, tools)
    assert undone == ["flight-Oslo", "hotel-Oslo"]
    assert [s.metadata[TOOL_CALL_ID] for s in undo.saga.steps] == ["h", "f", "x"]
    with pytest.raises(TypeError, match="ainvoke"):
        tools[1].invoke({"city": "x"})


async def test_sync_saga_tools_also_work_with_ainvoke() -> None:
    undo = LangChainSaga()
    tools = undo.wrap_all([book_flight, charge])
    model = scripted([("a", "book_flight", {"city": "Oslo"})], [("b", "charge", {"amount": 1})])
    assert await arun_agent(model, tools) == "done"
    assert [s.metadata[TOOL_CALL_ID] for s in undo.saga.steps] == ["a", "b"]
