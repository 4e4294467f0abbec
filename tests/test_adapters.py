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

    monkeypatch.setattr(mem.store, "candidate_turns_each", read_fails)
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


def test_a_message_edited_after_it_was_stored_does_not_stop_the_threads_later_capture(mem, caplog):
    # Reviewer: LangGraph's update_state edited m1; every later turn of the thread was dropped for good.
    middleware = MemoryMiddleware(mem, "edited", extract=False)
    middleware.after_agent({"messages": [HumanMessage("My phone is 555-1234", id="m1"), AIMessage("ok", id="m2")]},
                           None)
    middleware.after_agent({"messages": [HumanMessage("My phone is [REDACTED]", id="m1"), AIMessage("ok", id="m2"),
                                         HumanMessage("I moved to Tromsø last week", id="m3"),
                                         AIMessage("Nice!", id="m4")]}, None)
    stored = [(t.external_id, t.content) for t in mem.store.turns(mem.namespace, "edited")]
    assert stored == [("m1", "My phone is 555-1234"), ("m2", "ok"), ("m3", "I moved to Tromsø last week"),
                      ("m4", "Nice!")]
    assert any("message 'm1' of edited was changed after it was stored" in r.getMessage() for r in caplog.records)
    # A reviewer's: the checkpointed thread holds the edit, so every later run logged it again, forever.
    caplog.clear()
    middleware.after_agent({"messages": [HumanMessage("My phone is [REDACTED]", id="m1"), AIMessage("ok", id="m2"),
                                         HumanMessage("thanks", id="m5")]}, None)
    assert [t.content for t in mem.turns("edited")][-1] == "thanks"
    assert not any("changed after it was stored" in r.getMessage() for r in caplog.records)


def test_a_long_tool_loop_sees_the_block_of_its_user_message(mem):
    # Reviewer: past window_turns messages after the user message, the block was rebuilt from tool chatter.
    from langchain_core.messages import ToolMessage

    mem.capture("old", [{"role": "user", "content": "Ottilie keeps alpacas in Reykjavik"}])
    middleware = MemoryMiddleware(mem, "loop", extract=False)
    messages: list[Any] = [HumanMessage("where does Ottilie keep her alpacas?", id="u1")]
    blocks = []
    for i in range(6):
        blocks.append(middleware._block(messages).block)
        messages += [AIMessage("", id=f"a{i}", tool_calls=[{"name": "lookup", "args": {"q": f"x{i}"}, "id": f"c{i}"}]),
                     ToolMessage(f"result for query {i}", tool_call_id=f"c{i}", id=f"t{i}")]
    assert "Reykjavik" in blocks[0] and blocks == [blocks[0]] * 6


def test_an_image_the_user_sent_is_kept_as_its_kind(mem):
    # Reviewer: an image-only user message was dropped; the session held the reply alone.
    middleware = MemoryMiddleware(mem, "img", extract=False)
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    middleware.after_agent({"messages": [HumanMessage(content=[picture], id="u1"),
                                         HumanMessage(content=[{"type": "text", "text": "and this one"}, picture], id="u2"),
                                         AIMessage("Nice picture of an alpaca.", id="a1")]}, None)
    assert [(t.role, t.content) for t in mem.store.turns(mem.namespace, "img")] == [
        ("user", "[image]"), ("user", "and this one\n[image]"), ("assistant", "Nice picture of an alpaca.")]


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


def test_without_a_checkpointer_the_history_sent_again_is_not_stored_again(mem):
    """A reviewer's: LangGraph gives each id-less message a new id every run, so each run stored the whole history
    again ("Hi, I'm Maya" twice after two runs, and more with each)."""
    _chat_without_checkpointer(mem, ("Hi Maya.", "Beagle.", "Yes."),
                               ("Hi, I'm Maya", "My dog is a beagle", "Hi, I'm Maya"))
    assert [(t.role, t.content) for t in mem.turns("chat")] == [
        ("user", "Hi, I'm Maya"), ("assistant", "Hi Maya."), ("user", "My dog is a beagle"), ("assistant", "Beagle."),
        ("user", "Hi, I'm Maya"), ("assistant", "Yes.")]  # said twice, kept twice


def _chat_without_checkpointer(mem: Memory, replies: tuple[str, ...], said: tuple[str, ...]) -> None:
    """An agent with no checkpointer on thread "chat": each run sends the whole history again, as LangGraph does."""
    agent = create_agent(fake(*replies), [], middleware=[MemoryMiddleware(mem, extract=False)])
    config = {"configurable": {"thread_id": "chat"}}
    history: list[dict[str, str]] = []
    for text in said:
        history.append({"role": "user", "content": text})
        reply = agent.invoke({"messages": history}, config)["messages"][-1].content
        history.append({"role": "assistant", "content": reply})


