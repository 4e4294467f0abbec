"""Framework adapters: a real LangChain create_agent loop, a callback handler, and the custom-loop helper."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import Field

from tortoise_sdk import Memory, StoreError
from tortoise_sdk.adapters.langchain import MemoryCallbackHandler, MemoryMiddleware
from tortoise_sdk.adapters.loop import MemorySession
from tortoise_sdk.models import MEMORY_BLOCK_MARKER

REPO = Path(__file__).resolve().parents[1]


class RecordingChat(GenericFakeChatModel):
    """LangChain's fake chat model, keeping every message list it was called with."""

    received: list[list[Any]] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN202
        self.received.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def fake(*replies: str) -> RecordingChat:
    return RecordingChat(messages=iter([AIMessage(content=r) for r in replies]))


def _break_store(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_fails(*a, **k):
        raise sqlite3.OperationalError("disk I/O error")

    def write_fails(*a, **k):
        raise StoreError("database is read-only")

    monkeypatch.setattr(mem.store, "candidate_turns", read_fails)
    monkeypatch.setattr(mem.store, "capture", write_fails)


# -- LangChain create_agent middleware ------------------------------------------------------------


def test_agent_model_receives_the_block_and_the_turn_is_captured(mem):
    model = fake("Biscuit, your beagle.", "Tomás walks him.")
    middleware = MemoryMiddleware(mem, "chat-1", extract=False)
    agent = create_agent(model, [], system_prompt="You are a helpful assistant.", middleware=[middleware])

    out = agent.invoke({"messages": [HumanMessage("what is my dog called?")]})

    assert out["messages"][-1].content == "Biscuit, your beagle."
    sent = model.received[0]
    assert [type(m) for m in sent] == [SystemMessage, HumanMessage]
    system = sent[0].content
    assert system.startswith("You are a helpful assistant.\n\n" + MEMORY_BLOCK_MARKER)
    assert '"Biscuit hates it. He\'s a two-year-old beagle' in system and "ref:t_" in system
    assert middleware.last_block.pointers and middleware.last_block.degraded_reason is None
    assert [(t.role, t.content) for t in mem.turns("chat-1")] == [
        ("user", "what is my dog called?"), ("assistant", "Biscuit, your beagle.")]
    assert all(MEMORY_BLOCK_MARKER not in t.content for t in mem.turns("chat-1"))

    # the next turn: only new messages are appended, and the block is fresh for the new question
    out = agent.invoke({"messages": [*out["messages"], HumanMessage("who walks Biscuit on Tuesdays?")]})
    assert out["messages"][-1].content == "Tomás walks him."
    second = model.received[1][0].content
    assert '"Good idea, my neighbour Tomás offered to walk him on Tuesdays and Thursdays."' in second
    assert "what is my dog called?" not in second.split(MEMORY_BLOCK_MARKER)[1]  # the window is not echoed
    assert [t.content for t in mem.turns("chat-1")][2:] == ["who walks Biscuit on Tuesdays?", "Tomás walks him."]


def test_agent_without_system_prompt_gets_one_system_message(mem):
    model = fake("ok")
    agent = create_agent(model, [], middleware=[MemoryMiddleware(mem, "chat-2", capture=False)])
    agent.invoke({"messages": [HumanMessage("where does Maya work now?")]})
    sent = model.received[0]
    assert isinstance(sent[0], SystemMessage) and sent[0].content.startswith(MEMORY_BLOCK_MARKER)
    assert sum(isinstance(m, SystemMessage) for m in sent) == 1
    assert mem.turns("chat-2") == []


def test_thread_id_is_the_default_session(mem):
    agent = create_agent(fake("noted"), [], middleware=[MemoryMiddleware(mem, extract=False)])
    agent.invoke({"messages": [HumanMessage("I adopted a kitten named Miso")]},
                 {"configurable": {"thread_id": "thread-9"}})
    assert [t.content for t in mem.turns("thread-9")] == ["I adopted a kitten named Miso", "noted"]


def test_memory_failure_never_reaches_the_agent(mem, monkeypatch):
    _break_store(mem, monkeypatch)
    model = fake("still here", "ok")
    middleware = MemoryMiddleware(mem, "chat-3", extract=False)
    agent = create_agent(model, [], system_prompt="Be brief.", middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("what is my dog called?")]})
    assert out["messages"][-1].content == "still here"
    assert model.received[0][0].content == "Be brief."
    assert middleware.last_block.degraded_reason == "store_error"

    monkeypatch.setattr(mem, "context", lambda *a, **k: 1 / 0)  # even a bug in the SDK
    out = agent.invoke({"messages": [HumanMessage("and his walker?")]})
    assert out["messages"] and middleware.last_block.degraded_reason == "adapter_error: ZeroDivisionError"


