"""A fast leave-one-out dev loop for a new reflex method: seconds to minutes instead of ``--loo``'s quarter hour.

Each fold's constants and ranker penalty are not chosen again: they are read from the last
``bench_reflex_recall.py --loo`` record (docs/figures/bench_reflex_recall-loo.md, its "chosen" lines),
which chose them on the three train conversations; the methods tried over them (category instances,
the turn two after a question, the ranker's gathering weights...) keep their shipped values in
``tuning``, so the base is the shipped method. The ranker is learnt on the three with them,
then a method's constants (``--method``, each list's first value is off) are chosen on the three by
coordinate ascent over that ranker, the ranker learnt again with them, and the fold read once on the
fourth. It prints each fold, the mean of the folds and multi-hop. Not a record: a method that holds
here is then measured by ``--loo`` (add its row there), which chooses everything afresh.

Usage::

    .venv/bin/python benchmarks/dev_reflex_loo.py                      # the shipped method, held out
    .venv/bin/python benchmarks/dev_reflex_loo.py --method '{"SECOND_HOP": [0.0, 0.3, 0.6, 1.0]}'
    .venv/bin/python benchmarks/dev_reflex_loo.py --fixed '{"CANDIDATES": 64}'   # set on every fold
    .venv/bin/python benchmarks/dev_reflex_loo.py --where

``--lambdamart TREES:LEAVES`` also reads each fold with the ranker's linear model replaced by LightGBM's
LambdaMART (``pip install lightgbm``; not a dependency), trained on the same three conversations' candidate
pools, seeded and deterministic: the issue's other family of learnt rankers, beside the linear one fold by fold.

``--where`` also says, held out, where each evidence turn of the base ends: in the block's
five, in the candidate pool below them, or outside the pool (its stemmed words sharing one with the
question's, or none: then no word-level method reaches it except through a neighbour), by category.

The data (CC BY-NC 4.0) is read from ../shared/data/locomo and never copied into the repo.
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_reflex_recall as b  # noqa: E402
import train_reflex_ranker as trr  # noqa: E402
from locomo import SKIP_REASON, load_sessions, locomo_files  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.reflex import ranker  # noqa: E402
from tortoise_sdk.search import STOP_WORDS, query_terms  # noqa: E402

#: Where an evidence turn ends (``--where``), in the order printed.
PLACES = ("block", "pool", "outside, shares a word", "outside, no word shared")

RECORD = ROOT / "docs" / "figures" / "bench_reflex_recall-loo.md"
_CHOSEN = re.compile(r"without (\S+): .*?\(l2 \(([\d.e-]+), .*?; chosen (\{.*\})$")


def recorded() -> dict[str, tuple[dict[str, object], float]]:
    """Each held-out conversation's constants and ranker penalty, as the last --loo record chose them; the
    methods its neutral start switched off (``METHODS_OFF``) are left out, so they read as shipped."""
    out = {}
    for line in RECORD.read_text("utf-8").splitlines():
        m = _CHOSEN.search(line.strip())
        if m:
            chosen = {k: v for k, v in ast.literal_eval(m.group(3)).items() if k not in b.METHODS_OFF}
            out[m.group(1)] = (chosen, float(m.group(2)))
    return out


def _learn(train: list[str], overrides: dict[str, object], l2: float) -> tuple[float, ...]:
    groups = b._groups(train, overrides)
    return tuple(trr.fit([g for s in train for g in groups[s]], l2))


def _fold(job: tuple[str, list[str], str, dict, dict, dict, bool]) -> dict[str, object]:
    db, stems, test, base_of, method, fixed, where, lambdamart = job
    if test not in b._worker:
        b._open(db, stems)
    train = [s for s in stems if s != test]
    chosen, l2 = base_of[test]
    base = {**chosen, **fixed}
    w0 = _learn(train, base, l2)
    out: dict[str, object] = {"test": test, "base": b._score([test], base, w0)}
    if where:
        out["where"] = _where(test, base, w0)
    if lambdamart:
        out["lambdamart"] = _lambdamart(test, train, base, lambdamart)
    if method:
        ov = {**base, **{k: v[0] for k, v in method.items()}}
        best = statistics.fmean(b._score(train, ov, w0))
        for _ in range(b.PASSES):
            moved = False
            for name, values in method.items():
                for v in values:
                    if v != ov[name]:
                        score = statistics.fmean(b._score(train, {**ov, name: v}, w0))
                        if score > best + 1e-9:
                            best, ov, moved = score, {**ov, name: v}, True
            if not moved:
                break
        on = any(ov[k] != v[0] for k, v in method.items())
        out["method"] = b._score([test], ov, _learn(train, ov, l2) if on else w0)
        out["chosen"] = {k: ov[k] for k in method}
    return out


def _lambdamart(test: str, train: list[str], overrides: dict[str, object], spec: str) -> list[float]:
    """Per-question recall@K of ``test`` with the candidates ordered by a LambdaMART model (``spec``: trees and
    leaves, ``100:7``) trained on ``train``'s candidate pools in place of the linear ranker."""
    import lightgbm  # noqa: PLC0415 - optional, for this comparison only
    import numpy as np  # noqa: PLC0415

    trees, leaves = (int(x) for x in spec.split(":"))
    groups = [g for s in train for g in b._groups(train, overrides)[s]]
    data = lightgbm.Dataset(np.vstack([x for x, _ in groups]), np.concatenate([y for _, y in groups]),
                            group=[len(y) for _, y in groups])
    model = lightgbm.train({"objective": "lambdarank", "num_leaves": leaves, "learning_rate": 0.05,
                            "min_data_in_leaf": 20, "deterministic": True, "seed": 25, "num_threads": 1,
                            "verbose": -1}, data, num_boost_round=trees)
    dot = ranker._dot
    ranker._dot = lambda _w, row: float(model.predict(np.asarray([row]))[0])  # type: ignore[assignment]
    try:
        return b._evaluate(test, {**overrides, "RANKER": True}, tuple(0.0 for _ in ranker.FEATURES))
    finally:
        ranker._dot = dot  # type: ignore[assignment]