def _count_turn_reads(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows each ``store.turns`` read returns from now on, in order."""
    read: list[int] = []
    turns = mem.store.turns

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = turns(*args, **kwargs)
        read.append(len(out))
        return out

    monkeypatch.setattr(mem.store, "turns", counted)
    return read


def test_without_a_checkpointer_a_long_session_s_run_reads_the_tail_it_sends(mem, monkeypatch):
    """A user's agent without a checkpointer, 20,000 turns into a thread: each run read every stored turn of the
    session twice (before and after the agent) to find which of its messages were stored, 150 ms a run and growing.
    The messages it sends are laid over the session's latest turns, as many said turns as it sends."""
    said = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about rivers"} for i in range(3000)]
    mem.append("chat", said, extract=False)
    agent = create_agent(fake("To the sea."), [], middleware=[MemoryMiddleware(mem, extract=False)])
    read = _count_turn_reads(mem, monkeypatch)
    history = [*said[-4:], {"role": "user", "content": "Where do rivers go?"}]
    agent.invoke({"messages": history}, {"configurable": {"thread_id": "chat"}})
    assert sum(read) <= 400, read
    assert [t.content for t in mem.turns("chat", last=4)] == [
        "turn 2998 about rivers", "turn 2999 about rivers", "Where do rivers go?", "To the sea."]
    assert len(mem.turns("chat")) == 3002  # what it sent again was not stored again
    # A run whose tail is tool results: read further back until it holds the said turns the host sends.
    asked = [{"role": "user", "content": "Check every gauge."}, {"role": "assistant", "content": "[tool_use gauge {}]"},
             *({"role": "tool", "content": f"gauge {i}: high"} for i in range(100)),
             {"role": "assistant", "content": "All high."}]
    mem.append("tools", asked, extract=False)
    agent = create_agent(fake("Yes."), [], middleware=[MemoryMiddleware(mem, extract=False)])
    agent.invoke({"messages": [asked[0], asked[-1], {"role": "user", "content": "Flooding?"}]},
                 {"configurable": {"thread_id": "tools"}})
    assert [t.content for t in mem.turns("tools")][-4:] == ["gauge 99: high", "All high.", "Flooding?", "Yes."]
    assert len(mem.turns("tools")) == 105


@pytest.mark.parametrize("window", [3, 2])
def test_without_a_checkpointer_a_trimmed_history_keeps_a_repeated_message(mem, window):
    """The verification pass: a host that sends its last few messages lost the second "yes"."""
    agent = create_agent(fake("Shall I book it?", "Done.", "Shall I?", "Done."), [],
                         middleware=[MemoryMiddleware(mem, extract=False)])
    history: list[dict[str, str]] = []
    for said in ("Book the flight to Lisbon?", "yes", "And the hotel too?", "yes"):
        history.append({"role": "user", "content": said})
        reply = agent.invoke({"messages": history[-window:]}, {"configurable": {"thread_id": "chat"}})
        history.append({"role": "assistant", "content": reply["messages"][-1].content})
    assert [t.content for t in mem.turns("chat")] == [h["content"] for h in history]


@pytest.mark.parametrize("said", ["Let me check.", ""], ids=["text and a tool call", "a tool call only"])
def test_without_a_checkpointer_a_history_sent_again_without_its_tool_calls_is_not_stored_again(mem, said):
    """A reviewer's: a chat UI keeps only the user's and the assistant's text; sent again without the tool call and its
    result (the assistant's text without its tool_calls), the history matched no stored turns and was stored again."""
    from langchain_core.tools import tool

    @tool
    def weather(city: str) -> str:
        """Weather for a city."""
        return f"Sunny in {city}"

    calls = AIMessage(said, tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "call_1"}])
    model = ToolCallingChat(messages=iter([calls, AIMessage("It is sunny in Oslo."), AIMessage("Bye.")]))
    agent = create_agent(model, [weather], middleware=[MemoryMiddleware(mem, extract=False)])
    config = {"configurable": {"thread_id": "ui"}}
    agent.invoke({"messages": [{"role": "user", "content": "Weather in Oslo?"}]}, config)
    kept = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": said},
            {"role": "assistant", "content": "It is sunny in Oslo."}, {"role": "user", "content": "thanks"}]
    agent.invoke({"messages": [m for m in kept if m["content"]]}, config)
    assert [(t.role, t.content) for t in mem.turns("ui")] == [
        ("user", "Weather in Oslo?"), ("assistant", f"{said}\n[tool_use weather city=Oslo]".strip()),
        ("tool", "Sunny in Oslo"), ("assistant", "It is sunny in Oslo."), ("user", "thanks"), ("assistant", "Bye.")]


def test_a_thread_longer_than_one_capture_allows_goes_on_being_captured(tmp_path):
    """A reviewer's: once a checkpointed thread held max_turns_per_capture messages, nothing more was captured."""
    from langgraph.checkpoint.memory import InMemorySaver

    with Memory(str(tmp_path / "m.db"), namespace="n", max_turns_per_capture=6) as m:
        agent = create_agent(fake(*(f"reply {i}" for i in range(5))), [],
                             middleware=[MemoryMiddleware(m, extract=False)], checkpointer=InMemorySaver())
        for i in range(5):
            agent.invoke({"messages": [HumanMessage(f"message {i}")]}, {"configurable": {"thread_id": "long"}})
        assert len(m.turns("long")) == 10


class FlakyChat(RecordingChat):
    """A chat model whose first ``failures`` calls raise, as a provider that is down."""

    failures: int = 1

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN202
        if self.failures:
            self.failures -= 1
            raise RuntimeError("provider down")
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no checkpointer", "checkpointer"])
def test_a_run_whose_model_raises_keeps_the_user_message(mem, checkpointed):
    """Durable before any model call: the messages were captured only after the agent turn, so a run whose model
    raised stored nothing of what the user said (without a checkpointer, nothing ever would)."""
    from langgraph.checkpoint.memory import InMemorySaver

    model = FlakyChat(messages=iter([AIMessage("Noted, both.")]))
    agent = create_agent(model, [], middleware=[MemoryMiddleware(mem, extract=False)],
                         checkpointer=InMemorySaver() if checkpointed else None)
    config = {"configurable": {"thread_id": "down"}}
    with pytest.raises(RuntimeError, match="provider down"):
        agent.invoke({"messages": [HumanMessage("My passport number is X123")]}, config)
    assert [(t.role, t.content) for t in mem.turns("down")] == [("user", "My passport number is X123")]

    # The next run: a host without a checkpointer sends what it holds again, with the new message.
    sent = [HumanMessage("And it expires in May")]
    if not checkpointed:
        sent.insert(0, HumanMessage("My passport number is X123"))
    agent.invoke({"messages": sent}, config)
    assert [(t.role, t.content) for t in mem.turns("down")] == [
        ("user", "My passport number is X123"), ("user", "And it expires in May"), ("assistant", "Noted, both.")]


