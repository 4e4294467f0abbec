"""The OpenAI Agents SDK adapter with a real ``Agent`` and ``Runner`` and the SDK's own scripted model (no network)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed (pip install -e '.[dev]' installs it)")

from agents import Agent, RunConfig, Runner, trace  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.errors import AdapterError  # noqa: E402
from tortoise_sdk.adapters.openai_agents import MemorySession  # noqa: E402

FACT = "My greyhound Biscuit only eats salmon kibble since the vet visit in March."
OFFLINE = RunConfig(tracing_disabled=True)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def ask(agent: Agent, text: str, session: MemorySession) -> Any:
    return await Runner.run(agent, text, session=session, run_config=session.run_config(OFFLINE),
                            hooks=session.hooks)


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory(str(tmp_path / "m.db"), namespace="agents") as m:
        yield m


def test_memory_session_implements_the_sdk_session_protocol(mem: Memory) -> None:
    assert isinstance(MemorySession(mem, "chat-1"), Session)


def test_a_fact_the_run_still_sends_is_no_pointer_but_comes_back_once_the_session_limit_drops_it(mem: Memory) -> None:
    model = ScriptedModel([[assistant_message("Noted: Biscuit eats salmon kibble.", item_id="msg_1")],
                           [assistant_message("Salmon kibble.", item_id="msg_2")],
                           [assistant_message("Salmon kibble.", item_id="msg_3")]])
    agent = Agent(name="Helper", instructions="You are a helpful assistant.", model=model)
    # window_turns=1: the first turn is out of the reflex window, yet the SDK still sends it (issue 23).
    session = MemorySession(mem, "chat-1", window_turns=1)

    first = run(ask(agent, FACT, session))
    assert first.final_output == "Noted: Biscuit eats salmon kibble."
    run(ask(agent, "What does Biscuit eat these days?", session))
    # The SDK sends only the last two items: the first exchange has left the model's input, memory brings it back.
    limited = dataclasses.replace(session.run_config(OFFLINE), session_settings=SessionSettings(limit=2))
    run(Runner.run(agent, "Since when does Biscuit eat salmon kibble?", session=session, run_config=limited))

    before, held, trimmed = model.calls
    assert before.system_instructions == "You are a helpful assistant."  # nothing stored yet: no block
    # The SDK sends the whole session: nothing of it comes back as memory (the store holds nothing else).
    assert FACT in str(held.input) and held.system_instructions == "You are a helpful assistant."
    assert FACT not in str(trimmed.input)
    assert trimmed.system_instructions.startswith("You are a helpful assistant.\n\n[tortoise memory]")
    block = trimmed.system_instructions.split("\n\n", 1)[1]
    assert "salmon kibble since the vet visit" in block and "compacted out of your context" in block
    assert all("[tortoise memory]" not in str(item) for item in trimmed.input)  # the block is not an item
    # The session's items are what the SDK gave, in order; the block was never captured.
    items = run(session.get_items())
    assert [i.get("role") for i in items] == ["user", "assistant"] * 3
    assert items[0] == {"content": FACT, "role": "user"} and items[1]["id"] == "msg_1"
    assert all(not t.content.startswith("[tortoise memory]") for t in mem.turns("chat-1"))


@pytest.mark.parametrize("first", ["ok", "Hello there"])
def test_a_session_limit_brings_back_what_it_dropped_though_an_early_message_is_said_again(mem: Memory,
                                                                                          first: str) -> None:
    """A reviewer's: with the session's first message "ok" said again later, the whole session counted as sent,
    and what SessionSettings(limit=4) dropped never came back."""
    said = [first, "My gym locker code is 3141.", "I like hiking in the Alps.", "I also play chess on Sundays.", "ok",
            "What is my gym locker code?"]
    model = ScriptedModel([[assistant_message(f"reply {i}", item_id=f"msg_{i}")] for i in range(len(said))])
    agent = Agent(name="Helper", instructions="Be brief.", model=model)
    session = MemorySession(mem, "gym")
    limited = dataclasses.replace(session.run_config(OFFLINE), session_settings=SessionSettings(limit=4))
    for text in said:
        run(Runner.run(agent, text, session=session, run_config=limited))
    assert "3141" not in str(model.calls[-1].input)
    assert "3141" in model.calls[-1].system_instructions
    assert "compacted out of your context" in model.calls[-1].system_instructions


@pytest.mark.parametrize("limit", [None, 2])
def test_a_question_asked_again_in_a_later_run_gets_a_block_of_its_own(mem: Memory, limit: int | None) -> None:
    """A reviewer's: the block was kept by the question's text alone, so the same question in a later run got the
    block of the first, without what was captured since, and the pointers it showed were not kept."""
    question = "Any news about my trip?"
    mem.capture("monday", [{"role": "user", "content": "My flight to Oslo is on Friday."}])
    model = ScriptedModel([[assistant_message(f"reply {i}", item_id=f"msg_{i}")] for i in range(3)])
    agent = Agent(name="Helper", instructions="Be brief.", model=model)
    session = MemorySession(mem, "tuesday")
    config = dataclasses.replace(session.run_config(OFFLINE), session_settings=SessionSettings(limit=limit))
    for _ in range(2):
        run(Runner.run(agent, question, session=session, run_config=config))
    mem.capture("wednesday", [{"role": "user", "content": "My Oslo flight moved to Sunday, my trip is delayed."}])
    run(Runner.run(agent, question, session=session, run_config=config))
    assert "moved to Sunday" in model.calls[-1].system_instructions
    assert len(mem.cursor("reflex:shown:tuesday").value["turns"]) == 3  # one host turn per run


def test_the_model_calls_of_one_run_share_its_block(mem: Memory) -> None:
    from agents import function_tool

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "Sunny."

    mem.capture("monday", [{"role": "user", "content": "The weather in Oslo decides my trip."}])
    model = ScriptedModel([[function_call("weather", {"city": "Oslo"}, call_id="c1")],
                           [function_call("weather", {"city": "Bergen"}, call_id="c2")],
                           [assistant_message("Sunny in both.", item_id="msg_1")]])
    session = MemorySession(mem, "tuesday")
    run(ask(Agent(name="Helper", instructions="Be brief.", model=model, tools=[weather]), "Weather in Oslo?", session))
    assert len({call.system_instructions for call in model.calls}) == 1 and len(model.calls) == 3
    assert "decides my trip" in model.calls[0].system_instructions
    assert len(mem.cursor("reflex:shown:tuesday").value["turns"]) == 1  # one host turn


def test_a_new_conversation_gets_the_block_from_an_earlier_one(mem: Memory) -> None:
    model = ScriptedModel([[assistant_message("Noted.", item_id="msg_1")],
                           [assistant_message("Salmon kibble.", item_id="msg_2")]])
    agent = Agent(name="Helper", instructions="Be brief.", model=model)
    run(ask(agent, FACT, MemorySession(mem, "monday")))
    run(ask(agent, "What does Biscuit eat?", MemorySession(mem, "friday")))
    assert "salmon kibble since the vet visit" in model.calls[1].system_instructions
    assert [h.session_id for h in mem.search("vet visit")] == ["monday"]  # the block was not captured on friday


def test_an_agent_used_as_a_tool_yields_one_sub_agent_row(mem: Memory) -> None:
    researcher = Agent(name="Researcher", instructions="Find facts.",
                       model=ScriptedModel([[assistant_message("Biscuit eats salmon kibble.", item_id="msg_r")]]))
    lead = Agent(
        name="Lead", instructions="Delegate research.",
        tools=[researcher.as_tool(tool_name="research", tool_description="Look something up.")],
        model=ScriptedModel([
            [function_call("research", {"input": "What does Biscuit eat?"}, call_id="call_research_1")],
            [assistant_message("Biscuit eats salmon kibble.", item_id="msg_l")],
        ]),
    )
    session = MemorySession(mem, "chat-tools")
    result = run(ask(lead, "Ask the researcher what Biscuit eats.", session))
    assert result.final_output == "Biscuit eats salmon kibble."
    (row,) = mem.subagents(session_id="chat-tools")
    assert (row.tool_call_id, row.subagent_type, row.description) == ("call_research_1", "Researcher", "research")
    assert (row.tool_status, row.source, row.agent_execution_id) == ("completed", "live", "unknown")
    assert row.settled_at is not None and (row.duration_ms is None or row.duration_ms > 0)
    assert row.total_tokens is None  # not reported by the SDK's hooks: unknown, not 0
    # The launching turn is the function call the session captured after the run.
    launching = next(t for t in mem.turns("chat-tools") if t.turn_id == row.turn_id)
    assert launching.external_id == "fc-call_research_1" and launching.content.startswith("[tool_use research ")
    kinds = [i.get("type", "message") for i in run(session.get_items())]
    assert kinds == ["message", "function_call", "function_call_output", "message"]


def test_a_call_id_an_earlier_run_used_keeps_the_later_runs_call_and_output(mem: Memory,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A reviewer's: a provider that numbers its calls from call_0 in each run reused the call id, and the second
    run's function call and output were taken for the first's edits: not stored, not in the session's items."""
    from agents import function_tool

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}" if city == "Oslo" else f"Rain in {city}"

    model = ScriptedModel([[function_call("weather", {"city": "Oslo"}, call_id="call_0")],
                           [assistant_message("Sunny in Oslo.", item_id="msg_1")],
                           [function_call("weather", {"city": "Bergen"}, call_id="call_0")],
                           [assistant_message("Rain in Bergen.", item_id="msg_2")]])
    agent = Agent(name="Helper", instructions="Be brief.", model=model, tools=[weather])
    session = MemorySession(mem, "reused")
    for question in ("Weather in Oslo?", "Weather in Bergen?"):
        run(ask(agent, question, session))
    assert [(t.role, t.content) for t in mem.turns("reused")][4:] == [
        ("user", "Weather in Bergen?"), ("assistant", '[tool_use weather {"city":"Bergen"}]'),
        ("tool", "Rain in Bergen"), ("assistant", "Rain in Bergen.")]
    items = run(session.get_items())
    assert [i.get("type", "message") for i in items] == [
        "message", "function_call", "function_call_output", "message"] * 2
    assert not any("changed after it was stored" in r.getMessage() for r in caplog.records)


