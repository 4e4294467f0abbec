"""``tortoise demo``: the main job end to end on the embedded store, with no model or network."""

from __future__ import annotations

import argparse
import json
from importlib import resources

__all__ = ("DEMO_MODEL", "demo_next_command", "load_demo_sessions", "load_recorded_extraction", "run_demo")

#: The model name the demo's recorded replies are served under (no provider is ever called).
DEMO_MODEL = "openai/tortoise-demo-recorded"


def load_demo_sessions() -> list[dict]:
    """The bundled sample conversation: two sessions between Maya and an assistant (written for the demo)."""
    text = resources.files(__package__).joinpath("sessions.json").read_text(encoding="utf-8")
    return json.loads(text)


def load_recorded_extraction() -> dict:
    """The recorded model replies for extracting the demo sessions (stub-script format)."""
    text = resources.files(__package__).joinpath("recorded_extraction.json").read_text(encoding="utf-8")
    return json.loads(text)


def run_demo(args: argparse.Namespace) -> int:
    """Capture the sample sessions into namespace ``demo`` (idempotently), extract them, show search and memories.

    Extraction runs the real pipeline over HTTP through litellm, against a local
    server that replays recorded replies: no provider, no network, no key.
    """
    from ..memory import Memory
    from .replay import ReplayServer

    namespace = "demo" if args.namespace == "default" else args.namespace
    with ReplayServer(load_recorded_extraction()) as replay, Memory(
        args.db, namespace=namespace, model=DEMO_MODEL, api_base=replay.base_url, api_key="recorded-replies",
        model_settings={"max_attempts": 1},
    ) as mem:
        print(f"store: {mem.store.url}  namespace: {namespace}")
        print(f"model: RECORDED replies served on {replay.base_url} "
              "(tortoise_sdk/demo/recorded_extraction.json); no provider is called")
        for s in load_demo_sessions():
            r = mem.capture(s["session_id"], s["turns"], session_date=s["date"],
                            idempotency_key=f"demo:{s['session_id']}")
            state = "replayed (already captured)" if r.replayed else f"{r.turns_stored} turns stored"
            print(f"captured {s['session_id']} ({s['date']}): {state}")
            e = r.extraction
            if e is not None and not r.replayed:
                outcomes = ", ".join(f"{k} {v}" for k, v in sorted(e.outcomes.items())) or "nothing written"
                total = e.stages.get("total")
                calls = f", {total.calls} model calls" if total else ""
                print(f"  extraction {e.status}: {outcomes}{calls}" + (f" ({e.reason})" if e.reason else ""))
        print("\nmemories (superseded ones kept as history):")
        for m in mem.memories(include_superseded=True):
            mark = {"live": " ", "superseded": "~", "deleted": "x"}[m.status]
            quote = m.sources[0].quote if m.sources else ""
            print(f"  {mark} [{m.kind}] {m.content}  <- \"{quote}\" ({m.session_id})")
        for query in ("where does Maya work now?", "what is the dog called"):
            print(f"\nsearch: {query}")
            print("  turns, by their own words (no model needed):")
            for h in mem.search(query, k=3):
                print(f"    {h.score:6.2f}  [{h.session_id}#{h.index}] {h.name or h.role}: {h.content}")
            print("  memories, extracted from the turns (they name what the words leave implicit):")
            for m in mem.search_memories(query, k=2):
                print(f"    [{m.kind}] {m.content}  ({m.session_id})")
        next_turn = "Remind me, where do I work now?"
        block = mem.context([{"role": "user", "content": next_turn}])
        print(f"\nnext user turn: {next_turn!r}; the model would also receive ({block.tokens} tokens):")
        print(block.block or f"(no memory block{': ' + block.degraded_reason if block.degraded_reason else ''})")
    print(f"\nnext, try: {demo_next_command(args.db, namespace)}")
    return 0


def demo_next_command(db: str | None, namespace: str) -> str:
    """The command the demo suggests last: a search of what it captured, in its namespace (and database)."""
    import shlex

    words = ["tortoise", "search", "Biscuit", "--namespace", namespace]
    return shlex.join(words + (["--db", db] if db else []))