# -- callback handler ----# -- callback handler -------------------------------------------------------------------------------


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


def test_callback_handler_records_a_user_message_once_across_a_tool_loop(mem):
    """A reviewer's: each model call of a hand-written tool loop recorded the user's message again."""
    from langchain_core.messages import ToolMessage

    handler = MemoryCallbackHandler(mem, "loop", extract=False)
    calls = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}])
    model = GenericFakeChatModel(messages=iter([calls, AIMessage("It is 3.")]))
    first = model.invoke([HumanMessage("What is 1+2?")], config={"callbacks": [handler]})
    model.invoke([HumanMessage("What is 1+2?"), first, ToolMessage("3", tool_call_id="c1")],
                 config={"callbacks": [handler]})
    assert [(t.role, t.content) for t in mem.turns("loop")] == [
        ("user", "What is 1+2?"), ("assistant", "[tool_use add a=1 b=2]"), ("assistant", "It is 3.")]


def test_callback_handler_records_a_streamed_reply(mem):
    """A reviewer's: a streamed reply ends as an AIMessageChunk, whose type no role was found for: dropped."""
    handler = MemoryCallbackHandler(mem, "S", extract=False)
    for _ in GenericFakeChatModel(messages=iter([AIMessage("streamed reply")])).stream(
            [HumanMessage("stream me")], config={"callbacks": [handler]}):
        pass
    assert [(t.role, t.content) for t in mem.turns("S")] == [("user", "stream me"), ("assistant", "streamed reply")]


def test_a_model_s_reasoning_is_not_kept_as_an_attachment_and_a_pasted_block_leaves_the_question():
    from tortoise_sdk.adapters.langchain import _turn

    thought = AIMessage(content=[{"type": "thinking", "thinking": "hmm"}, {"type": "reasoning", "reasoning": "so"},
                                 {"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": "x"}}])
    assert _turn(thought)["content"] == "Hi\n[image]"
    pasted = HumanMessage(f"{MEMORY_BLOCK_MARKER} Retrieved ...\n1. (memory) \"x\"\n[/tortoise memory]\n\n"
                          "what breed is my dog?")
    assert _turn(pasted)["content"] == "what breed is my dog?"
    assert _turn(HumanMessage(f"{MEMORY_BLOCK_MARKER} only a block [/tortoise memory]")) is None
    # a host that upper-cases (or indents) what it forwards still pastes a block (a reviewer's)
    shouted = HumanMessage("  [TORTOISE MEMORY] 1. (memory) \"x\"\n[/TORTOISE MEMORY]\n\nWHAT BREED IS MY DOG?")
    assert _turn(shouted)["content"] == "WHAT BREED IS MY DOG?"


def test_a_loop_s_pasted_block_in_any_case_is_not_captured_nor_asked():
    from tortoise_sdk.adapters.loop import _turn as loop_turn
    from tortoise_sdk.reflex.query import window_messages

    pasted = "[Tortoise Memory] 1. (memory) \"Biscuit\"\n[/Tortoise Memory]\n\nwhat breed is my dog?"
    assert loop_turn({"role": "user", "content": pasted}, "user")["content"] == "what breed is my dog?"
    assert window_messages([{"role": "system", "content": "[TORTOISE MEMORY] 1. (memory) x"}]) == []


def test_callback_handler_keeps_the_user_message_of_a_call_that_raises(mem):
    """Durable before any model call: the user's message was written with the reply, so a failed call lost it."""
    handler = MemoryCallbackHandler(mem, "cb-down", extract=False)
    model = FlakyChat(messages=iter([AIMessage("Got it.")]))
    with pytest.raises(RuntimeError, match="provider down"):
        model.invoke([HumanMessage("My locker code is 4471")], config={"callbacks": [handler]})
    assert [(t.role, t.content) for t in mem.turns("cb-down")] == [("user", "My locker code is 4471")]
    model.invoke([HumanMessage("My locker code is 4471"), HumanMessage("thanks")], config={"callbacks": [handler]})
    assert [(t.role, t.content) for t in mem.turns("cb-down")] == [
        ("user", "My locker code is 4471"), ("user", "thanks"), ("assistant", "Got it.")]


def test_callback_handler_stores_the_user_message_once_across_retries_and_fallbacks(mem):
    """A reviewer's: each attempt of .with_retry() or .with_fallbacks() is a new run, and stored the id-less user
    message again; a message said again once answered is still a new turn."""
    handler = MemoryCallbackHandler(mem, "cb-retry", extract=False)
    flaky = FlakyChat(messages=iter([AIMessage("Rome."), AIMessage("Rome, yes.")]))
    config = {"callbacks": [handler]}
    retrying = flaky.with_retry(stop_after_attempt=2, wait_exponential_jitter=False)
    assert retrying.invoke([SystemMessage("Be brief."), HumanMessage("Capital of Italy?")], config).content == "Rome."
    backup = fake("Paris.")
    falling_back = FlakyChat(messages=iter([])).with_fallbacks([backup])
    assert falling_back.invoke([HumanMessage("Capital of France?")], config).content == "Paris."
    flaky.invoke([HumanMessage("Capital of Italy?")], config)  # asked again after its answer
    assert [(t.role, t.content) for t in mem.turns("cb-retry")] == [
        ("user", "Capital of Italy?"), ("assistant", "Rome."), ("user", "Capital of France?"), ("assistant", "Paris."),
        ("user", "Capital of Italy?"), ("assistant", "Rome, yes.")]


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


