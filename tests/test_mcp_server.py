"""``tortoise mcp`` end to end: the server runs as a subprocess and the official MCP client talks to it over stdio."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[dev]' installs it)")

from mcp import Client, StdioServerParameters  # noqa: E402

TOOLS = {"memory_search", "memory_context", "memory_expand", "memory_capture", "memory_memories"}
TORTOISE = str(Path(sys.executable).with_name("tortoise"))

TURNS = [
    {"role": "user", "content": "My greyhound Biscuit only eats salmon kibble since the vet visit in March.",
     "id": "u1"},
    {"role": "assistant", "content": "Noted: Biscuit the greyhound is on salmon kibble.", "id": "a1"},
]


def server(db: Path, namespace: str, *options: str) -> Client:
    return Client(StdioServerParameters(command=TORTOISE, args=["mcp", "--db", str(db), "--namespace", namespace,
                                                                *options]),
                  read_timeout_seconds=60)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_tools_capture_search_context_expand_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "m.db"

    async def scenario() -> None:
        async with server(db, "alice") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            # The input schemas are the SDK's pydantic models: a turn's role is one of the four roles.
            turn_schema = tools["memory_capture"].input_schema["$defs"]["Turn"]
            assert turn_schema["properties"]["role"]["enum"] == ["user", "assistant", "system", "tool"]
            assert "hits" in tools["memory_search"].output_schema["properties"]

            captured = await client.call_tool("memory_capture", {"session_id": "vet", "turns": TURNS,
                                                                 "session_date": "2024-03-18T10:00:00"})
            assert not captured.is_error, text(captured)
            assert captured.structured_content["turns_stored"] == 2
            assert "stored 2 new turn(s) of 2 in session vet" in text(captured)
            again = await client.call_tool("memory_capture", {"session_id": "vet", "turns": TURNS})
            assert again.structured_content["turns_stored"] == 0  # same ids: nothing captured twice

            found = await client.call_tool("memory_search", {"query": "salmon kibble", "k": 5})
            hits = found.structured_content["hits"]
            assert {h["external_id"] for h in hits} == {"u1", "a1"}
            assert "Biscuit only eats salmon kibble" in text(found)

            context = await client.call_tool("memory_context", {"query": "What does Biscuit eat these days?",
                                                                "session_id": "today"})
            block = context.structured_content
            assert block["block"].startswith("[tortoise memory]") and block["pointers"]
            assert text(context) == block["block"]
            pointer = block["pointers"][0]["id"]
            # Already shown in this conversation, and not asked about again: not repeated.
            repeat = await client.call_tool("memory_context", {"query": "Biscuit food, salmon kibble",
                                                               "shown": [p["id"] for p in block["pointers"]]})
            assert pointer not in {p["id"] for p in repeat.structured_content["pointers"]}

            expanded = await client.call_tool("memory_expand", {"pointer_id": pointer})
            assert expanded.structured_content["id"] == pointer
            assert expanded.structured_content["session_id"] == "vet"
            assert "salmon kibble" in expanded.structured_content["content"]

            memories = await client.call_tool("memory_memories", {})
            assert memories.structured_content == {"memories": []}  # no model configured: turns only
            assert text(memories) == "no memories extracted yet"

            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert resources == {"tortoise://sessions", "tortoise://sessions/vet"}
            listing = await client.read_resource("tortoise://sessions/vet")
            assert listing.contents[0].text.splitlines()[0].startswith("#0 user: My greyhound Biscuit")

            bad = await client.call_tool("memory_capture", {"session_id": "vet", "turns": [
                {"role": "user", "content": "the vet moved the visit", "id": "u1"}]})
            assert bad.is_error and "already stored with different content" in text(bad)
            assert "append: true" in text(bad)
            # An agent that sends only the latest exchange (reviewer: refused from its second call on).
            latest = [{"role": "user", "content": "The vet moved the visit to Friday."},
                      {"role": "assistant", "content": "Friday it is."}]
            appended = await client.call_tool("memory_capture", {"session_id": "vet", "turns": latest, "append": True})
            assert not appended.is_error and appended.structured_content["turns_stored"] == 2
            listing = await client.read_resource("tortoise://sessions/vet")
            assert listing.contents[0].text.splitlines()[-1].startswith("#3 assistant: Friday it is.")
            missing = await client.call_tool("memory_expand", {"pointer_id": "t_00000000000000000000"})
            assert missing.is_error and "t_00000000000000000000" in text(missing)

    run(scenario())


def test_the_clients_window_is_held_and_what_it_compacted_away_is_memory(tmp_path: Path) -> None:
    """The window a client sends is what it holds: the session's stored turns from the first of them on are
    never shown back, even those it did not send again; turns before the window are memory again."""
    db = tmp_path / "m.db"
    chat = [TURNS[0], TURNS[1]] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": line, "id": f"x{i}"}
        for i, line in enumerate(["Can you draft the quarterly budget summary?", "Here is a first draft.",
                                  "Shorten the second paragraph please.", "Done, it is shorter now.",
                                  "Add the travel costs table.", "Added the travel costs table.",
                                  "Check the totals again.", "The totals add up.",
                                  "Send it to Priya.", "Sent to Priya."])]

    async def scenario() -> None:
        async with server(db, "alice") as client:
            await client.call_tool("memory_capture", {"session_id": "chat", "turns": chat})
            query = {"query": "What does Biscuit eat these days?", "session_id": "chat"}
            held = (await client.call_tool("memory_context", {**query, "window": chat})).structured_content
            assert held["pointers"] == [] and held["block"] == ""
            # A client that sends only the user's messages still holds the replies between them.
            users = [t for t in chat[6:] if t["role"] == "user"]
            asked = {"query": "Did you add the travel costs table?", "session_id": "chat", "window": users}
            replies = (await client.call_tool("memory_context", asked)).structured_content
            assert replies["pointers"] == [], replies
            compacted = (await client.call_tool("memory_context", {**query, "window": chat[6:]})).structured_content
            assert "u1" in {p["external_id"] for p in compacted["pointers"]}, compacted
            assert "compacted" in compacted["block"]

    run(scenario())


def test_a_server_on_another_namespace_sees_nothing_of_the_first(tmp_path: Path) -> None:
    db = tmp_path / "m.db"

    async def scenario() -> None:
        async with server(db, "alice") as alice:
            await alice.call_tool("memory_capture", {"session_id": "vet", "turns": TURNS})
            block = (await alice.call_tool("memory_context", {"query": "what does Biscuit eat?"})).structured_content
            pointer = block["pointers"][0]["id"]
        async with server(db, "bob") as bob:
            assert (await bob.call_tool("memory_search", {"query": "salmon kibble"})).structured_content == {
                "hits": []}
            empty = (await bob.call_tool("memory_context", {"query": "what does Biscuit eat?"})).structured_content
            assert empty["pointers"] == [] and empty["block"] == ""
            refused = await bob.call_tool("memory_expand", {"pointer_id": pointer})
            assert refused.is_error
            assert {str(r.uri) for r in (await bob.list_resources()).resources} == {"tortoise://sessions"}
            listing = await bob.read_resource("tortoise://sessions")
            assert listing.contents[0].text.strip() == "[]"
            # No tool takes a namespace: an extra argument cannot reach alice's memory.
            schema = {t.name: t.input_schema for t in (await bob.list_tools()).tools}
            assert all("namespace" not in s["properties"] for s in schema.values())

    run(scenario())


def test_with_a_model_captures_queue_extraction_for_the_worker(tmp_path: Path) -> None:
    db = tmp_path / "m.db"

    async def scenario() -> None:
        # The client starts the server with a minimal environment: no $TORTOISE_MODEL reaches it.
        async with server(db, "alice") as plain:
            skipped = await plain.call_tool("memory_capture", {"session_id": "vet", "turns": TURNS})
            assert skipped.structured_content["extraction"]["status"] == "skipped"
            assert "no model configured: start `tortoise mcp` with --model MODEL" in text(skipped)
            assert "Memory(" not in text(skipped)  # the server's terms, not Python's
        async with server(db, "alice", "--model", "openai/gpt-4o-mini") as extracting:
            queued = await extracting.call_tool("memory_capture", {"session_id": "walk", "turns": [
                {"role": "user", "content": "Biscuit walks 5 km every morning.", "id": "u2"}]})
            assert queued.structured_content["extraction"]["status"] == "queued"
            assert "extraction queued" in text(queued)

    run(scenario())
    from tortoise_sdk import Memory

    with Memory(str(db), namespace="alice") as mem:
        assert [j.session_id for j in mem.store.jobs("alice")] == ["walk"]  # what `tortoise worker` runs


# -- hostile requests (issue 24) ------------------------------------------------------------------------

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}

#: (id, a request line as a client might send it, what the answer must hold)
RAW = [
    (1, '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}', "params must be an object"),
    (2, '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_search", '
        '"arguments": {"query": "\\ud800"}}}', "lone surrogate"),
    (3, '{"jsonrpc": "2.0", "id": "x", "method": "tools/list", "params": 5}', "params must be an object"),
    (4, '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "memory_search", '
        '"arguments": {"query": "kayak", "namespace": "bob"}}}', "unknown argument(s) 'namespace'"),
    (5, '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "memory_search", '
        '"arguments": {"query": "kayak", "k": 1000}}}', "memory_search: k: Input should be less than or equal to 100"),
    # Reviewer: a line that is not JSON (cut short, a trailing comma) was never answered.
    (6, '{"jsonrpc": "2.0", "id": 6, "method": "tools/list"', "the line is not valid JSON"),
    (7, '{"jsonrpc": "2.0", "id": "y", "method": "tools/list",}', "the line is not valid JSON"),
]


def test_every_request_with_an_id_is_answered_in_one_line(tmp_path: Path) -> None:
    """The SDK's transport dropped what it could not parse: the client waited for its timeout."""
    import json
    import subprocess

    lines = [json.dumps(INIT), '{"jsonrpc": "2.0", "method": "notifications/initialized"}', *(r[1] for r in RAW)]
    import os
    import select
    import time

    proc = subprocess.Popen([TORTOISE, "mcp", "--db", str(tmp_path / "m.db")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    answers: dict[Any, str] = {}
    received = b""
    try:
        proc.stdin.write(("\n".join(lines) + "\n").encode())
        proc.stdin.flush()
        deadline = time.monotonic() + 60  # a dropped request is never answered: stop waiting at some point
        while len(answers) < len(RAW) + 1 and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 1)[0]:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                received += chunk
                *done, received = received.split(b"\n")
                answers.update((json.loads(line).get("id"), line.decode()) for line in done if line.strip())
    finally:
        proc.kill()
        proc.wait(timeout=30)
    by_id = {1: 1, 2: 2, 3: "x", 4: 4, 5: 5, 6: 6, 7: "y"}
    for n, _, expected in RAW:
        assert by_id[n] in answers, f"request {by_id[n]!r} was never answered"
        answer = answers[by_id[n]]
        assert expected in answer and "errors.pydantic.dev" not in answer and "input_value" not in answer, answer


def test_tools_say_what_they_do_and_the_server_its_version(tmp_path: Path) -> None:
    from tortoise_sdk import __version__

    async def scenario() -> None:
        async with server(tmp_path / "m.db", "alice") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert client.server_info is not None and client.server_info.version == __version__
            hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint)
                     for name, t in tools.items() if t.annotations is not None}
            assert hints == {name: (name != "memory_capture", False) for name in TOOLS}
    run(scenario())


