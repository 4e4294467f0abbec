"""Runs S1 → S2 → (VET) → S3 → S4 → (VET of S4's additions) → grounding → S5 for one stored session.

Extraction is incremental (``window``): it reads only the turns after the session's
watermark (the last turn a committed extraction covered), with a few earlier turns
read-only and the session's own memories as priors; S5 moves the watermark in its
own transaction, so a crash before S5 leaves the same window to the next run and
a committed window is never read as new again. ``full=True``, or prompts that
changed since the last extraction, re-read the whole session on purpose.

No stage failure is raised: each becomes a Diagnostic on the ExtractionReport.
The turns are already committed before the first model call, so nothing here
can lose the session. Nor can a failed stage consume its turns: the watermark
never passes a turn whose S1 chunk or S2 failed. It is a prefix, so it stops just
before the first such turn (a later turn whose own chunk succeeded waits too); what
the run found is still written (a retry finds it again as NOOP), the report is
``partial`` and names the ``waiting`` turns, and a job is put back for a retry. A
failed S3 (no priors), S4 (S2's list is kept) or VET (fails open) does not hold the
watermark: S1 and S2 read every turn. A failed S5 writes nothing, so nothing moves.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..confidence import agreement
from ..config import DEFAULT_CHUNK_TURNS, DEFAULT_CONCURRENCY
from ..errors import LeaseLost
from ..models import CaptureReceipt, Diagnostic, ExtractionReport, StageStats
from ..store.base import Store
from ..store.plan import Fence, Window, WriteResult
from ..vocabulary import Vocabulary
from .common import diagnostic, run_sync
from .grounding import ground
from .merge import Proposal, identity, union
from .prompts import coding_section, load_prompt
from .s1_narrate import chunk_turns, narrate
from .s2_map import StageOutcome, map_session
from .s3_priors import DEFAULT_PRIORS, find_priors
from .s4_review import review
from .s5_write import build_plan, write_plan
from .vet import vet as run_vet
from .window import read_window

__all__ = ("PipelineOptions", "aextract_session", "extract_session")


@dataclass(frozen=True)
class PipelineOptions:
    """How the pipeline runs: chunking, concurrency, the optional gate, prompts, prior budget, ``full``
    (re-read the whole session instead of the turns after its watermark) and the host's ``vocabulary``
    (a section of the S1/S2/S4 prompts, so part of their hashes, and the categories memories may carry)."""

    chunk_turns: int = DEFAULT_CHUNK_TURNS
    concurrency: int = DEFAULT_CONCURRENCY
    vet: bool = False
    prompts_dir: str | Path | None = None
    priors_k: int = DEFAULT_PRIORS
    full: bool = False
    vocabulary: Vocabulary | None = None


def extract_session(store: Store, namespace: str, session_id: str, *, llm_config: object,
                    options: PipelineOptions = PipelineOptions(), receipt: CaptureReceipt | None = None,
                    fence: Fence | None = None) -> ExtractionReport:
    """Sync entry point of :func:`aextract_session`."""
    return run_sync(aextract_session(store, namespace, session_id, llm_config=llm_config, options=options,
                                     receipt=receipt, fence=fence))


async def aextract_session(store: Store, namespace: str, session_id: str, *, llm_config: object,
                           options: PipelineOptions = PipelineOptions(), receipt: CaptureReceipt | None = None,
                           fence: Fence | None = None) -> ExtractionReport:
    """Extract one stored session into the graph; the report is also stored (run row and receipt).

    A session longer than one window (``window.WINDOW_CHARS``) is extracted window after window while each one
    moves the watermark, a job (``fence``) too, under its lease (its heartbeat renews it).

    Raises:
        LeaseLost: only with ``fence``, when another worker took the job; nothing was written.
    """
    reports: list[ExtractionReport] = []
    max_turns: int | None = None
    while True:
        report = await _extract_window(store, namespace, session_id, llm_config=llm_config, options=options,
                                       receipt=receipt, fence=fence, max_turns=max_turns)
        reports.append(report)
        if _cut_whole(report):  # the reply did not fit the output cap: the same turns in windows half as large
            max_turns = (report.window[1] - report.window[0] + 1) // 2  # type: ignore[index]
            continue
        if report.status not in ("ok", "partial") or report.waiting is not None or report.window is None:
            break
        if fence is not None and store.get_job(fence.job_id).status != "running":
            break  # S5 settled the job with its last window: turns captured meanwhile are the next job's
        state = store.extraction_state(namespace, session_id)
        if state is None or state.watermark < report.window[1] \
                or not store.turns(namespace, session_id, start=state.watermark + 1, stop=state.watermark + 2):
            break  # the window was not written whole (another run's), or nothing follows it
        options = replace(options, full=False)  # a job runs on with its lease (S5 settles it after the last window)
    if len(reports) == 1:
        return report
    combined = _combined(reports)
    _save_receipt(store, namespace, receipt, combined)
    return combined


#: The lists of a proposal that cite turns, in the order the prompts ask for them.
_CITING = ("events", "points", "retractions")


def _cut_frontier(outcome: StageOutcome, grounded: Any, window: Window) -> tuple[int, str]:
    """The first turn a cut reply may have left unsaid, and why: the turns from it on wait for another run.

    A reply is written list after list, so the cut fell in the last list it holds: the lists before it are whole,
    that one is known up to the last turn its own kept items cite, and a list it never reached (``retractions``
    after a cut in ``points``) says nothing of any turn. The other stage's items do not count: S4 citing a later
    turn says nothing of what S2 lost.
    """
    proposal = outcome.proposal or Proposal()
    present = [k for k in outcome.lists or [k for k in _CITING if getattr(proposal, k)] if k in _CITING]
    if not present:
        return window.start, "before any item"
    # a list before the last one held that is absent was left out by the model; one after it was never reached
    lost = [k for k in _CITING[_CITING.index(present[-1]) + 1:] if k not in present]
    if lost:
        return window.start, f"before its {', '.join(lost)}"
    own = {identity(i) for i in getattr(proposal, present[-1])}
    cited = [g.turn_index for g in getattr(grounded, present[-1]) if identity(g.item) in own]
    if not cited:
        return window.start, f"before any of its {present[-1]}"
    return max(cited) + 1, f"after turn {max(cited)} in its {present[-1]}"


def _combined(reports: list[ExtractionReport]) -> ExtractionReport:
    """The report of a session extracted in several windows: what each wrote, summed, and the last one's state."""
    last = reports[-1]
    counts: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    stages: dict[str, StageStats] = {}
    for r in reports:
        counts.update(r.counts)
        outcomes.update(r.outcomes)
        for name, st in r.stages.items():
            stages[name] = st if name not in stages else _added(stages[name], st)
    # a window a cut reply held whole was read again: its turns are extracted, and only its warnings remain
    halved = any(_cut_whole(r) for r in reports)
    whole = last.status == "ok" and last.waiting is None and not any(r.errors for r in reports)
    status = "ok" if whole and all(r.status == "ok" or _cut_whole(r) for r in reports) else "partial"
    reason = (f"extracted in {len(reports)} windows of turns"
              + (" (a reply cut by the output cap was read again in windows half as large)" if halved else "")
              + (f"; the last: {last.reason}" if last.reason else ""))
    read = [r.window for r in reports if r.window]
    window = (min(w[0] for w in read), max(w[1] for w in read)) if read else None
    # what the last window left waiting, and every turn read after it (a halved window reads fewer than before)
    waiting = (last.waiting[0], max(last.waiting[1], window[1])) if last.waiting and window else last.waiting
    return last.model_copy(update={
        "status": status, "reason": reason, "counts": dict(counts), "outcomes": dict(outcomes), "stages": stages,
        "errors": [d for r in reports for d in r.errors], "warnings": [d for r in reports for d in r.warnings],
        "window": window, "waiting": waiting})