def test_memory_session_keeps_the_user_message_of_a_failed_call_with_an_empty_reply(mem):
    """What docs/hosts/langchain-and-loops.md tells a loop to do in its ``except``."""
    session = MemorySession(mem, "loop-down", extract=False)
    session.before_turn([{"role": "user", "content": "My locker code is 4471"}])
    assert session.after_turn("My locker code is 4471", "").turns_stored == 1
    assert [(t.role, t.content) for t in mem.turns("loop-down")] == [("user", "My locker code is 4471")]


def test_memory_session_stores_the_user_message_of_a_retried_call_once(mem):
    """A reviewer's: after the failed call's after_turn(user_text, ""), the retry's after_turn stored the message
    again; a message said again once answered is still a new turn."""
    session = MemorySession(mem, "loop-retry", extract=False)
    for attempt in ("", "", "Noted."):  # two failed calls, then the retry that is answered
        session.before_turn([{"role": "user", "content": "My locker code is 4471"}])
        session.after_turn("My locker code is 4471", attempt)
    session.after_turn("My locker code is 4471", "Still 4471.")
    assert [(t.role, t.content) for t in mem.turns("loop-retry")] == [
        ("user", "My locker code is 4471"), ("assistant", "Noted."), ("user", "My locker code is 4471"),
        ("assistant", "Still 4471.")]


def test_a_nul_in_a_message_does_not_lose_the_exchange(mem, caplog):
    """A user's paste or a tool's output holding a NUL (a binary file read as text): capture refuses NUL, so the
    adapters logged "capture skipped" and the whole exchange was lost, the user's words and the reply too. The
    host cannot fix a provider's or a tool's text: each adapter stores it with U+FFFD, as transcript ingestion does."""
    session = MemorySession(mem, "loop-nul", extract=False)
    session.before_turn([{"role": "user", "content": "paste: PK\x03\x04\x00 and my cat is Pixel"}])
    assert session.after_turn("paste: PK\x03\x04\x00 and my cat is Pixel", "A zip\x00 header.").turns_stored == 2
    assert [t.content for t in mem.turns("loop-nul")] == ["paste: PK\x03\x04\ufffd and my cat is Pixel",
                                                           "A zip\ufffd header."]
    assert "stored with U+FFFD" in caplog.text

    # A checkpointed thread sends its history again each run: the same message is the same turn, stored once.
    from langgraph.checkpoint.memory import InMemorySaver

    agent = create_agent(fake("It is binary\x00.", "Yes."), [], checkpointer=InMemorySaver(),
                         middleware=[MemoryMiddleware(mem, "chat-nul", extract=False)])
    for text in ("what is \x00 in a file?", "really?"):
        agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": "t"}})
    assert [t.content for t in mem.turns("chat-nul")] == ["what is \ufffd in a file?", "It is binary\ufffd.",
                                                           "really?", "Yes."]

    handler = MemoryCallbackHandler(mem, "cb-nul", extract=False)
    fake("Binary\x00.").invoke([HumanMessage("and \x00?")], config={"callbacks": [handler]})
    assert [t.content for t in mem.turns("cb-nul")] == ["and \ufffd?", "Binary\ufffd."]


def test_memory_session_takes_a_client_message_object_and_never_raises_on_a_non_message(mem, caplog):
    """Reviewer: a reply passed as the OpenAI client's message object (not a dict) dropped the whole exchange, the
    user's text too; after_turn(None, "x") raised AttributeError into the host's loop."""
    from openai.types.chat import ChatCompletionMessage

    session = MemorySession(mem, "loop-obj", extract=False)
    reply = ChatCompletionMessage(role="assistant", content="Biscuit, your beagle.")
    assert session.after_turn("what is my dog called?", reply).turns_stored == 2

    class Reply:  # an object with the fields, not a pydantic model
        role, content = "assistant", "Still Biscuit."

    assert session.after_turn("and now?", Reply()).turns_stored == 2
    assert [t.content for t in mem.turns("loop-obj")] == ["what is my dog called?", "Biscuit, your beagle.",
                                                            "and now?", "Still Biscuit."]
    declined = ChatCompletionMessage(role="assistant", content=None, refusal="I can't help with that.")
    assert session.after_turn("one more?", declined).turns_stored == 2  # a refusal is the reply's text
    assert mem.turns("loop-obj")[-1].content == "I can't help with that."
    with caplog.at_level("WARNING", logger="tortoise_sdk"):
        assert session.after_turn(None, "Noted.").turns_stored == 1  # the reply is kept, the non-message named
        assert session.after_turn(5, 6) is None
    assert "the user message is not captured: None (a NoneType) is not a message" in caplog.text
    assert "5 (a int) is not a message" in caplog.text


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


@pytest.mark.parametrize("adapter", [lambda m: MemorySession(m, "s"), lambda m: MemoryMiddleware(m, "s"),
                                     lambda m: MemoryCallbackHandler(m)], ids=["loop", "middleware", "callbacks"])