def test_a_store_failure_is_a_tool_error_in_one_line(tmp_path: Path) -> None:
    """Reviewer: with the database gone (PostgreSQL's backends terminated) a tool answered only "Error executing
    tool memory_search" and the server printed a rich traceback; the store's own message says what to do."""
    db = tmp_path / "m.db"

    async def scenario() -> None:
        async with server(db, "alice") as client:
            assert not (await client.call_tool("memory_capture", {"session_id": "vet", "turns": TURNS})).is_error
            db.unlink()  # the file this server opened is gone: every call is refused, nothing mixed
            found = await client.call_tool("memory_search", {"query": "salmon kibble"})
            assert found.is_error and "\n" not in text(found)
            assert "DatabaseReplaced: " in text(found) and "open it again" in text(found)

    run(scenario())


def test_every_listed_session_resource_reads_back_and_capture_is_not_called_idempotent(tmp_path: Path) -> None:
    """Reviewer: a session id with a space, '?', '#' or '/' was listed as a URI that could not be read, and one with
    '%2F' read another session; memory_capture was annotated idempotent though an append sent twice stores twice."""
    ids = ["chat 42?x#y", "sess%2Fenc", "a/b", "café"]

    async def scenario() -> None:
        async with server(tmp_path / "m.db", "alice") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["memory_capture"].annotations.idempotent_hint is False
            for sid in ids:
                await client.call_tool("memory_capture", {"session_id": sid, "turns": [
                    {"role": "user", "content": f"turn of {sid}"}]})
            listed = [str(r.uri) for r in (await client.list_resources()).resources if str(r.uri) != "tortoise://sessions"]
            assert len(listed) == len(ids)
            read = set()
            for uri in listed:
                contents = (await client.read_resource(uri)).contents[0].text
                read.add(contents.removeprefix("#0 user: turn of "))
            assert read == set(ids)

    run(scenario())