def _delegating_lead() -> Agent:
    researcher = Agent(name="Researcher", instructions="Find facts.",
                       model=ScriptedModel([[assistant_message("Salmon kibble.", item_id="msg_r")]]))
    return Agent(
        name="Lead", instructions="Delegate research.",
        tools=[researcher.as_tool(tool_name="research", tool_description="Look something up.")],
        model=ScriptedModel([
            [function_call("research", {"input": "What does Biscuit eat?"}, call_id="call_research_1")],
            [assistant_message("Salmon kibble.", item_id="msg_l")],
        ]),
    )


def test_the_execution_id_is_the_call_span_so_two_runs_never_share_a_row(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AC-30/31/32: both frames of a call carry its span id; another run reusing the call id keeps its own row,
    even inside the same trace."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the SDK's exporter then skips the upload
    traced = RunConfig(tracing_disabled=False)
    session = MemorySession(mem, "chat-traced")
    with trace("one conversation"):
        for _ in range(2):
            run(Runner.run(_delegating_lead(), "Ask the researcher.", session=session,
                           run_config=session.run_config(traced), hooks=session.hooks))
    rows = mem.subagents(session_id="chat-traced")
    assert [(r.tool_call_id, r.tool_status) for r in rows] == [("call_research_1", "completed")] * 2
    assert len({r.agent_execution_id for r in rows}) == 2
    assert all(r.agent_execution_id.startswith("span_") for r in rows)
    counters = mem.subagent_counters()
    assert (counters.unknown_execution, counters.persisted) == (0, 4)  # two frames per sub-agent, none unknown
    # Each row names its own run's function call (the second run's was taken for the first's, and not stored).
    calls = {t.turn_id: t.index for t in mem.turns("chat-traced") if t.content.startswith("[tool_use research")}
    assert sorted(calls[r.turn_id] for r in rows) == sorted(calls.values()) and len(calls) == 2


def test_pop_clear_and_restore_change_the_view_not_the_memory(mem: Memory, tmp_path: Path) -> None:
    session = MemorySession(mem, "chat-2")
    run(session.add_items([{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"},
                           {"role": "user", "content": "second"}]))
    assert run(session.pop_item()) == {"role": "user", "content": "second"}
    assert [i["content"] for i in run(session.get_items())] == ["first", "one"]
    # The view is in the store: another process (a new Memory on the same file) sees it too.
    with Memory(str(tmp_path / "m.db"), namespace="agents") as again:
        other = MemorySession(again, "chat-2")
        assert [i["content"] for i in run(other.get_items())] == ["first", "one"]
        assert run(other.get_items(limit=1)) == [{"role": "assistant", "content": "one"}]
    # The SDK puts back what it popped (a rewind that did not match): the turn is shown again, not stored twice.
    run(session.add_items([{"role": "user", "content": "second"}]))
    assert [i["content"] for i in run(session.get_items())] == ["first", "one", "second"]
    assert len(mem.turns("chat-2")) == 3
    run(session.clear_session())
    assert run(session.get_items()) == [] and run(session.pop_item()) is None
    assert [h.content for h in mem.search("second")] == ["second"]  # still in long-term memory
    run(session.add_items([{"role": "user", "content": "third"}]))
    assert run(session.get_items()) == [{"role": "user", "content": "third"}]


def test_a_tool_output_holding_a_nul_is_kept_and_a_popped_one_restored(mem: Memory) -> None:
    """A function tool that read a binary file returns a NUL: capture refused the items, so the call and its output
    were lost ("capture skipped"). They are stored with U+FFFD, and such an item popped and put back is one turn."""
    from agents import function_tool

    @function_tool
    def head(path: str) -> str:
        """The first bytes of a file."""
        return "PK\x03\x04\x00\x00"

    model = ScriptedModel([[function_call("head", {"path": "a.zip"}, call_id="c1")],
                           [assistant_message("A zip archive.", item_id="msg_1")]])
    session = MemorySession(mem, "chat-nul")
    run(ask(Agent(name="Helper", instructions="Be brief.", model=model, tools=[head]), "What is a.zip?", session))
    assert [(t.external_id, t.content) for t in mem.turns("chat-nul")][1:3] == [
        ("fc-c1", '[tool_use head {"path":"a.zip"}]'), ("fco-c1", "PK\x03\x04\ufffd\ufffd")]
    run(session.add_items([{"role": "user", "content": "bytes: \x00"}]))
    popped = run(session.pop_item())
    run(session.add_items([{"role": "user", "content": "bytes: \x00"}]))  # the SDK puts back what it popped
    assert popped == {"role": "user", "content": "bytes: \ufffd"}
    assert [t.content for t in mem.turns("chat-nul")][-1:] == ["bytes: \ufffd"] and len(mem.turns("chat-nul")) == 5


def test_a_memory_failure_never_reaches_the_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mem = Memory(str(tmp_path / "m.db"))
    session = MemorySession(mem, "chat-3")
    mem.close()  # every store call now fails
    model = ScriptedModel([[assistant_message("Hello!", item_id="msg_1")]])
    agent = Agent(name="Helper", instructions="Be brief.", model=model)
    with caplog.at_level(logging.WARNING, logger="tortoise_sdk.adapters.openai_agents"):
        result = run(ask(agent, "hi there, anything about Biscuit?", session))
    assert result.final_output == "Hello!"
    assert model.calls[0].system_instructions == "Be brief."
    assert session.last_block.block == ""
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "session items not read" in logged and "capture skipped" in logged


def test_a_run_config_with_its_own_filter_is_refused_with_the_fix(mem: Memory) -> None:
    session = MemorySession(mem, "chat-4")
    with pytest.raises(AdapterError, match="session.input_filter"):
        session.run_config(RunConfig(call_model_input_filter=lambda data: data.model_data))


@pytest.mark.parametrize("session_id", ["", "  ", None, 7])
def test_a_blank_session_id_is_refused_when_the_session_is_built(mem: Memory, session_id: Any) -> None:
    """Reviewer: MemorySession(mem, "") was accepted, and every run was then memoryless (warnings in the log only),
    while the custom-loop adapter refused the same input."""
    with pytest.raises(AdapterError, match="session_id must be a non-empty string"):
        MemorySession(mem, session_id)


def test_an_item_that_is_not_one_is_left_out_and_the_rest_captured(mem: Memory,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Reviewer: add_items([None, {...}]) dropped the whole batch, the valid items too."""
    session = MemorySession(mem, "items")
    with caplog.at_level(logging.WARNING, logger="tortoise_sdk"):
        run(session.add_items([None, {"role": "user", "content": "my dog is Biscuit"}, 5]))
    assert [t.content for t in mem.turns("items")] == ["my dog is Biscuit"]
    assert "session item not captured: not a session item: NoneType" in caplog.text


def _failing_lead(**as_tool: Any) -> Agent:
    researcher = Agent(name="Researcher", instructions="Find facts.",
                       model=ScriptedModel([RuntimeError("the provider is down")]))
    return Agent(
        name="Lead", instructions="Delegate research.",
        tools=[researcher.as_tool(tool_name="research", tool_description="Look something up.", **as_tool)],
        model=ScriptedModel([
            [function_call("research", {"input": "What does Biscuit eat?"}, call_id="call_research_1")],
            [assistant_message("The researcher failed.", item_id="msg_l")],
        ]),
    )


@pytest.mark.parametrize("tracing_disabled", [True, False])
def test_a_sub_agent_whose_model_raised_is_recorded_failed_not_completed(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, tracing_disabled: bool
) -> None:
    """The SDK turns the sub-agent's error into the tool's result and calls on_tool_end as for a success."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    session = MemorySession(mem, "chat-failing")
    result = run(Runner.run(_failing_lead(), "Ask the researcher.", session=session,
                            run_config=session.run_config(RunConfig(tracing_disabled=tracing_disabled)),
                            hooks=session.hooks))
    assert result.final_output == "The researcher failed."
    (row,) = mem.subagents(session_id="chat-failing")
    assert (row.tool_status, row.agent_status) == ("failed", "failed")
    assert row.settled_at is not None


def test_a_custom_failure_text_is_known_as_a_failure_only_through_the_trace(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    statuses = []
    for disabled in (False, True):
        session = MemorySession(mem, f"chat-custom-{disabled}")
        run(Runner.run(_failing_lead(failure_error_function=lambda ctx, err: "no answer today"),
                       "Ask the researcher.", session=session,
                       run_config=session.run_config(RunConfig(tracing_disabled=disabled)), hooks=session.hooks))
        statuses += [r.tool_status for r in mem.subagents(session_id=f"chat-custom-{disabled}")]
    assert statuses == ["failed", "completed"]  # with tracing off the SDK leaves nothing to tell them apart


def test_a_long_session_s_run_reads_the_items_it_sends_not_the_whole_session(mem: Memory,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 items into a session, ``get_items(limit=10)`` took 480 ms and adding a tool call 210 ms: each read every
    turn and its metadata, however few items the run sends (``SessionSettings(limit=...)``). A run now reads the
    session's tail, and the call ids it meets through their index."""
    said = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about rivers"} for i in range(3000)]
    session = MemorySession(mem, "long", extract=False)
    early_call = {"type": "function_call", "call_id": "call_r", "name": "research", "arguments": "{}"}
    run(session.add_items([said[0], early_call]))
    for at in range(1, 3000, 500):
        run(session.add_items(said[at:at + 500]))
    read: list[int] = []
    for name in ("turns", "turn_metadata"):
        method = getattr(mem.store, name)

        def counted(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            out = _method(*args, **kwargs)
            read.append(len(out))
            return out

        monkeypatch.setattr(mem.store, name, counted)

    assert run(session.get_items(limit=10)) == said[-10:]
    assert run(session.pop_item()) == said[-1]
    assert run(session.get_items(limit=10)) == said[-11:-1]  # the popped turn is hidden, one more is read
    run(session.add_items([said[-1]]))  # put back: shown again, not stored twice
    assert run(session.get_items(limit=2)) == said[-2:]
    assert sum(read) <= 400, sum(read)
    assert len(mem.turns("long")) == 3001

    # A run whose provider numbers its calls as an earlier run did: told apart by the call id's index, not the session.
    researcher = Agent(name="Researcher", instructions="Find facts.",
                       model=ScriptedModel([[assistant_message("Rivers run to the sea.", item_id="msg_r")]]))
    lead = Agent(name="Lead", instructions="Delegate.", model=ScriptedModel([
        [function_call("research", {"input": "rivers?"}, call_id="call_r")],
        [assistant_message("They run to the sea.", item_id="msg_l")]]),
        tools=[researcher.as_tool(tool_name="research", tool_description="Look something up.")])
    read.clear()
    # (Without the memory block's filter: a sub-agent's input is never stored, and the block reads the whole
    # session to be sure of it.)
    limited = dataclasses.replace(OFFLINE, session_settings=SessionSettings(limit=10))
    result = run(Runner.run(lead, "Where do rivers go?", session=session, run_config=limited, hooks=session.hooks))
    assert result.final_output == "They run to the sea."
    assert sum(read) <= 500, sum(read)
    asked = next(t.index for t in mem.turns("long", last=5) if t.content == "Where do rivers go?")
    # The earlier run stored the call (not its output): this run's call gets the run's id, its output keeps its own.
    assert {f"fc-call_r@{asked}", "fco-call_r"} <= {t.external_id for t in mem.turns("long", last=5)}
    (row,) = mem.subagents(session_id="long")
    assert row.turn_id == next(t.turn_id for t in mem.turns("long", external_ids=[f"fc-call_r@{asked}"]))
