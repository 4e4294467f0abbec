"""``AsyncMemory`` gives what ``Memory`` gives, on both engines, without blocking the event loop;
and the LangChain middleware's async hooks run off the loop too."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from tortoise_sdk import AsyncMemory, Memory
from tortoise_sdk.errors import CaptureConflict, IdempotencyConflict, TortoiseError


def pair(store):
    """A sync and an async memory on the same store, each in a namespace of its own."""
    return (Memory(store=store, namespace=f"s_{uuid.uuid4().hex[:10]}"),
            AsyncMemory(Memory(store=store, namespace=f"a_{uuid.uuid4().hex[:10]}")))


def exchange(u, a):
    return [{"role": "user", "content": u}, {"role": "assistant", "content": a}]


def _strip(receipt):
    return receipt.model_dump(exclude={"receipt_id", "namespace", "turn_ids"})


def test_async_and_sync_give_the_same_results(store):
    sync, amem = pair(store)

    async def run_async():
        out = [await amem.capture("chat", exchange("Hi", "Hello")),
               await amem.append("chat", exchange("My dog Biscuit is a beagle", "Nice")),
               await amem.append("chat", exchange("My dog Biscuit is a beagle", "Nice"), idempotency_key="k"),
               await amem.append("chat", exchange("My dog Biscuit is a beagle", "Nice"), idempotency_key="k")]
        hits = await amem.search("beagle")
        block = await amem.context([{"role": "user", "content": "what breed is Biscuit?"}], time_budget_ms=None)
        fact = await amem.remember("Biscuit is a beagle", about=["Biscuit"])
        new = await amem.correct_memory(fact.id, "Biscuit is a beagle cross")
        history = await amem.memory_history(fact.id)
        found = await amem.search_memories("Biscuit")
        return out, hits, block, history, found, new, await amem.turns("chat")

    a_out, a_hits, a_block, a_history, a_found, a_new, a_turns = asyncio.run(run_async())
    s_out = [sync.capture("chat", exchange("Hi", "Hello")),
             sync.append("chat", exchange("My dog Biscuit is a beagle", "Nice")),
             sync.append("chat", exchange("My dog Biscuit is a beagle", "Nice"), idempotency_key="k2"),
             sync.append("chat", exchange("My dog Biscuit is a beagle", "Nice"), idempotency_key="k2")]
    s_block = sync.context([{"role": "user", "content": "what breed is Biscuit?"}])  # where the async side asked
    fact = sync.remember("Biscuit is a beagle", about=["Biscuit"])
    sync.correct_memory(fact.id, "Biscuit is a beagle cross")
    assert [r.replayed for r in a_out] == [r.replayed for r in s_out] == [False, False, False, True]
    assert [[w.code for w in r.warnings] for r in a_out] == [[w.code for w in r.warnings] for r in s_out]
    assert [r.turns_stored for r in a_out] == [r.turns_stored for r in s_out]
    assert [(h.role, h.content) for h in a_turns] == [(h.role, h.content) for h in sync.turns("chat")]
    assert [h.content for h in a_hits] == [h.content for h in sync.search("beagle")]
    assert a_block.block.count("ref:") == s_block.block.count("ref:")
    assert [(m.content, m.status) for m in a_history] == [(m.content, m.status)
                                                          for m in sync.memory_history(fact.id)]
    assert [m.id for m in a_found] == [a_new.id]


def test_async_errors_are_the_sync_errors(store):
    _, amem = pair(store)

    async def run():
        await amem.append("chat", exchange("a", "b"), idempotency_key="k")
        with pytest.raises(IdempotencyConflict):
            await amem.append("chat", exchange("a", "c"), idempotency_key="k")
        with pytest.raises(CaptureConflict):
            await amem.capture("chat", exchange("x", "y"))

    asyncio.run(run())


def test_calls_run_off_the_event_loop_thread(tmp_path, monkeypatch):
    amem = AsyncMemory(str(tmp_path / "m.db"), namespace="t")
    seen = []
    real = amem.sync.context
    monkeypatch.setattr(amem.sync, "context", lambda *a, **k: (seen.append(threading.get_ident()), real(*a, **k))[1])

    async def run():
        await amem.context(["hello"])
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert seen and seen[0] != loop_thread
    asyncio.run(amem.close())


def test_wrapping_a_memory_and_arguments_are_exclusive(tmp_path):
    mem = Memory(str(tmp_path / "m.db"))
    with pytest.raises(TypeError) as info:  # and a TortoiseError, naming the argument (reviewer: a plain TypeError)
        AsyncMemory(mem, namespace="x")
    assert isinstance(info.value, TortoiseError) and info.value.field == "namespace"
    wrapped = AsyncMemory(mem)
    assert wrapped.sync is mem and wrapped.namespace == "default"
    asyncio.run(wrapped.close())


def test_langchain_async_hooks_do_not_block_the_event_loop(mem, monkeypatch):
    """On main the async middleware called the store on the loop's own thread."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from tortoise_sdk.adapters.langchain import MemoryMiddleware

    threads: dict[str, int] = {}
    real_context, real_capture = mem.context, mem.capture
    monkeypatch.setattr(mem, "context", lambda *a, **k: (threads.setdefault("context", threading.get_ident()),
                                                         real_context(*a, **k))[1])
    monkeypatch.setattr(mem, "capture", lambda *a, **k: (threads.setdefault("capture", threading.get_ident()),
                                                         real_capture(*a, **k))[1])
    agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage(content="Biscuit.")])), [],
                         middleware=[MemoryMiddleware(mem, "chat-async", extract=False)])

    async def run():
        await agent.ainvoke({"messages": [HumanMessage("what is my dog called?")]})
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert set(threads) == {"context", "capture"}
    assert loop_thread not in threads.values()
    assert len(mem.turns("chat-async")) == 2


