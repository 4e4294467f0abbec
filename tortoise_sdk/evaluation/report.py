"""The report of ``tortoise eval locomo``: one record per question, the summary, JSON and Markdown files.

The summary is always recomputed from the records, so a resumed run and a run in one go
give the same figures. Sums of tokens and cost are ``None`` as soon as one call in them
did not report its figure (an unknown total is not a smaller total).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .locomo import ADVERSARIAL, CATEGORIES

__all__ = ("REPORT_FORMAT", "CallUsage", "QuestionResult", "percentile", "render_markdown", "summarize",
           "usage_total", "write_atomic")

REPORT_FORMAT = 1


class CallUsage(BaseModel):
    """What one answer or judge call cost, as the provider and litellm reported it."""

    model: str | None = None
    attempts: int = 1
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = Field(default=None, description="From litellm; None when it does not know the price.")


class QuestionResult(BaseModel):
    """One question asked in one mode: the block it got, the answer and the judge's label."""

    mode: str
    conversation_id: str
    index: int = Field(description="Position of the question in the conversation's qa list.")
    category: int
    question: str
    gold: str = Field(description="What the judge compared with (for adversarial questions: not mentioned).")
    evidence: list[str] = Field(default_factory=list, description="LoCoMo's evidence dialogue ids.")
    found: list[str] = Field(default_factory=list, description="Dialogue ids the block's pointers lead to.")
    evidence_recall: float | None = None
    pointers: list[str] = Field(default_factory=list)
    block_tokens: int = 0
    context_ms: float = 0.0
    degraded_reason: str | None = None
    answer: str = ""
    answer_usage: CallUsage | None = Field(default=None, description="None when the answer came from the block.")
    label: Literal["CORRECT", "WRONG"] | None = Field(default=None, description="None: not judged yet.")
    judge_reason: str | None = None
    judge_usage: CallUsage | None = Field(default=None, description="None for the exact-match judge.")

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.mode, self.conversation_id, self.index)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile (``p`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def usage_total(usages: Iterable[CallUsage | Mapping[str, Any] | None]) -> dict[str, Any]:
    """Calls, tokens and cost summed; a figure any call left unreported sums to None.

    An item is one call (a ``CallUsage``) or a total of several (a mapping with ``calls``); an item
    marked ``failed`` (every call of it failed, so nothing was produced or billed) counts its calls only.
    """
    rows = []
    for u in usages:
        if u is None:
            continue
        if isinstance(u, CallUsage):
            u = {"calls": 1, **u.model_dump()}
        rows.append(u)
    total: dict[str, Any] = {"calls": sum(int(u.get("calls", 1)) for u in rows)}
    for name in ("prompt_tokens", "completion_tokens", "cost_usd"):
        values = [u.get(name) for u in rows if u.get("calls", 1) and not u.get("failed")]
        total[name] = None if not values or any(v is None for v in values) else sum(values)
    if total["cost_usd"] is not None:
        total["cost_usd"] = round(total["cost_usd"], 6)
    return total


def _group(records: Sequence[QuestionResult]) -> dict[str, Any]:
    judged = [r for r in records if r.label is not None]
    correct = sum(r.label == "CORRECT" for r in judged)
    recalls = [r.evidence_recall for r in records if r.evidence_recall is not None]
    tokens = [r.block_tokens for r in records]
    latency = [r.context_ms for r in records]
    return {
        "questions": len(records),
        "judged": len(judged),
        "correct": correct,
        "j": round(correct / len(judged), 4) if judged else None,
        "evidence_recall": round(sum(recalls) / len(recalls), 4) if recalls else None,
        "with_evidence": len(recalls),
        "empty_blocks": sum(not r.pointers for r in records),
        "block_tokens": {"mean": round(sum(tokens) / len(tokens), 1) if tokens else None,
                         "p50": percentile(tokens, 50), "p95": percentile(tokens, 95)},
        "context_ms": {"p50": _round(percentile(latency, 50)), "p95": _round(percentile(latency, 95))},
        "answer": usage_total(r.answer_usage for r in records),
        "judge": usage_total(r.judge_usage for r in records),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def summarize(records: Sequence[QuestionResult], modes: Sequence[str],
              extraction: Mapping[str, Iterable[Mapping[str, Any]]] | None = None) -> dict[str, Any]:
    """Per mode: ``overall`` (categories 1-4, as published figures count), each category, ``adversarial``
    apart, and ``calls``: the extraction, answer and judge calls with their tokens and cost.

    ``extraction`` maps a mode to the usage totals of its extraction runs (one per session attempt).
    """
    out: dict[str, Any] = {}
    for mode in modes:
        rows = [r for r in records if r.mode == mode]
        out[mode] = {
            "overall": _group([r for r in rows if r.category != ADVERSARIAL]),
            "categories": {name: _group([r for r in rows if r.category == cat])
                           for cat, name in CATEGORIES.items() if cat != ADVERSARIAL},
            "adversarial": _group([r for r in rows if r.category == ADVERSARIAL]),
            "calls": {"extraction": usage_total((extraction or {}).get(mode, ())),
                      "answer": usage_total(r.answer_usage for r in rows),
                      "judge": usage_total(r.judge_usage for r in rows)},
        }
    return out


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename, so a crash leaves the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report's figures as Markdown tables (what ``tortoise eval locomo`` prints at the end)."""
    s = report["settings"]
    k = s["budget"]
    j_name = {("model", "llm"): "J", ("model", "exact"): "J (exact match)",
              ("block", "exact"): "gold in block"}.get((s["answerer"], s["judge"]), "J")
    lines = [
        f"LoCoMo, {len(s['conversations'])} conversation(s); answers: "
        + (f"`{s['models']['answer']}`" if s["answerer"] == "model" else "the block itself (no model)")
        + "; judge: " + (f"`{s['models']['judge']}`" if s["judge"] == "llm" else "exact match (no model)")
        + f"; budget {k} pointers, {s['max_tokens']} tokens; status: {report['status']}.",
        "",
        f"| mode | category | questions | {j_name} (%) | evidence recall@{k} | block tokens mean / p50 / p95 "
        "| context() ms p50 / p95 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for mode, groups in report["summary"].items():
        rows = [*groups["categories"].items(), ("overall (1-4)", groups["overall"]),
                ("adversarial (5)", groups["adversarial"])]
        for name, g in rows:
            if not g["questions"]:
                continue
            j = None if g["j"] is None else g["j"] * 100
            judged = "" if g["judged"] == g["questions"] else f" ({g['judged']} judged)"
            t, c = g["block_tokens"], g["context_ms"]
            lines.append(f"| {mode} | {name} | {g['questions']}{judged} | {_fmt(j)} | {_fmt(g['evidence_recall'], 3)} "
                         f"| {_fmt(t['mean'])} / {_fmt(t['p50'])} / {_fmt(t['p95'])} "
                         f"| {_fmt(c['p50'], 2)} / {_fmt(c['p95'], 2)} |")
    calls = [f"| {mode} | {stage} | {u['calls']:,} | {_fmt(u['prompt_tokens'])} | {_fmt(u['completion_tokens'])} "
             f"| {_fmt(u['cost_usd'], 4)} |"
             for mode, groups in report["summary"].items() for stage, u in groups["calls"].items() if u["calls"]]
    if calls:
        lines += ["", "| mode | calls of | calls | prompt tokens | completion tokens | cost (USD) |",
                  "|---|---|---:|---:|---:|---:|", *calls]
    return "\n".join(lines) + "\n"
