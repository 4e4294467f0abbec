"""A fast leave-one-out dev loop for a new reflex method: seconds to minutes instead of ``--loo``'s quarter hour.

Each fold's constants and ranker penalty are not chosen again: they are read from the last
``bench_reflex_recall.py --loo`` record (docs/figures/bench_reflex_recall-loo.md, its "chosen" lines),
which chose them on the three train conversations. The ranker is learnt on the three with them,
then a method's constants (``--method``, each list's first value is off) are chosen on the three by
coordinate ascent over that ranker, the ranker learnt again with them, and the fold read once on the
fourth. It prints each fold, the mean of the folds and multi-hop. Not a record: a method that holds
here is then measured by ``--loo`` (add its row there), which chooses everything afresh.

Usage::

    .venv/bin/python benchmarks/dev_reflex_loo.py                      # the record's row, as a check
    .venv/bin/python benchmarks/dev_reflex_loo.py --method '{"SECOND_HOP": [0.0, 0.3, 0.6, 1.0]}'
    .venv/bin/python benchmarks/dev_reflex_loo.py --fixed '{"CANDIDATES": 64}'   # set on every fold

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

RECORD = ROOT / "docs" / "figures" / "bench_reflex_recall-loo.md"
_CHOSEN = re.compile(r"without (\S+): .*?\(l2 \(([\d.e-]+), .*?; chosen (\{.*\})$")


def recorded() -> dict[str, tuple[dict[str, object], float]]:
    """Each held-out conversation's constants and ranker penalty, as the last --loo record chose them."""
    out = {}
    for line in RECORD.read_text("utf-8").splitlines():
        m = _CHOSEN.search(line.strip())
        if m:
            out[m.group(1)] = (ast.literal_eval(m.group(3)), float(m.group(2)))
    return out


def _learn(train: list[str], overrides: dict[str, object], l2: float) -> tuple[float, ...]:
    groups = b._groups(train, overrides)
    return tuple(trr.fit([g for s in train for g in groups[s]], l2))


def _fold(job: tuple[str, list[str], str, dict, dict, dict]) -> dict[str, object]:
    db, stems, test, base_of, method, fixed = job
    if test not in b._worker:
        b._open(db, stems)
    train = [s for s in stems if s != test]
    chosen, l2 = base_of[test]
    base = {**chosen, **fixed}
    w0 = _learn(train, base, l2)
    out: dict[str, object] = {"test": test, "base": b._score([test], base, w0)}
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


def main(method: dict[str, list[object]], fixed: dict[str, object]) -> int:
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
            folds = pool.map(_fold, [(db, stems, s, base_of, method, fixed) for s in stems], chunksize=1)
        b._open(db, stems)
    cats = {s: [q.category_name for q in b._worker[s][1]] for s in stems}  # type: ignore[index]
    for key in ("base", "method"):
        if key not in folds[0]:
            continue
        per = [statistics.fmean(f[key]) for f in folds]  # type: ignore[arg-type]
        hop = [[x for x, c in zip(f[key], cats[f["test"]]) if c == "multi-hop"] for f in folds]  # type: ignore[arg-type,index]
        print(f"{key:7s} " + " ".join(f"{f['test']} {v:.3f}" for f, v in zip(folds, per))
              + f" | mean {statistics.fmean(per):.3f} | multi-hop {statistics.fmean(x for h in hop for x in h):.3f} ("
              + " ".join(f"{statistics.fmean(h):.3f}" for h in hop) + ")")
    for f in folds:
        if "chosen" in f:
            print(f"  {f['test']} held out: chosen on the three {f['chosen']}")
    print(f"{time.perf_counter() - t0:.0f} s (not a record: constants and penalties from {RECORD.name})")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="{}", help="JSON: tuning constants to choose on the three, first value off")
    ap.add_argument("--fixed", default="{}", help="JSON: tuning constants set on every fold")
    args = ap.parse_args()
    sys.exit(main(json.loads(args.method), json.loads(args.fixed)))