def test_a_live_capture_is_dated_and_a_replay_says_it_stored_nothing(tmp_path: Path) -> None:
    """A user's: memory_capture with only session_id and turns left the conversation undated, so every block showed
    it as ``(undated, user)``; and a retry with the same idempotency key said "stored 1 new turn(s) of 1 ...
    (replayed)" though it stored nothing."""
    from datetime import datetime, timedelta, timezone

    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.mcp_server import build_server

    said = [{"role": "user", "content": "My greyhound Biscuit only eats salmon kibble."}]
    with Memory(str(tmp_path / "m.db"), namespace="n") as mem:
        async def scenario() -> None:
            async with Client(build_server(mem)) as client:
                first = await client.call_tool("memory_capture", {"session_id": "live", "turns": said,
                                                                  "idempotency_key": "k1"})
                assert text(first).startswith("stored 1 new turn(s) of 1 in session live")
                again = await client.call_tool("memory_capture", {"session_id": "live", "turns": said,
                                                                  "idempotency_key": "k1"})
                assert again.structured_content["replayed"] is True
                assert text(again).startswith("replayed: nothing new stored (the first call with this idempotency "
                                              "key stored 1 new turn(s) of 1 in session live)")
                block = (await client.call_tool("memory_context", {"query": "What does Biscuit eat?"})).structured_content
                assert "undated" not in block["block"] and "salmon kibble" in block["block"]
                # A date the client gives, or its turns' timestamps, still date the conversation.
                await client.call_tool("memory_capture", {"session_id": "old", "turns": said,
                                                          "session_date": "2024-03-18T10:00:00"})
                await client.call_tool("memory_capture", {"session_id": "stamped", "turns": [
                    {**said[0], "timestamp": "2023-05-01T09:00:00"}]})

        run(scenario())
        dates = {s.session_id: s.session_date for s in mem.sessions()}
        assert datetime.now(timezone.utc) - datetime.fromisoformat(dates["live"]) < timedelta(minutes=5)
        assert (dates["old"][:10], dates["stamped"][:10]) == ("2024-03-18", "2023-05-01")
        assert len(mem.turns("live")) == 1
        # Memory.capture itself still leaves an import undated unless told the conversation is live.
        assert mem.capture("import", said).session_id == "import"
        assert {s.session_id: s.session_date for s in mem.sessions()}["import"] is None