@pytest.mark.parametrize("turns", ["not a list", None, [{"role": "robot", "content": "x"}], []])
def test_bad_input_is_refused_alike(tmp_path, turns):
    from tortoise_sdk.errors import InvalidInput

    amem = AsyncMemory(str(tmp_path / "m.db"))
    for verb in ("capture", "append"):
        with pytest.raises(InvalidInput) as sync_err:
            getattr(amem.sync, verb)("s", turns)
        with pytest.raises(InvalidInput) as async_err:
            asyncio.run(getattr(amem, verb)("s", turns))
        assert (type(async_err.value), str(async_err.value)) == (type(sync_err.value), str(sync_err.value))
    asyncio.run(amem.close())


def test_every_public_memory_verb_has_an_async_form():
    """A verb added to ``Memory`` and forgotten here would leave async hosts on ``.sync`` without a word."""
    import inspect

    from tortoise_sdk import AsyncMemory, Memory
    from tortoise_sdk.async_memory import SYNC_ONLY

    verbs = {n for n, f in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")} - SYNC_ONLY
    missing = sorted(v for v in verbs if not inspect.iscoroutinefunction(getattr(AsyncMemory, v, None)))
    assert not missing, f"AsyncMemory lacks {missing} (add them, or list them as sync-only in its docstring)"


def test_every_async_verb_takes_the_sync_verb_s_arguments():
    """A reviewer's: AsyncMemory.capture_many had no progress=, though the docs say the verbs are the same."""
    import inspect

    from tortoise_sdk import AsyncMemory, Memory
    from tortoise_sdk.async_memory import SYNC_ONLY

    verbs = {n for n, f in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")} - SYNC_ONLY
    def named(fn: object) -> set[str]:
        return {n for n, p in inspect.signature(fn).parameters.items()  # type: ignore[arg-type]
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    def forwards_all(fn: object) -> bool:
        return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())  # type: ignore[arg-type]

    lacking = {v: sorted(named(getattr(Memory, v)) - named(getattr(AsyncMemory, v))) for v in sorted(verbs)
               if not forwards_all(getattr(AsyncMemory, v))}
    assert {v: p for v, p in lacking.items() if p} == {}
    assert {n for n, v in vars(Memory).items() if isinstance(v, property)} <= {
        n for n, v in vars(AsyncMemory).items() if isinstance(v, property)}
    am = AsyncMemory(":memory:", model="openai/x")
    assert (am.model, am.embedder_model) == ("openai/x", None)
    am.sync.close()


@pytest.mark.reflex_time_budget  # Memory.context as shipped, not the tests' unbudgeted wrapper
def test_every_async_verb_is_written_out_with_the_sync_verb_s_parameters():
    """A user's type checker reads the class body: sixteen verbs attached with setattr (``await amem.stats()``,
    ``amem.tombstones()``, ``amem.within(2.0)``) were 'AsyncMemory has no attribute', and ``help()`` showed them and
    ``context`` as ``(*args, **kwargs)``, so a misspelt ``held_form=`` was found only by the worker thread."""
    import ast
    import inspect

    from tortoise_sdk import AsyncMemory, Memory, async_memory

    tree = ast.parse(inspect.getsource(async_memory))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AsyncMemory").body
    written = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    verbs = {n for n, _ in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")}
    assert sorted(verbs - written) == []

    def params(fn: object) -> list[tuple[str, object]]:
        return [(n, p.kind) for n, p in inspect.signature(fn).parameters.items()]  # type: ignore[arg-type]

    assert {v: params(getattr(AsyncMemory, v)) for v in sorted(verbs)} == {
        v: params(getattr(Memory, v)) for v in sorted(verbs)}


def test_forwarded_verbs_reach_the_wrapped_memory(tmp_path):
    import asyncio

    from tortoise_sdk import AsyncMemory

    async def go():
        async with AsyncMemory(str(tmp_path / "a.db"), namespace="n") as mem:
            await mem.capture("s", [{"role": "user", "content": "hello there"}])
            assert [t.content for t in await mem.tombstones()] == []
            assert mem.check_capture("s", [{"role": "user", "content": "x"}]) is None
            assert mem.extraction_paused() is None
            return (await mem.graph()).number_of_nodes()

    assert asyncio.run(go()) > 0


def test_cancelling_run_worker_stops_the_worker_and_the_program_ends(tmp_path):
    # Reviewer: the cancelled task's thread went on, then logged "store unavailable ... closed" every few
    # seconds after close() and asyncio.run never returned.
    import time

    async def main() -> None:
        amem = AsyncMemory(str(tmp_path / "w.db"), model="openai/stub-model")
        task = asyncio.create_task(amem.run_worker(poll_s=0.1))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await amem.close()

    ended: list[float] = []
    started = time.monotonic()
    runner = threading.Thread(target=lambda: (asyncio.run(main()), ended.append(time.monotonic() - started)),
                              daemon=True)
    runner.start()
    runner.join(30)
    assert ended and ended[0] < 10


def test_a_worker_whose_store_was_closed_stops(tmp_path):
    from tortoise_sdk.errors import StoreClosed

    mem = Memory(str(tmp_path / "w.db"), model="openai/stub-model")
    mem.close()
    raised: list[BaseException] = []

    def work() -> None:
        try:
            mem.run_worker(poll_s=0.05)
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=work, daemon=True)  # the old loop waited it out forever: fail, do not hang
    worker.start()
    worker.join(10)
    assert raised and isinstance(raised[0], StoreClosed)
