"""A hand-written chat loop with long-term memory, runnable offline.

The "model" here is a stand-in function (no network, no API key): it answers from the
memory block it is shown (the user's own words first), so you can see what a real model
would receive and that the block holds the answer: asked "where am I working these days?",
it quotes the later session (Helix Health), which the reflex puts before the older job. Swap
``fake_model`` for your client call, e.g. ``litellm.completion(model=..., messages=...)``.

    python examples/custom_loop.py [--db memory.db]

Each run is a new conversation. On the same ``--db`` a second run stores its exchanges of session
'today' once more (its messages carry no ids, so a repeat cannot be told from a retry); the earlier
sessions are captured with an idempotency key and stored once.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from tortoise_sdk import Memory
from tortoise_sdk.adapters.loop import MemorySession
from tortoise_sdk.demo import load_demo_sessions


def fake_model(messages: list[dict]) -> str:
    """Answer from the memory block, as a model would: what the user said first, else the first remembered line."""
    memory = next((m["content"] for m in messages
                   if m["role"] == "system" and m["content"].startswith("[tortoise memory]")), None)
    if memory is None:
        return "I don't remember anything about that."
    lines = re.findall(r'^\d+\. \(([^,)]*), ([^)]*)\) "(.*)" ref:', memory, re.M)  # (date, speaker) "text"
    said = [(date, text) for date, who, text in lines if who != "assistant"] or [(d, t) for d, _, t in lines]
    if not said:
        return "I remember something related, but not in your words."
    date, text = said[0]
    return f'On {date} you told me: "{text}"'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=str(Path(tempfile.mkdtemp()) / "example.db"))
    args = ap.parse_args()

    with Memory(args.db, namespace="example") as mem:
        for s in load_demo_sessions():  # earlier conversations, already captured
            mem.capture(s["session_id"], s["turns"], session_date=s["date"], idempotency_key=f"ex:{s['session_id']}",
                        extract=False)
        session = MemorySession(mem, "today", extract=False)
        history = [{"role": "system", "content": "You are Maya's assistant."}]
        for text in ["Hi!", "Remind me, what is my dog called?", "And where am I working these days?"]:
            history.append({"role": "user", "content": text})
            sent = session.before_turn(history)  # history + the memory block as a system message
            reply = fake_model(sent)
            history.append({"role": "assistant", "content": reply})
            session.after_turn(text, reply)
            print(f"user: {text}")
            print(session.last_block.block or "(no memory block: nothing relevant)")
            print(f"assistant: {reply}\n")
        print(f"captured {len(mem.turns('today'))} turns of session 'today' in {args.db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