def _added(a: StageStats, b: StageStats) -> StageStats:
    """Two runs' figures of one stage together (a figure neither reported stays None)."""
    def plus(x: float | None, y: float | None) -> Any:
        return None if x is None and y is None else (x or 0) + (y or 0)

    return StageStats(calls=a.calls + b.calls, retries=a.retries + b.retries,
                      prompt_tokens=plus(a.prompt_tokens, b.prompt_tokens),
                      completion_tokens=plus(a.completion_tokens, b.completion_tokens),
                      cost_usd=plus(a.cost_usd, b.cost_usd), wall_ms=a.wall_ms + b.wall_ms,
                      errors=dict(Counter(a.errors) + Counter(b.errors)), prompt_hash=b.prompt_hash)


def _cut_whole(report: ExtractionReport) -> bool:
    """Whether a reply cut by the output cap held a window of several turns whole (and nothing else failed)."""
    return (report.window is not None and report.waiting is not None and report.waiting[0] == report.window[0]
            and report.window[1] > report.window[0] and not report.errors
            and any(w.code == "truncation" for w in report.warnings))


async def _extract_window(store: Store, namespace: str, session_id: str, *, llm_config: object,
                          options: PipelineOptions, receipt: CaptureReceipt | None,
                          fence: Fence | None, max_turns: int | None) -> ExtractionReport:
    """Extract the session's next window (``window.read_window``): the turns after its watermark, up to a bound."""
    from ..llm import LLMClient

    started = time.perf_counter()
    client = LLMClient(llm_config)  # type: ignore[arg-type]
    # The host's vocabulary is a section of S1, S2 and S4 (VET judges candidates, not topics; ``coding`` is
    # a section of S1 and S2 itself).
    prompts = {name: load_prompt(name, options.prompts_dir).with_vocabulary(
        None if name in ("vet", "coding") else options.vocabulary)
        for name in ("s1_narrate", "s2_map", "vet", "s4_review", "coding")}
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    local: dict[str, StageStats] = {}
    # Elapsed time of each model stage; the client's own wall_ms sums call durations, which overlap in S1.
    elapsed: dict[str, float] = {}
    partial = False
    # The first turn whose S1 chunk or S2 failed: the watermark stops before it, and why.
    held: int | None = None
    held_why: list[str] = []
    failed_chunks: list[str] = []
    # What each stage said of an item (by identity), for its agreement level (tortoise_sdk.confidence).
    from_s2: set[tuple[str, ...]] = set()
    from_s4: set[tuple[str, ...]] = set()
    cut: list[tuple[str, StageOutcome]] = []  # the stages whose reply the output cap cut, with what they kept
    vetted = reviewed = False

    reading = read_window(store, namespace, session_id, prompts, full=options.full, max_turns=max_turns)
    window, evidence, context = reading.window, reading.evidence, reading.context
    if not reading.turns:
        return _nothing_new(store, namespace, window, receipt, fence)
    session_date = reading.session_date
    coding = coding_section(prompts["coding"], evidence)

    if evidence:
        t = time.perf_counter()
        s1 = await narrate(client, prompts["s1_narrate"], evidence, session_date=session_date,
                           size=options.chunk_turns, concurrency=options.concurrency, context=context,
                           known=reading.known, coding=coding)
        elapsed["s1"] = (time.perf_counter() - t) * 1000
        errors += s1.errors
        for chunk, story in zip(chunk_turns(evidence, options.chunk_turns), s1.stories):
            if story is None:
                held = chunk[0].index if held is None else held
                failed_chunks.append(f"{chunk[0].index}-{chunk[-1].index}")
        if failed_chunks:
            held_why.append(f"S1 failed on turns {', '.join(failed_chunks)}")
        # After a fatal class (client.fatal) no later stage is called: each would meet the same refusal.
        s2 = StageOutcome(None)
        if client.fatal is None:
            t = time.perf_counter()
            s2 = await map_session(client, prompts["s2_map"], story=s1.story, turns=evidence,
                                   session_date=session_date, context=context, known=reading.known,
                                   coding=coding)
            elapsed["s2"] = (time.perf_counter() - t) * 1000
            errors += s2.errors
            warnings += s2.warnings
            partial |= s2.partial
            cut += [("S2", s2)] if s2.partial else []
        if s2.proposal is None:
            held = window.start
            held_why.insert(0, "S2 failed" if "s2" in elapsed else "S2 was not called")
        candidates = s2.proposal or Proposal()
        if options.vet and s2.proposal is not None and client.fatal is None:
            t = time.perf_counter()
            candidates, vet_notes = await run_vet(client, prompts["vet"], candidates, evidence)
            elapsed["vet"] = (time.perf_counter() - t) * 1000
            for d in vet_notes:
                (warnings if d.code in ("drop", "merge") else errors).append(d)
            vetted = all(d.code in ("drop", "merge") for d in vet_notes)  # a failed gate kept all, judged none
        from_s2 = {identity(i) for i in (*candidates.events, *candidates.points)}
        t = time.perf_counter()
        priors = find_priors(store, namespace, candidates, k=options.priors_k, known=reading.known,
                             story=s1.story or "")
        local["s3"] = StageStats(wall_ms=(time.perf_counter() - t) * 1000)
        if priors.degraded:
            warnings.append(Diagnostic(stage="s3", code="degraded",
                                       message=f"priors unavailable ({priors.degraded}); every item treated as new"))
        s4 = StageOutcome(None)
        final = candidates
        if client.fatal is None:
            t = time.perf_counter()
            s4 = await review(client, prompts["s4_review"], story=s1.story, priors=priors, candidates=candidates,
                              turns=evidence, session_date=session_date, context=context)
            elapsed["s4"] = (time.perf_counter() - t) * 1000
            warnings += s4.warnings
            partial |= s4.partial
            cut += [("S4", s4)] if s4.partial else []
            if s4.proposal is None:
                errors += [d.model_copy(update={"message": d.message + "; kept the S2 list as it was"})
                           for d in s4.errors]
            else:
                delta = s4.proposal
                if options.vet and client.fatal is None:
                    t = time.perf_counter()
                    delta, vet_notes = await run_vet(client, prompts["vet"], delta, evidence, of_s4=True)
                    elapsed["vet"] = elapsed.get("vet", 0.0) + (time.perf_counter() - t) * 1000
                    for d in vet_notes:
                        (warnings if d.code in ("drop", "merge") else errors).append(d)
                from_s4 = {identity(i) for i in (*delta.events, *delta.points)}
                reviewed = True
                final = union(candidates, delta)
        nothing = s2.proposal is None and s4.proposal is None
    else:
        priors = find_priors(store, namespace, Proposal())
        final, nothing = Proposal(), False
        warnings.append(Diagnostic(stage="s1", code="no_evidence",
                                   message=f"turns {window.start}-{window.end} hold no evidence (only tool, "
                                           "sub-agent or memory-block turns); nothing to extract"))

    def report(status: str, result: WriteResult | None, reason: str | None = None) -> ExtractionReport:
        stages = {**client.stats, **local}
        for stage, name in (("s1", "s1_narrate"), ("s2", "s2_map"), ("vet", "vet"), ("s4", "s4_review")):
            if stage in stages:
                stages[stage] = stages[stage].model_copy(update={"prompt_hash": prompts[name].sha256,
                                                                 "wall_ms": elapsed.get(stage, stages[stage].wall_ms)})
        stages["total"] = StageStats(wall_ms=(time.perf_counter() - started) * 1000,
                                     calls=sum(s.calls for s in stages.values()),
                                     retries=sum(s.retries for s in stages.values()),
                                     prompt_tokens=_sum(s.prompt_tokens for s in stages.values()),
                                     completion_tokens=_sum(s.completion_tokens for s in stages.values()),
                                     cost_usd=_sum(s.cost_usd for s in stages.values()),
                                     errors=dict(sum((Counter(s.errors) for s in stages.values()), Counter())))
        counts = dict(result.counts) if result else {}
        if rejected:
            counts["rejected"] = rejected
        return ExtractionReport(status=status, reason=reason, counts=counts,
                                outcomes=dict(result.outcomes) if result else {},
                                errors=list(errors), warnings=list(warnings) + (result.warnings if result else []),
                                stages=stages, job_id=fence.job_id if fence else None,
                                window=(window.start, window.end), waiting=waiting(status))

    def waiting(status: str) -> tuple[int, int] | None:
        if status == "failed":
            # A failed run writes nothing: what an earlier run extracted stays extracted (a failed --full run
            # re-read turns that do not wait), and the turns after it wait.
            start = max(window.start, reading.extracted + 1)
            return (start, window.end) if start <= window.end else None
        return None if held is None or status == "skipped" else (held, window.end)

    def waits(status: str) -> str:
        """The reason's last words: which turns wait for another run, and why."""
        turns = waiting(status)
        if turns is None:
            return ""
        why = f" ({', '.join(held_why)})" if held_why else ""
        return f"; turns {turns[0]}-{turns[1]} wait for another run{why}"

    rejected = 0
    stopped = _stopped_reason(client.fatal, errors)
    if nothing:
        failed = report("failed", None, (stopped or "S2 and S4 both failed; nothing was extracted (the turns are "
                                            "stored)") + waits("failed"))
        _save_receipt(store, namespace, receipt, failed)
        return failed

    t = time.perf_counter()
    grounded = ground(final, evidence, context)
    rejected = grounded.rejected
    warnings += grounded.warnings
    local["ground"] = StageStats(wall_ms=(time.perf_counter() - t) * 1000)
    def agreed(item: Any) -> int:
        return agreement(from_s2=identity(item) in from_s2, from_s4=identity(item) in from_s4, reviewed=reviewed,
                         vetted=vetted and identity(item) in from_s2)

    plan, plan_warnings = build_plan(session_id, grounded, priors.handles, extraction_id=f"x_{uuid.uuid4().hex}",
                                     valid_at=_as_utc(session_date), receipt=receipt, window=window,
                                     vocabulary=options.vocabulary, agreement_of=agreed)
    warnings += plan_warnings
    for stage, outcome in cut:
        start, why = _cut_frontier(outcome, grounded, window)
        if start <= window.end:
            held = start if held is None else min(held, start)
            held_why.append(f"the {stage} reply was cut by the output cap {why}")
    status = "partial" if (errors or partial or priors.degraded or held is not None) else "ok"
    if held is not None:
        window = replace(window, held_from=held)
        plan.window = window

    t = time.perf_counter()

    def finalize(result: WriteResult) -> ExtractionReport:
        local["s5"] = StageStats(wall_ms=(time.perf_counter() - t) * 1000)
        if result.already_covered:
            return report("skipped", result, f"turns {window.start}-{window.end} were extracted by another run "
                                             "while this one ran; nothing of this one was written")
        return report(status, result, (stopped or _reason(status, errors) or "") + waits(status) or None)

    try:
        return write_plan(store, namespace, plan, finalize=finalize, fence=fence).report  # type: ignore[return-value]
    except LeaseLost:
        raise
    except Exception as exc:  # noqa: BLE001 - an S5 failure writes nothing and is reported
        local["s5"] = StageStats(wall_ms=(time.perf_counter() - t) * 1000, errors={type(exc).__name__: 1})
        errors.append(diagnostic("s5", exc, "the write failed and was rolled back; no memory was written"))
        failed = report("failed", None, "S5 failed; nothing of the extraction was written (the turns are stored)"
                        + waits("failed"))
        _save_receipt(store, namespace, receipt, failed)
        return failed


