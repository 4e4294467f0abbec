"""Train the reflex's learnt ranker (tortoise_sdk/reflex/ranker.json) on LoCoMo; a rerun writes the same file.

Every conversation is captured, each question (category 5 excluded) asked as a one-turn window
with the shipped constants, and the features of every turn candidate recorded
(``ranker.RECORD``). A candidate is relevant when its dia_id is evidence of the question. The
model is linear, fitted on pairs (relevant, not relevant) of one question by logistic loss with an
L2 penalty, each question weighing the same, by Newton's method from zero: no randomness, so the
same data give the same weights. ``benchmarks/bench_reflex_recall.py --loo`` measures it held out
(trained on three conversations, read on the fourth).

Usage::

    .venv/bin/python benchmarks/train_reflex_ranker.py [--check]

``--check`` only compares what it would write with the shipped file (exit 1 when they differ).
The data (CC BY-NC 4.0) is read from ../shared/data/locomo and never copied into the repo.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from locomo import SKIP_REASON, load_questions, load_sessions, locomo_files  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.reflex import ranker, tuning  # noqa: E402

K = 5
L2 = 1e-3       # penalty on the weights, per question: what bench_reflex_recall.py --ship chose on all four (--check says)
ITERATIONS = 30  # Newton steps (it converges in under 15)
OUT = ROOT / "tortoise_sdk" / "reflex" / "ranker.json"

Group = tuple[np.ndarray, np.ndarray]  # one question's feature rows and their labels (1 = evidence)


def record(mem: Memory, questions: Sequence[object]) -> list[Group]:
    """One group per question whose candidates hold both evidence and other turns.

    The reflex orders its turns in the hand-set order while recording: a second scoring pass (the
    second hop) reads the first pass's top turns, and with the learnt order those would depend on the
    weights shipped before (trained on every conversation, a held-out one included)."""
    groups: list[Group] = []
    ranker.RECORD = []
    learnt, tuning.RANKER = tuning.RANKER, False
    try:
        for q in questions:
            ranker.RECORD.clear()
            mem.context([{"role": "user", "content": q.question}], budget=K, time_budget_ms=None)  # type: ignore[attr-defined]
            if not ranker.RECORD:
                continue
            keys, rows = ranker.RECORD[-1]  # the last scoring pass (the one that orders the block)
            y = np.array([k in q.evidence for k in keys], dtype=float)  # type: ignore[attr-defined]
            if 0 < y.sum() < len(y):
                groups.append((np.array(rows, dtype=float), y))
    finally:
        ranker.RECORD = None
        tuning.RANKER = learnt
    return groups


def fit(groups: Sequence[Group], l2: float = L2) -> list[float]:
    """Pairwise logistic regression: every (evidence, other) pair of a question, each question weighing 1."""
    diffs, wts = [], []
    for x, y in groups:
        pos, neg = x[y == 1], x[y == 0]
        d = (pos[:, None, :] - neg[None, :, :]).reshape(-1, x.shape[1])
        diffs.append(d)
        wts.append(np.full(len(d), 1.0 / len(d)))
    d, sw = np.vstack(diffs), np.concatenate(wts)
    w = np.zeros(d.shape[1])
    reg = l2 * len(groups)
    for _ in range(ITERATIONS):
        p = 1 / (1 + np.exp(-(d @ w)))
        grad = -(d * (sw * (1 - p))[:, None]).sum(0) + 2 * reg * w
        hess = (d * (sw * p * (1 - p))[:, None]).T @ d + 2 * reg * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return [round(float(v), 6) for v in w]


def groups_of(stems: Sequence[str], db: str) -> list[Group]:
    files = {p.stem: p for p in locomo_files()}
    out: list[Group] = []
    for stem in stems:
        with Memory(db, namespace=stem) as mem:
            out += record(mem, load_questions(files[stem]))
    return out


def main(check: bool) -> int:
    files = locomo_files()
    if not files:
        print(SKIP_REASON)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files:
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(load_sessions(path))
        groups = groups_of([p.stem for p in files], db)
    w = fit(groups)
    doc = {"trained_on": [p.stem for p in files], "questions": len(groups), "loss": "pairwise logistic",
           "l2": L2, "weights": dict(zip(ranker.FEATURES, w))}
    text = json.dumps(doc, indent=2) + "\n"
    if check:
        same = OUT.read_text("utf-8") == text
        print("ranker.json is what this script writes" if same else "ranker.json differs: rerun without --check")
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file, write nothing")
    sys.exit(main(ap.parse_args().check))
