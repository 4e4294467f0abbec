"""The reflex's token estimate (``approx_tokens``) beside real tokenizers, and what embedding the turns costs.

Part 1: every LoCoMo question of ``../shared/data/locomo`` (adversarial included) as a one-turn
window, its block at budget 5; each block's text counted by ``reflex.approx_tokens`` and by the
real cl100k and o200k encodings (tiktoken, with the encoding files litellm ships: no download).
It prints the largest and the mean ratio real / estimate: under 1, the estimate over-counts, so a
block it fits also fits the real budget. Then text the estimate can undercount (mixed-case
identifiers, base64, JWT-like tokens, hex digests), generated with a fixed seed: the same ratio
there, whose maximum is how far past the budget a block of such text could go.

Part 2: the LoCoMo turns as stored (captions included), counted with ``litellm.token_counter``,
and the input price of embedding models in litellm's bundled price table (no network): dollars per
million tokens and per 1,000 such turns.

Counts and prices, no timing: the machine's load does not change them. ``--smoke``: one
conversation, 20 questions.

Run: .venv/bin/python benchmarks/bench_tokens.py
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

import figures

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the price table litellm ships, not a download

from locomo import SKIP_REASON, load_questions, load_sessions, locomo_files  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.reflex import approx_tokens  # noqa: E402

# (what the docs call it, litellm's price-table key)
EMBEDDERS = [
    ("openai/text-embedding-3-small", "text-embedding-3-small"),
    ("voyage/voyage-3-lite", "voyage/voyage-3-lite"),
    ("Bedrock Titan v2", "amazon.titan-embed-text-v2:0"),
    ("voyage/voyage-3", "voyage/voyage-3"),
    ("openai/text-embedding-ada-002", "text-embedding-ada-002"),
    ("cohere/embed-english-v3.0", "embed-english-v3.0"),
    ("gemini/text-embedding-004", "text-embedding-004"),
    ("mistral/mistral-embed", "mistral/mistral-embed"),
    ("openai/text-embedding-3-large", "text-embedding-3-large"),
]


def encoders():  # noqa: ANN201
    import litellm

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path(litellm.__file__).parent / "litellm_core_utils" / "tokenizers"))
    import tiktoken

    return {name: tiktoken.get_encoding(name) for name in ("cl100k_base", "o200k_base")}


def hard_text(rng: random.Random, words: list[str]) -> dict[str, list[str]]:
    """Text the estimate can undercount: a kind each, 200 samples, fixed seed; identifiers join real words."""
    def ident() -> str:
        parts = rng.sample(words, rng.randint(2, 4))
        return parts[0] + "".join(p.capitalize() for p in parts[1:])

    def b64(n: int) -> str:
        return base64.b64encode(rng.randbytes(n)).decode()

    def jwt() -> str:
        head = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()).decode().rstrip("=")
        body = base64.urlsafe_b64encode(json.dumps({"sub": str(rng.randrange(10**9)), "iat": rng.randrange(10**10),
                                                    "name": ident()}).encode()).decode().rstrip("=")
        return f"{head}.{body}.{base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip('=')}"

    return {
        "camelCase identifiers of 2-4 words (20 a sample)": [" ".join(ident() for _ in range(20)) for _ in range(200)],
        "base64 (96 random bytes)": [b64(96) for _ in range(200)],
        "JWT-like tokens": [jwt() for _ in range(200)],
        "hex digests (sha256)": [rng.randbytes(32).hex() for _ in range(200)],
    }


def ratios(texts: list[str], enc) -> list[float]:  # noqa: ANN001
    return [len(enc.encode(t)) / approx_tokens(t) for t in texts if approx_tokens(t)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--smoke", action="store_true", help="one conversation, 20 questions, for the tests")
    args = ap.parse_args()
    files = locomo_files()[:1] if args.smoke else locomo_files()
    if not files:
        print(SKIP_REASON)
        return 0
    encs = encoders()
    blocks: list[str] = []
    turns: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files:
            sessions = load_sessions(path)
            turns += [t["content"] for s in sessions for t in s["turns"]]
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(sessions)
                questions = load_questions(path, include_adversarial=True)
                for q in questions[:20] if args.smoke else questions:
                    block = mem.context([{"role": "user", "content": q.question}], budget=5, time_budget_ms=None)
                    if block.block:
                        blocks.append(block.block)
    print("approx_tokens beside real encodings: real / estimate (under 1: the estimate over-counts)")
    print(f"  {'text':<50}{'n':>6}  " + "  ".join(f"{n + ' max':>16}{'mean':>7}" for n in encs))
    rows = {f"LoCoMo blocks, budget 5 ({len(files)} conversations)": blocks,
            **hard_text(random.Random(7), sorted({w.lower() for t in turns for w in t.split()
                                                  if w.isalpha() and w.isascii() and 3 <= len(w) <= 10}))}
    for label, texts in rows.items():
        cells = []
        for enc in encs.values():
            r = ratios(texts, enc)
            cells.append(f"{max(r):>16.2f}{statistics.fmean(r):>7.2f}")
        print(f"  {label:<50}{len(texts):>6}  " + "  ".join(cells))

    import litellm

    mean = statistics.fmean(litellm.token_counter(model="gpt-3.5-turbo", text=t) for t in turns)
    print(f"\nLoCoMo turns as stored (captions included): {len(turns):,} turns, mean {mean:.1f} tokens "
          f"(litellm.token_counter, cl100k); embedding input prices from litellm {_version()}'s price table:")
    print(f"  {'embedder':<34}{'price-table key':<32}{'$ / 1M tokens':>14}{'$ / 1,000 turns':>17}")
    for label, key in EMBEDDERS:
        price = (litellm.model_cost.get(key) or {}).get("input_cost_per_token")
        if price is None:
            print(f"  {label:<34}{key:<32}{'not priced':>14}")
            continue
        print(f"  {label:<34}{key:<32}{price * 1e6:>14.2f}{price * mean * 1000:>17.5f}")
    return 0


def _version() -> str:
    from importlib.metadata import version

    return version("litellm")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