def _nothing_new(store: Store, namespace: str, window: Window, receipt: CaptureReceipt | None,
                 fence: Fence | None) -> ExtractionReport:
    """No turn after the watermark: nothing to extract (a job that asked is done)."""
    report = ExtractionReport(status="skipped", job_id=fence.job_id if fence else None,
                              reason=f"no turns after turn {window.base}, the last one extracted; "
                                     "mem.extract(session_id, full=True) re-extracts the whole session")
    if fence is not None:
        store.finish_job(fence)
    _save_receipt(store, namespace, receipt, report)
    return report


def _save_receipt(store: Store, namespace: str, receipt: CaptureReceipt | None, report: ExtractionReport) -> None:
    if receipt is None:
        return
    try:
        store.save_receipt(namespace, receipt.model_copy(update={"extraction": report}))
    except Exception:  # noqa: BLE001 - the report is still returned to the caller
        pass


def _stopped_reason(fatal: BaseException | None, errors: list[Diagnostic]) -> str | None:
    """Why the run stopped early: the stage and class of the fatal failure, and what to do (its message)."""
    if fatal is None:
        return None
    code = getattr(fatal, "error_class", "unknown")
    first = next((d for d in errors if d.code == code), None)
    stage = first.stage if first is not None else "?"
    return (f"{stage}: {code}: {fatal}; no later stage was called (the turns are stored, "
            "what earlier stages gave was written)")


def _reason(status: str, errors: list[Diagnostic]) -> str | None:
    if status == "ok":
        return None
    if errors:
        return "; ".join(sorted({f"{d.stage}: {d.code}" for d in errors}))
    return "a stage was degraded or cut short; see warnings"


def _sum(values: object) -> float | int | None:
    present = [v for v in values if v is not None]  # type: ignore[attr-defined]
    return sum(present) if present else None


def _as_utc(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