def _where(stem: str, overrides: dict[str, object], w: tuple[float, ...]) -> list[tuple[str, str]]:
    """``(category, place)`` of each evidence turn of ``stem``'s questions, read with ``overrides`` and the
    learnt weights ``w``: in the block, in the last scoring pass's candidates, or outside them (``PLACES``)."""
    mem, questions = b._worker[stem]  # type: ignore[misc]
    sessions = load_sessions(next(p for p in locomo_files() if p.stem == stem))
    text = {t["id"]: t["content"] for s in sessions for t in s["turns"]}
    names = {part.lower() for s in sessions for t in s["turns"] for part in str(t.get("name", "")).split()}

    def stems_of(words: list[str]) -> set[str]:
        return {x for st in mem.store.analyze(words) for x in st}

    ranker.RECORD = []
    out = []
    try:
        with b.tuned({**overrides, "RANKER": True}, w):
            for q in questions:
                ranker.RECORD.clear()
                block = mem.context([{"role": "user", "content": q.question}], budget=b.K, time_budget_ms=None)
                shown = {p.external_id for p in block.pointers}
                pool = set(ranker.RECORD[-1][0]) if ranker.RECORD else set()
                asked = stems_of([x for x in query_terms(q.question) if x not in STOP_WORDS and x not in names])
                for e in q.evidence:
                    place = (PLACES[0] if e in shown else PLACES[1] if e in pool
                             else PLACES[2] if asked & stems_of(query_terms(text.get(e, ""))) else PLACES[3])
                    out.append((q.category_name, place))
    finally:
        ranker.RECORD = None
    return out


def _print_where(folds: list[dict[str, object]]) -> None:
    every = [x for f in folds for x in f["where"]]  # type: ignore[attr-defined]
    print("\nwhere the evidence turns end, held out (pooled over the folds):")
    print(f"  {'category':12s} {'turns':>6s} " + " ".join(f"{p:>24s}" for p in PLACES))
    for cat in sorted({c for c, _ in every}) + ["all"]:
        places = [p for c, p in every if cat in ("all", c)]
        print(f"  {cat:12s} {len(places):6d} "
              + " ".join(f"{places.count(p):>12d} ({places.count(p) / len(places):4.0%})".rjust(24) for p in PLACES))


def main(method: dict[str, list[object]], fixed: dict[str, object], where: bool = False,
         lambdamart: str | None = None) -> int:
    files = locomo_files()
    if len(files) < 3:
        print(SKIP_REASON if not files else "needs three conversations at least")
        return 0
    stems = [p.stem for p in files]
    base_of = recorded()
    if set(base_of) != set(stems):
        print(f"{RECORD.name} holds folds {sorted(base_of)}, the data {stems}: run --loo first")
        return 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files:
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(load_sessions(path))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            folds = pool.map(_fold, [(db, stems, s, base_of, method, fixed, where, lambdamart) for s in stems], chunksize=1)
        b._open(db, stems)
    cats = {s: [q.category_name for q in b._worker[s][1]] for s in stems}  # type: ignore[index]
    for key in ("base", "method", "lambdamart"):
        if key not in folds[0]:
            continue
        per = [statistics.fmean(f[key]) for f in folds]  # type: ignore[arg-type]
        hop = [[x for x, c in zip(f[key], cats[f["test"]]) if c == "multi-hop"] for f in folds]  # type: ignore[arg-type,index]
        print(f"{key:10s} " + " ".join(f"{f['test']} {v:.3f}" for f, v in zip(folds, per))
              + f" | mean {statistics.fmean(per):.3f} | multi-hop {statistics.fmean(x for h in hop for x in h):.3f} ("
              + " ".join(f"{statistics.fmean(h):.3f}" for h in hop) + ")")
    if where:
        _print_where(folds)
    for f in folds:
        if "chosen" in f:
            print(f"  {f['test']} held out: chosen on the three {f['chosen']}")
    print(f"{time.perf_counter() - t0:.0f} s (not a record: constants and penalties from {RECORD.name})")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="{}", help="JSON: tuning constants to choose on the three, first value off")
    ap.add_argument("--fixed", default="{}", help="JSON: tuning constants set on every fold")
    ap.add_argument("--where", action="store_true", help="also say where each evidence turn ends, by category")
    ap.add_argument("--lambdamart", metavar="TREES:LEAVES", help="also read each fold with LightGBM's LambdaMART "
                                                                  "in place of the linear ranker (needs lightgbm)")
    args = ap.parse_args()
    if args.lambdamart:
        try:
            import lightgbm  # noqa: F401, PLC0415
        except ImportError:
            ap.error("--lambdamart needs lightgbm, which is not a dependency: pip install lightgbm")
        if not re.fullmatch(r"\d+:\d+", args.lambdamart):
            ap.error("--lambdamart takes TREES:LEAVES, e.g. 100:7")
    sys.exit(main(json.loads(args.method), json.loads(args.fixed), args.where, args.lambdamart))