def test_an_adapter_given_something_else_than_a_memory_says_so_at_once(mem, tmp_path, adapter):
    """Failing open at every turn instead, the host would never learn that nothing is stored or recalled."""
    from tortoise_sdk import AdapterError, AsyncMemory

    with pytest.raises(AdapterError, match=r"got str: pass Memory\('/"):
        adapter(str(tmp_path / "memory.db"))
    with pytest.raises(AdapterError, match=r"\.sync"):
        adapter(AsyncMemory(mem))
    assert not (tmp_path / "memory.db").exists()


def test_custom_loop_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "examples" / "custom_loop.py"), "--db", str(tmp_path / "e.db")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert MEMORY_BLOCK_MARKER in out.stdout and "Biscuit" in out.stdout


# -- what a session's blocks already showed ------------------------------------------------------


def test_a_follow_up_does_not_repeat_the_last_turns_pointers_but_remind_me_does(mem, tmp_path):
    howl = "Biscuit hates it. He's a two-year-old beagle and he howls when I leave at 7."
    howl_id = next(t.turn_id for t in mem.turns("demo-1") if t.content == howl)
    follow_up = {"role": "user", "content": "Biscuit the beagle howls at 7 as I leave"}

    def ids(block_messages: list[dict]) -> list[str]:
        return [p.id for p in session.last_block.pointers]

    session = MemorySession(mem, "chat-r", extract=False)
    messages = [{"role": "user", "content": "what is my dog called?"}]
    session.before_turn(messages)
    assert howl_id in ids(messages)
    session.after_turn(messages[-1]["content"], "Biscuit, your beagle.")
    messages += [{"role": "assistant", "content": "Biscuit, your beagle."}, follow_up]
    # Without the session's memory of what it showed, the follow-up brings the same turn back ...
    fresh = MemorySession(mem, "chat-other", extract=False, shown_turns=0)
    fresh.before_turn(messages)
    assert howl_id in [p.id for p in fresh.last_block.pointers]
    # ... with it, not: it was shown one host turn ago.
    session.before_turn(messages)
    assert howl_id not in ids(messages)
    # Asked again, it comes back.
    messages += [{"role": "assistant", "content": "Poor Biscuit."},
                 {"role": "user", "content": "remind me how old Biscuit the beagle is"}]
    session.before_turn(messages)
    assert howl_id in ids(messages)
    # A new process continues the session: the state is in the store.
    with Memory(str(tmp_path / "m.db"), namespace="maya") as again:
        later = MemorySession(again, "chat-r", extract=False)
        later.before_turn([follow_up])
        assert howl_id not in [p.id for p in later.last_block.pointers]
        # Three host turns without it, and the follow-up may show it again.
        for text in ("I started a new job", "I bike to the BART station"):
            later.before_turn([{"role": "user", "content": text}])
        later.before_turn([follow_up])
        assert howl_id in [p.id for p in later.last_block.pointers]
        assert len(again.cursor("reflex:shown:chat-r").value["turns"]) == 3


def test_the_middleware_keeps_what_it_showed_per_user_message(mem):
    model = fake("Biscuit, your beagle.", "Poor Biscuit.", "He is two.")
    middleware = MemoryMiddleware(mem, "chat-m", extract=False)
    agent = create_agent(model, [], middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("what is my dog called?")]})
    assert "he howls when I leave at 7" in model.received[0][0].content
    out = agent.invoke({"messages": [*out["messages"], HumanMessage("Biscuit the beagle howls at 7 as I leave")]})
    assert "he howls when I leave at 7" not in str(model.received[1][0].content)
    agent.invoke({"messages": [*out["messages"], HumanMessage("remind me how old Biscuit the beagle is")]})
    assert "he howls when I leave at 7" in model.received[2][0].content
    # One entry per user message; the follow-up's block had nothing new to show.
    assert [bool(ids) for ids in mem.cursor("reflex:shown:chat-m").value["turns"]] == [True, False, True]


# -- sub-agents from the same stream --------------------------------------------------------------


class ToolCallingChat(RecordingChat):
    """A fake chat model that accepts tools (its scripted replies may call them)."""

    def bind_tools(self, tools, **kwargs):  # noqa: ANN001, ANN003, ANN201
        return self


def _usage(total: int) -> dict[str, int]:
    return {"input_tokens": total - 5, "output_tokens": 5, "total_tokens": total}


def test_an_agent_used_as_a_tool_is_recorded_without_naming_it(mem):
    from langchain_core.tools import tool

    inner_model = ToolCallingChat(messages=iter([
        AIMessage(content="Biscuit is a two-year-old beagle.", usage_metadata=_usage(40))]))
    researcher = create_agent(inner_model, [], system_prompt="You research Maya's notes.")

    @tool
    def research(question: str) -> str:
        """Ask the research agent a question about Maya."""
        return researcher.invoke({"messages": [HumanMessage(question)]})["messages"][-1].text

    @tool
    def clock(zone: str) -> str:
        """The time in a zone (a plain tool: no model under it)."""
        return "09:00"

    outer_model = ToolCallingChat(messages=iter([
        AIMessage(content="Let me check.", tool_calls=[
            {"name": "research", "args": {"question": "How old is Biscuit?"}, "id": "call_r1", "type": "tool_call"},
            {"name": "clock", "args": {"zone": "PST"}, "id": "call_c1", "type": "tool_call"}],
            usage_metadata=_usage(20)),
        AIMessage(content="Biscuit is two.", usage_metadata=_usage(30)),
    ]))
    middleware = MemoryMiddleware(mem, "chat-sub", extract=False)
    agent = create_agent(outer_model, [research, clock], middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("how old is my dog?")]})
    assert out["messages"][-1].text == "Biscuit is two."

    (row,) = mem.subagents("chat-sub")
    assert (row.tool_call_id, row.subagent_type, row.tool_status) == ("call_r1", "research", "success")
    assert (row.total_tokens, row.tool_use_count) == (40, 0)  # the inner agent's usage, not the outer one's
    assert row.duration_ms is not None and row.settled_at is not None and row.source == "live"
    # The message that made the call is captured like transcript ingestion keeps one, and the row points at it.
    caller = next(t for t in mem.turns("chat-sub") if "[tool_use research" in t.content)
    assert caller.content == ("Let me check.\n[tool_use research question=How old is Biscuit?]\n"
                              "[tool_use clock zone=PST]")
    assert row.turn_id == caller.turn_id
    assert mem.turn_metadata("chat-sub")[caller.turn_id]["tool_uses"][0] == {
        "id": "call_r1", "name": "research", "input": {"question": "How old is Biscuit?"}}


