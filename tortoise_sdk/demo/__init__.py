"""``tortoise demo``: the main job end to end on the embedded store, with no model or network."""

from __future__ import annotations

import argparse
import json
from importlib import resources

__all__ = ("load_demo_sessions", "run_demo")


def load_demo_sessions() -> list[dict]:
    """The bundled sample conversation: two sessions between Maya and an assistant (written for the demo)."""
    text = resources.files(__package__).joinpath("sessions.json").read_text(encoding="utf-8")
    return json.loads(text)


def run_demo(args: argparse.Namespace) -> int:
    """Capture the sample sessions into namespace ``demo`` (idempotently) and show search results."""
    from ..memory import Memory

    namespace = "demo" if args.namespace == "default" else args.namespace
    with Memory(args.db, namespace=namespace) as mem:
        print(f"store: {mem.store.url}  namespace: {namespace}")
        for s in load_demo_sessions():
            r = mem.capture(s["session_id"], s["turns"], session_date=s["date"],
                            idempotency_key=f"demo:{s['session_id']}")
            state = "replayed (already captured)" if r.replayed else f"{r.turns_stored} turns stored"
            print(f"captured {s['session_id']} ({s['date']}): {state}")
        for query in ("where does Maya work now?", "what is the dog called"):
            print(f"\nsearch: {query}")
            for h in mem.search(query, k=3):
                print(f"  {h.score:6.2f}  [{h.session_id}#{h.index}] {h.name or h.role}: {h.content}")
    return 0