async def _ainvoke(agent, messages):  # noqa: ANN001, ANN202
    return await agent.ainvoke({"messages": messages})


def test_async_agent(mem):
    import asyncio

    model = fake("Biscuit.")
    agent = create_agent(model, [], middleware=[MemoryMiddleware(mem, "chat-4", extract=False)])
    out = asyncio.run(_ainvoke(agent, [HumanMessage("what is my dog called?")]))
    assert out["messages"][-1].content == "Biscuit."
    assert MEMORY_BLOCK_MARKER in model.received[0][0].content
    assert len(mem.turns("chat-4")) == 2


# -- callback handler -------------------------------------------------------------------------------


def test_callback_handler_records_turns_from_any_runnable(mem):
    handler = MemoryCallbackHandler(mem, extract=False)
    model = fake("Nice name!", "Miso is a kitten.")
    config = {"callbacks": [handler], "metadata": {"thread_id": "cb-1"}}
    model.invoke([SystemMessage("sys"), HumanMessage("My kitten is called Miso")], config=config)
    model.invoke([HumanMessage("My kitten is called Miso"), AIMessage("Nice name!"), HumanMessage("what is Miso?")],
                 config=config)
    assert [(t.role, t.content) for t in mem.turns("cb-1")] == [
        ("user", "My kitten is called Miso"), ("assistant", "Nice name!"),
        ("user", "what is Miso?"), ("assistant", "Miso is a kitten.")]


def test_callback_handler_keeps_a_repeated_id_less_user_message(mem):
    handler = MemoryCallbackHandler(mem, "cb-2", extract=False)
    model = fake("Shall I book it?", "Booked.")
    model.invoke([HumanMessage("yes")], config={"callbacks": [handler]})
    model.invoke([HumanMessage("yes")], config={"callbacks": [handler]})
    assert [(t.role, t.content) for t in mem.turns("cb-2")] == [
        ("user", "yes"), ("assistant", "Shall I book it?"), ("user", "yes"), ("assistant", "Booked.")]


def test_callback_handler_swallows_store_failures(mem, monkeypatch):
    _break_store(mem, monkeypatch)
    model = fake("fine")
    assert model.invoke([HumanMessage("hello there")], config={"callbacks": [MemoryCallbackHandler(mem)]}).content == "fine"


# -- custom loops -----------------------------------------------------------------------------------


def test_memory_session_round_trip(mem):
    session = MemorySession(mem, "loop-1", extract=False)
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "what is my dog called?"}]
    sent = session.before_turn(messages)
    assert len(messages) == 2  # the caller's list is not modified
    assert [m["role"] for m in sent] == ["system", "system", "user"]
    assert sent[1]["content"].startswith(MEMORY_BLOCK_MARKER) and sent[0] == messages[0] and sent[2] == messages[1]
    receipt = session.after_turn(messages[-1], {"role": "assistant", "content": "Biscuit."})
    assert receipt is not None and receipt.turns_stored == 2
    assert session.after_turn("and now?", "Still Biscuit.").turns_stored == 2
    assert [t.content for t in mem.turns("loop-1")] == ["what is my dog called?", "Biscuit.", "and now?",
                                                          "Still Biscuit."]
    assert session.after_turn({"role": "system", "content": sent[1]["content"]}, "") is None  # block echoes skipped


def test_memory_session_fails_open(mem, monkeypatch):
    _break_store(mem, monkeypatch)
    session = MemorySession(mem, "loop-2")
    messages = [{"role": "user", "content": "what is my dog called?"}]
    assert session.before_turn(messages) == messages
    assert session.last_block.degraded_reason == "store_error"
    assert session.after_turn("hi", "hello") is None


@pytest.mark.parametrize(("messages", "returned", "error"), [
    (None, [], "TypeError"), ([None], [None], "TypeError"),
    ([("role", "user")], [("role", "user")], "ValueError"), (5, 5, "TypeError")])
def test_memory_session_before_turn_survives_malformed_messages(mem, caplog, messages, returned, error):
    session = MemorySession(mem, "loop-3")
    with caplog.at_level("WARNING", logger="tortoise_sdk.adapters.loop"):
        assert session.before_turn(messages) == returned
    assert session.last_block.degraded_reason == f"adapter_error: {error}"
    assert "tortoise: memory block skipped" in caplog.text


def test_custom_loop_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "examples" / "custom_loop.py"), "--db", str(tmp_path / "e.db")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert MEMORY_BLOCK_MARKER in out.stdout and "Biscuit" in out.stdout