@pytest.mark.parametrize("outer_session", [None, "chat-own"], ids=["thread_id", "session_id"])
def test_a_sub_agent_with_its_own_middleware_keeps_its_turns_in_a_derived_session(mem, outer_session):
    """A sub-agent's MemoryMiddleware took the calling run's thread_id: its prompt and reply were stored as turns
    of the user's conversation (evidence for extraction), between the user's message and the reply."""
    from langchain_core.tools import tool

    from tortoise_sdk.store.subagent_core import root_session

    researcher = create_agent(ToolCallingChat(messages=iter([AIMessage("Biscuit is a two-year-old beagle.")])), [],
                              middleware=[MemoryMiddleware(mem, extract=False)])

    @tool
    def research(question: str) -> str:
        """Ask the research agent a question about Maya."""
        return researcher.invoke({"messages": [HumanMessage(question)]})["messages"][-1].text

    outer_model = ToolCallingChat(messages=iter([
        AIMessage("", tool_calls=[{"name": "research", "args": {"question": "Biscuit's age in Maya's notes?"},
                                   "id": "call_r1", "type": "tool_call"}]),
        AIMessage("Biscuit is two.")]))
    agent = create_agent(outer_model, [research], middleware=[MemoryMiddleware(mem, outer_session, extract=False)])
    agent.invoke({"messages": [HumanMessage("how old is my dog?")]}, {"configurable": {"thread_id": "T"}})

    session = outer_session or "T"
    assert [(t.role, t.content) for t in mem.turns(session)] == [
        ("user", "how old is my dog?"), ("assistant", "[tool_use research question=Biscuit's age in Maya's notes?]"),
        ("tool", "Biscuit is a two-year-old beagle."), ("assistant", "Biscuit is two.")]
    [derived] = [s.session_id for s in mem.sessions() if s.session_id.startswith(f"{session}:agent-")]
    assert root_session(derived) == session  # forgetting the conversation takes it too
    assert [t.content for t in mem.turns(derived)] == ["Biscuit's age in Maya's notes?",
                                                       "Biscuit is a two-year-old beagle."]
    # ... and they are a record of its run, never evidence (a reviewer's: the calling model's prompt was a user turn)
    from tortoise_sdk.pipeline.grounding import evidence_turns

    assert evidence_turns(mem.turns(derived), mem.turn_metadata(derived)) == []
    assert len(evidence_turns(mem.turns(session), mem.turn_metadata(session))) == 3  # the user's, the replies


def test_agent_tools_overrides_detection_and_recording_can_be_turned_off(mem):
    from langchain_core.tools import tool

    @tool
    def delegate(task: str) -> str:
        """Hand a task to a remote agent (no model runs here)."""
        return "done"

    def run(**options):
        model = ToolCallingChat(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "delegate", "args": {"task": "x"}, "id": f"call_{len(options)}",
                                               "type": "tool_call"}]),
            AIMessage(content="Done.")]))
        agent = create_agent(model, [delegate], middleware=[MemoryMiddleware(mem, "chat-o", extract=False, **options)])
        agent.invoke({"messages": [HumanMessage("please delegate")]})

    run(record_subagents=False)
    run()
    assert mem.subagents("chat-o") == []  # no model ran under it
    run(agent_tools=["delegate"], shown_turns=3)
    assert [(r.tool_call_id, r.tool_status) for r in mem.subagents("chat-o")] == [("call_2", "success")]


def test_a_custom_loop_records_tool_calls_and_sub_agents_through_its_session(mem):
    session = MemorySession(mem, "loop-sub", extract=False)
    session.after_turn("how old is my dog?", {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "research", "arguments": '{"question": "age?"}'}}]})
    caller = mem.turns("loop-sub")[-1]
    assert (caller.role, caller.content) == ("assistant", "[tool_use research question=age?]")
    assert mem.turn_metadata("loop-sub")[caller.turn_id]["tool_uses"] == [
        {"id": "call_9", "name": "research", "input": {"question": "age?"}}]
    assert session.record_subagent("call_9", subagent_type="researcher", description="age?").tool_status == "running"
    row = session.record_subagent("call_9", status="success", total_tokens=120, tool_use_count=2, duration_ms=900)
    assert (row.subagent_type, row.description, row.total_tokens, row.tool_use_count) == ("researcher", "age?", 120, 2)
    assert (row.turn_id, row.settled_at is not None) == (caller.turn_id, True)
    assert len(mem.subagents("loop-sub")) == 1
    # record_tool_call takes the message alone; its id comes back for the caller's bookkeeping.
    mid = session.record_tool_call({"role": "assistant", "content": "Checking.", "id": "msg-2",
                                    "tool_calls": [{"id": "call_10", "name": "clock", "args": {"zone": "PST"}}]})
    assert mid == "msg-2" and mem.turns("loop-sub")[-1].content == "Checking.\n[tool_use clock zone=PST]"
    assert session.record_tool_call("not a message") is None  # logged, never raised


def test_a_tool_loop_keeps_the_user_message_before_the_tool_calls_it_caused(mem):
    # record_tool_call during the turn, after_turn at its end: the call was stored before the user's message.
    session = MemorySession(mem, "loop-order", extract=False)
    session.before_turn([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "research tokio"}])
    session.record_tool_call({"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_1", "function": {"name": "research", "arguments": '{"q": "tokio"}'}}]})
    session.record_tool_call({"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", "name": "clock",
                                                                                  "args": {}}]})
    session.after_turn("research tokio", "Tokio is the most used runtime.")
    session.before_turn([{"role": "user", "content": "thanks"}])
    session.after_turn("thanks", "You're welcome.")  # no tool call: both captured by after_turn, as before
    assert [(h.role, h.content.split("\n")[0]) for h in mem.turns("loop-order")] == [
        ("user", "research tokio"), ("assistant", "Let me check."), ("assistant", "[tool_use clock]"),
        ("assistant", "Tokio is the most used runtime."), ("user", "thanks"), ("assistant", "You're welcome.")]
    # A tool loop calls before_turn before each model call: the user's message is still captured once.
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_4", "name": "clock", "args": {}}]}
    msgs = [{"role": "user", "content": [{"type": "text", "text": "what time is it in Oslo?"}, {"type": "image_url"}]}]
    session.before_turn(msgs)
    session.record_tool_call(call)
    msgs += [call, {"role": "tool", "tool_call_id": "call_4", "content": "12:00"}]
    session.before_turn(msgs)
    session.record_tool_call({**call, "tool_calls": [{"id": "call_5", "name": "clock", "args": {}}]})
    session.before_turn(msgs)
    session.after_turn("what time is it in Oslo?", "Noon.")
    assert [h.content for h in mem.turns("loop-order")][-4:] == [
        "what time is it in Oslo?", "[tool_use clock]", "[tool_use clock]", "Noon."]
    # A step with no new user message (the last one was answered) captures no user message again.
    session.before_turn([*msgs, {"role": "assistant", "content": "Noon."}])
    session.record_tool_call({**call, "tool_calls": [{"id": "call_6", "name": "clock", "args": {}}]})
    assert [h.content for h in mem.turns("loop-order")][-2:] == ["Noon.", "[tool_use clock]"]
    session.after_turn("what time is it in Oslo?", "Still noon.")  # a new exchange's own message: stored
    # A reply to another message than the one before_turn saw keeps both.
    session.before_turn([{"role": "user", "content": "what time is it?"}])
    session.record_tool_call({"role": "assistant", "content": "", "tool_calls": [{"id": "call_3", "name": "clock",
                                                                                  "args": {}}]})
    session.after_turn("what time is it in Lima?", "Noon.")
    assert [h.content for h in mem.turns("loop-order")][-4:] == [
        "what time is it?", "[tool_use clock]", "what time is it in Lima?", "Noon."]


def test_a_custom_loop_keys_sub_agents_by_the_run_it_names_never_by_the_tool_call(mem):
    """AC-30/31/32: a late frame of one run never lands on another run's settled row that reused the call id."""
    session = MemorySession(mem, "loop-runs", extract=False)
    session.record_subagent("call_1", execution_id="run-1", subagent_type="researcher")
    settled = session.record_subagent("call_1", execution_id="run-1", status="success", total_tokens=120)
    late = session.record_subagent("call_1", execution_id="run-2", status="running", total_tokens=7)
    assert (settled.agent_execution_id, late.agent_execution_id) == ("run-1", "run-2")
    first = next(r for r in mem.subagents("loop-runs") if r.agent_execution_id == "run-1")
    assert (first.tool_status, first.total_tokens, first.settled_at) == ("success", 120, settled.settled_at)
    assert mem.subagent_counters().unknown_execution == 0
    anonymous = session.record_subagent("call_2")
    assert anonymous.agent_execution_id == "unknown"  # no run named: 'unknown', never the tool call id
    assert mem.subagent_counters().unknown_execution == 1


# -- what the host holds of the running session (issue 23) ------------------------------------------

EARLIER = "My greyhound Biscuit only eats salmon kibble since the vet visit in March."
HELD = "The vet said Biscuit's salmon kibble now comes from the Petco on Main Street."
CHATTER = [("I started a new job at the bakery", "Congratulations!"), ("I bike to the BART station", "Nice.")]
QUESTION = "where does the salmon kibble for Biscuit come from?"


@pytest.fixture
def held_mem(mem):  # noqa: ANN001, ANN201
    """The demo store and one earlier session ("monday") that holds a fact about Biscuit's food."""
    mem.capture("monday", [{"role": "user", "content": EARLIER}, {"role": "assistant", "content": "Noted."}])
    return mem


def _loop_turn(session: MemorySession, messages: list[dict], user: str, reply: str) -> None:
    messages.append({"role": "user", "content": user})
    session.before_turn(messages)
    session.after_turn(user, reply)
    messages.append({"role": "assistant", "content": reply})


def test_the_loop_never_points_at_a_turn_it_still_sends_but_at_earlier_sessions_and_trimmed_turns(held_mem):
    # window_turns=2: the fact said this session is long out of the reflex window, yet still in what the loop sends.
    session = MemorySession(held_mem, "friday", extract=False, window_turns=2, shown_turns=0)
    messages: list[dict] = []
    for user, reply in [(HELD, "Noted."), *CHATTER]:
        _loop_turn(session, messages, user, reply)
    session.before_turn([*messages, {"role": "user", "content": QUESTION}])
    shown = [p.session_id for p in session.last_block.pointers]
    assert "monday" in shown and "friday" not in shown
    # The loop trims its history: what it no longer sends is memory again, under the compacted header.
    session.before_turn([*messages[2:], {"role": "user", "content": QUESTION}])
    assert "friday" in [p.session_id for p in session.last_block.pointers]
    assert "compacted out of your context" in session.last_block.block


GYM = [("ok", "Hi! How can I help?"), ("My gym locker code is 3141.", "Got it."),
       ("I like hiking in the Alps.", "Nice."), ("I also play chess on Sundays.", "Cool."), ("ok", "Anything else?")]


def test_a_trimming_loop_is_shown_what_it_trimmed_though_its_first_message_is_said_again(mem):
    """A reviewer's: the session's first "ok" matched the recent "ok" the loop still sends, so the whole session
    counted as sent and the turns the loop trimmed were never shown."""
    from tortoise_sdk.adapters._common import first_held_index

    session = MemorySession(mem, "gym", extract=False, shown_turns=0)
    messages: list[dict] = []
    for user, reply in GYM:
        messages.append({"role": "user", "content": user})
        session.before_turn(messages[-4:])  # the loop sends its last four messages
        session.after_turn(user, reply)
        messages.append({"role": "assistant", "content": reply})
    session.before_turn([*messages[-3:], {"role": "user", "content": "What is my gym locker code?"}])
    assert "3141" in session.last_block.block and "compacted out of your context" in session.last_block.block
    # Sent from "Cool." (turn 7) on, and a new "ok" the store does not hold yet is not the stored ones.
    assert first_held_index(mem, "gym", messages[-3:]) == 7
    assert first_held_index(mem, "gym", [*messages[-3:], {"role": "user", "content": "ok"}]) == 7


def test_a_long_session_s_block_reads_only_the_tail_the_loop_sends(mem, monkeypatch):
    """A user's loop 20,000 turns into a session: each before_turn read the whole session to find where the
    messages it sends start (155 ms of its 185 ms; the block itself took 3 ms), and it grew with every turn. The
    messages are laid over the session's latest stored turns, read in growing pages only while one is not found."""
    from tortoise_sdk.adapters._common import first_held_index

    said = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about rivers"} for i in range(3000)]
    mem.append("long", said, extract=False)
    read = _count_turn_reads(mem, monkeypatch)
    sent = said[-20:]
    assert first_held_index(mem, "long", [*sent, {"role": "user", "content": "and the lakes?"}]) == 2980
    assert sum(read) <= 100
    # A message the store never held is passed over: the walk is not sure of the tail, and reads the whole session.
    read.clear()
    assert first_held_index(mem, "long", [said[0], {"role": "user", "content": "never stored"}, *sent]) == 0
    assert sum(read) >= 3000
    assert first_held_index(mem, "long", [{"role": "user", "content": "never stored"}]) is None
    assert first_held_index(mem, "empty", sent) is None


def test_the_middleware_never_points_at_a_turn_the_agent_still_sends(held_mem):
    model = fake("Noted.", *(reply for _, reply in CHATTER), "From the Petco.")
    middleware = MemoryMiddleware(held_mem, "friday", extract=False, window_turns=2, shown_turns=0)
    agent = create_agent(model, [], middleware=[middleware])
    messages: list[Any] = []
    for user in [HELD, *(u for u, _ in CHATTER)]:
        messages = agent.invoke({"messages": [*messages, HumanMessage(user)]})["messages"]
    agent.invoke({"messages": [*messages, HumanMessage(QUESTION)]})
    shown = [p.session_id for p in middleware.last_block.pointers]
    assert "monday" in shown and "friday" not in shown
    assert HELD not in model.received[-1][0].content  # the system message: the block did not repeat it


def test_without_a_checkpointer_a_message_with_a_nul_sent_again_is_not_stored_again(mem):
    """3558675 stores a NUL as U+FFFD; the text laid over the stored turns to find what a run without a checkpointer
    sends again was the raw one, so a message holding a NUL (a pasted binary) never matched its stored turn: each
    run stored the whole history again under LangGraph's new random ids (three copies after three runs)."""
    _chat_without_checkpointer(mem, ("Got it.", "Beagle.", "Yes."),
                               ("my log: a\x00b", "My dog is a beagle", "Right?"))
    assert [(t.role, t.content) for t in mem.turns("chat")] == [
        ("user", "my log: a\ufffdb"), ("assistant", "Got it."), ("user", "My dog is a beagle"), ("assistant", "Beagle."),
        ("user", "Right?"), ("assistant", "Yes.")]


def test_a_trimmed_history_s_first_message_is_found_by_its_id_though_its_text_is_said_again_lately(mem):
    """A loop that keeps its first message and its latest ones, 200 turns into a session: the first message's text
    ("ok") was said again lately. Its id is the turn at index 0, so the loop holds the session from there; laid over
    the session's tail alone, the text matched the recent "ok" and the block could show turns the loop holds."""
    from tortoise_sdk.adapters._common import first_held_index

    turns = [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
              "content": "ok" if i in (0, 198) else f"turn {i} about rivers"} for i in range(200)]
    mem.append("trimmed", turns, extract=False)
    assert first_held_index(mem, "trimmed", [turns[0], turns[-1]]) == 0
    assert first_held_index(mem, "trimmed", turns[-3:]) == 197
