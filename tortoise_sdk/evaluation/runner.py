"""``tortoise eval locomo``: capture LoCoMo conversations, ask each question through the memory block, judge.

For each mode (``verbatim``: captured turns only, no model; ``memories``: the turns extracted
into memories by the pipeline, the block as the reflex delivers it from both) the conversations
go into their own store beside the report, one namespace each, sessions in order with their
dates. Then per question: ``Memory.context`` with a one-turn window holding the question, the
answer model with ``prompts/eval_answer.md``, the judge with ``prompts/eval_judge.md`` (or the
exact-match judge). Model calls go through :class:`~tortoise_sdk.llm.LLMClient` with
``X-Tortoise-Stage: answer`` / ``judge``, ``concurrency`` questions at a time; a conversation's
blocks are all built first, one at a time, so ``context()`` is timed alone.

The report is rewritten atomically as questions are answered (at most a second apart, and
always before leaving), so an interrupted or failed run keeps what it paid for; running the
same command again skips the questions already in it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from ..config import env_model
from ..errors import ConfigError, InvalidInput, MalformedOutput, ModelError
from ..jsonparse import parse_json
from ..llm import FATAL_CLASSES, RETRYABLE_CLASSES, LLMClient, LLMConfig, LLMResult
from ..memory import Memory
from ..models import ExtractionReport, MemoryBlock, StageStats
from ..pipeline.prompts import PROMPT_NAMES, Prompt, load_prompt
from .locomo import NOT_MENTIONED, Conversation, Question, evidence_recall, exact_match, load_conversations
from .report import REPORT_FORMAT, CallUsage, QuestionResult, render_markdown, summarize, write_atomic

__all__ = ("MODES", "EvalSettings", "Progress", "run_locomo", "store_path")

Mode = Literal["verbatim", "memories"]
MODES: tuple[Mode, ...] = ("verbatim", "memories")
ANSWER_PROMPT = "eval_answer"
JUDGE_PROMPT = "eval_judge"
EMPTY_BLOCK = "(nothing was retrieved)"
#: Seconds between two rewrites of the report while questions are answered.
SAVE_EVERY_S = 1.0

#: ``progress(phase, done, total)``: phase is "capture <mode>" or "questions <mode>".
Progress = Callable[[str, int, int], None]

#: Error classes that say the provider failed, not the model's output: an extraction with one is run again.
PROVIDER_FAILURES = RETRYABLE_CLASSES | FATAL_CLASSES
_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")


@dataclass(frozen=True)
class EvalSettings:
    """What to run. Models are litellm names; ``api_key`` is never written to the report.

    Attributes:
        files: LoCoMo files (``locomo10.json`` or one conversation per file).
        out: the JSON report; the Markdown table goes beside it (``.md``), the stores too (``.<mode>.db``).
        modes: ``verbatim``, ``memories`` or both, run in that order.
        answer_from_block: no answer model: the block's text is the answer (needs ``judge="exact"``).
    """

    files: Sequence[str | Path]
    out: Path
    modes: Sequence[Mode] = ("verbatim",)
    budget: int = 5
    max_tokens: int = 400
    judge: Literal["llm", "exact"] = "llm"
    answer_from_block: bool = False
    extraction_model: str | None = None
    answer_model: str | None = None
    judge_model: str | None = None
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float | None = 0.0
    concurrency: int = 4
    model_settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def with_models(cls, model: str | None = None, *, answer_model: str | None = None,
                    judge_model: str | None = None, **settings: Any) -> EvalSettings:
        """Settings where ``model`` (default ``$TORTOISE_MODEL``) extracts, and answers and judges unless
        ``answer_model`` / ``judge_model`` are given."""
        model = model or env_model()
        return cls(extraction_model=model, answer_model=answer_model or model, judge_model=judge_model or model,
                   **settings)

    def check(self) -> None:
        """Refuse combinations that cannot run, saying what to pass.

        Raises:
            ConfigError: a model the chosen modes need is missing, or options contradict each other.
        """
        if not self.files:
            raise ConfigError("no LoCoMo file given, e.g. tortoise eval locomo locomo10.json")
        if Path(self.out).suffix.lower() == ".md":
            raise ConfigError("--out is the JSON report (the Markdown table is written beside it, as .md): "
                              "pass e.g. --out locomo.json")
        if not self.modes or any(m not in MODES for m in self.modes):
            raise ConfigError(f"modes must be among {MODES}")
        if "memories" in self.modes and not self.extraction_model:
            raise ConfigError("--mode memories extracts with a model: pass --model (or set TORTOISE_MODEL), "
                              "or use --mode verbatim")
        if self.answer_from_block:
            if self.judge != "exact":
                raise ConfigError("--answer-from-block has no generated answer for a judge model: "
                                  "use it with --judge exact")
        elif not self.answer_model:
            raise ConfigError("no answer model: pass --answer-model or --model (or set TORTOISE_MODEL), "
                              "or --answer-from-block --judge exact for a run without any model")
        if self.judge == "llm" and not self.judge_model:
            raise ConfigError("no judge model: pass --judge-model or --model, or --judge exact")
        if not 1 <= self.budget <= 8:
            raise ConfigError("--budget is between 1 and 8 pointers")
        if self.max_tokens < 1:
            raise ConfigError("--max-tokens must be at least 1")
        if self.concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")


def store_path(out: Path, mode: str) -> Path:
    """Where a mode's store lives: beside the report, ``report.json`` -> ``report.verbatim.db``."""
    return out.with_name(f"{out.stem}.{mode}.db")


def run_locomo(settings: EvalSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) the evaluation and return the report, also written to ``settings.out``.

    Raises:
        ConfigError: see :meth:`EvalSettings.check`.
        InvalidInput: a file is not LoCoMo, or ``out`` holds a report made with other settings.
        ModelError: a model call failed for good; the report written so far is kept and the
            message says how to resume.
    """
    settings.check()
    run = _Run(settings, progress or (lambda phase, done, total: None))
    with run.saving():
        for mode in settings.modes:
            run.mode(mode)
    return run.report


class _Run:
    """One invocation: the report being filled, the clients, and where it is saved."""

    def __init__(self, settings: EvalSettings, progress: Progress) -> None:
        self.s = settings
        self.progress = progress
        self.conversations = _load(settings.files)
        self.prompts = {name: load_prompt(name) for name in (ANSWER_PROMPT, JUDGE_PROMPT)}
        self.config = self._settings_doc()
        self.records: dict[tuple[str, str, int], QuestionResult] = {}
        self.extraction: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
        self.started_at = _now()
        self._resume()
        self.answerer = None if settings.answer_from_block else self._client(settings.answer_model)
        self.judge = self._client(settings.judge_model) if settings.judge == "llm" else None
        self._saved_at = 0.0
        self._lock = threading.Lock()  # workers add records and labels while the main thread saves
        self.report: dict[str, Any] = {}

    # -- settings and resume -----------------------------------------------------------------

    def _settings_doc(self) -> dict[str, Any]:
        s = self.s
        prompts = {name: p.sha256 for name, p in self.prompts.items()}
        if "memories" in s.modes:
            prompts.update({name: load_prompt(name).sha256 for name in PROMPT_NAMES})
        return {
            "modes": list(s.modes),
            "budget": s.budget,
            "max_tokens": s.max_tokens,
            "answerer": "block" if s.answer_from_block else "model",
            "judge": s.judge,
            "models": {"extraction": s.extraction_model if "memories" in s.modes else None,
                       "answer": None if s.answer_from_block else s.answer_model,
                       "judge": s.judge_model if s.judge == "llm" else None},
            "temperature": s.temperature if (s.judge == "llm" or not s.answer_from_block) else None,
            "prompts": prompts,
            "conversations": [{"conversation_id": c.conversation_id, "file": str(path), "sha256": digest,
                               "questions": len(c.questions)} for c, path, digest in self.conversations],
        }

    def _resume(self) -> None:
        out = self.s.out
        if not out.exists():
            for mode in self.s.modes:  # a fresh run starts from fresh stores
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{store_path(out, mode)}{suffix}").unlink(missing_ok=True)
            return
        try:
            old = json.loads(out.read_text(encoding="utf-8"))
            records = [QuestionResult.model_validate(r) for r in old["questions"]]
            previous = old["settings"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"exists but is not a report of tortoise eval locomo ({exc}); "
                               "pass another --out or remove it", field=str(out)) from None
        differs = sorted(k for k in self.config if _comparable(previous.get(k)) != _comparable(self.config[k]))
        if differs:
            raise InvalidInput(f"was made with other settings ({', '.join(differs)}); resume it with the same "
                               "command, or pass another --out", field=str(out))
        self.records = {r.key: r for r in records}
        self.extraction = old.get("extraction") or {}
        self.started_at = old.get("started_at") or self.started_at

    def _client(self, model: str | None) -> LLMClient:
        extra = dict(self.s.model_settings)
        if self.s.temperature is not None:
            extra.setdefault("temperature", self.s.temperature)
        return LLMClient(LLMConfig.resolve(model, api_base=self.s.api_base, api_key=self.s.api_key, **extra))

    # -- the work ----------------------------------------------------------------------------

    def mode(self, mode: Mode) -> None:
        db = str(store_path(self.s.out, mode))
        self._capture(mode, db)
        total = sum(len(c.questions) for c, _, _ in self.conversations)
        done = sum(self._done(r) for r in self.records.values() if r.mode == mode)
        phase = f"questions {mode}"
        self.progress(phase, done, total)
        for conv, _, _ in self.conversations:
            cid = conv.conversation_id
            todo = [q for q in conv.questions if not self._done(self.records.get((mode, cid, q.index)))]
            if not todo:
                continue
            # Every block first, one at a time: context() is timed alone, not beside model calls.
            with Memory(db, namespace=cid) as mem:
                retrieved = {q.index: self._retrieve(mode, conv, q, mem) for q in todo
                             if (mode, cid, q.index) not in self.records}
            # At most `concurrency` questions in flight, the next one started only when one succeeds:
            # after a failure nothing new is asked, and what was in flight ends and is kept.
            queue = iter(todo)
            try:
                with ThreadPoolExecutor(max_workers=self.s.concurrency, thread_name_prefix="tortoise-eval") as pool:
                    def start(q: Question) -> Future[None]:
                        return pool.submit(self._ask, mode, conv, q, retrieved.get(q.index))

                    running = {start(q) for q in islice(queue, self.s.concurrency)}
                    while running:
                        finished, running = wait(running, return_when=FIRST_COMPLETED)
                        for future in finished:
                            future.result()
                            done += 1
                            self.progress(phase, done, total)
                            self.save(throttled=True)
                            running.update(start(q) for q in islice(queue, 1))
            except ModelError as exc:
                raise self._interrupted(exc) from exc

    def _capture(self, mode: Mode, db: str) -> None:
        """Every conversation is stored (and extracted) before any question, as one store holds them all."""
        sessions = [(c, s) for c, _, _ in self.conversations for s in c.sessions]
        phase = f"capture {mode}"
        self.progress(phase, 0, len(sessions))
        done = 0
        for conv, _, _ in self.conversations:
            if mode == "verbatim":
                with Memory(db, namespace=conv.conversation_id) as mem:
                    mem.capture_many(conv.sessions, extract=False)
                done += len(conv.sessions)
                self.progress(phase, done, len(sessions))
                continue
            with Memory(db, namespace=conv.conversation_id, model=self.s.extraction_model, api_base=self.s.api_base,
                        api_key=self.s.api_key, model_settings=self.s.model_settings) as mem:
                mem.reset_breaker()  # running again is how a user resumes once the cause is fixed (a run stops at one)
                for session in conv.sessions:
                    self._extract(mem, conv, session)
                    done += 1
                    self.progress(phase, done, len(sessions))

    def _extract(self, mem: Memory, conv: Conversation, session: dict[str, Any]) -> None:
        """Capture a session and extract it once; an extraction the provider failed is run again on resume.

        The pipeline fails open (a stage the provider failed leaves the others' memories), which
        is right for a host but would measure an outage here: such a session stops the run.
        """
        sid = session["session_id"]
        mem.capture(sid, session["turns"], session_date=session["date"], extract=False)
        attempts = self.extraction.setdefault("memories", {}).setdefault(conv.conversation_id, {}).setdefault(sid, [])
        if attempts and not _provider_failed(attempts[-1]):
            return
        report = mem.extract(sid)
        attempt = _attempt(report)
        attempts.append(attempt)
        self.save(throttled=not attempt["provider_failed"])
        if attempt["provider_failed"]:
            first = next((d.code for d in report.errors if d.code in PROVIDER_FAILURES), "unknown")
            raise ModelError(f"extraction of {sid} failed ({report.reason}); the store and the "
                             f"{sum(self._done(r) for r in self.records.values())} judged question(s) are kept "
                             f"beside {self.s.out}: fix the cause and run the same command again to resume",
                             model=self.s.extraction_model, error_class=first)

    def _ask(self, mode: Mode, conv: Conversation, q: Question,
             retrieved: tuple[QuestionResult, MemoryBlock] | None) -> None:
        """Answer (unless an earlier run did) and judge one question; runs in a worker thread."""
        key = (mode, conv.conversation_id, q.index)
        if retrieved is not None:
            record, block = retrieved
            if self.answerer is None:
                record.answer = _block_answer(block)
            else:
                prompt = self.prompts[ANSWER_PROMPT].render(memory=block.block or EMPTY_BLOCK, question=q.question)
                result = self.answerer.complete("answer", [{"role": "user", "content": prompt}])
                record.answer = result.text.strip()
                record.answer_usage = _usage(result)
            with self._lock:
                self.records[key] = record
        record = self.records[key]
        if self.judge is None:
            label, reason, usage = ("CORRECT" if exact_match(record.answer, q) else "WRONG"), None, None
        else:
            prompt = self.prompts[JUDGE_PROMPT].render(question=q.question, gold_answer=q.gold,
                                                       generated_answer=record.answer)
            result = self.judge.complete("judge", [{"role": "user", "content": prompt}], json_mode=True)
            (label, reason), usage = _label(result.text), _usage(result)
        with self._lock:
            record.label, record.judge_reason, record.judge_usage = label, reason, usage

    def _retrieve(self, mode: Mode, conv: Conversation, q: Question, mem: Memory) -> tuple[QuestionResult, MemoryBlock]:
        started = time.perf_counter()
        # No time budget: the figures must not depend on how busy the machine is (latency is reported).
        block = mem.context([{"role": "user", "content": q.question}], budget=self.s.budget,
                            max_tokens=self.s.max_tokens, time_budget_ms=None)
        elapsed = (time.perf_counter() - started) * 1000
        found = _evidence_ids(mem, block)
        return QuestionResult(
            mode=mode, conversation_id=conv.conversation_id, index=q.index, category=q.category,
            question=q.question, gold=q.gold, evidence=sorted(q.evidence), found=sorted(found),
            evidence_recall=evidence_recall(found, q.evidence), pointers=[p.id for p in block.pointers],
            block_tokens=block.tokens, context_ms=round(elapsed, 3), degraded_reason=block.degraded_reason,
        ), block

    def _interrupted(self, exc: ModelError) -> ModelError:
        """The same failure, its message saying what was kept and how to go on."""
        self.save()
        return type(exc)(f"{exc} -- the {sum(self._done(r) for r in self.records.values())} judged question(s) "
                         f"are kept in {self.s.out}; run the same command again to resume",
                         model=exc.model, status_code=exc.status_code, error_class=exc.error_class, body=exc.body)

    def _done(self, record: QuestionResult | None) -> bool:
        return record is not None and record.label is not None

    # -- the report --------------------------------------------------------------------------

    @contextmanager
    def saving(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.save()

    def save(self, *, throttled: bool = False) -> None:
        now = time.monotonic()
        if throttled and now - self._saved_at < SAVE_EVERY_S:
            return
        self._saved_at = now
        with self._lock:
            records = [r.model_copy() for r in self.records.values()]
        records.sort(key=lambda r: (self.s.modes.index(r.mode), r.conversation_id, r.index))
        expected = len(self.s.modes) * sum(len(c.questions) for c, _, _ in self.conversations)
        complete = sum(self._done(r) for r in records) == expected
        usage = {mode: [a for sessions in per_conv.values() for attempts in sessions.values() for a in attempts]
                 for mode, per_conv in self.extraction.items()}
        from .. import __version__

        self.report = {
            "format": REPORT_FORMAT,
            "tool": "tortoise eval locomo",
            "tortoise_version": __version__,
            "status": "complete" if complete else "incomplete",
            "started_at": self.started_at,
            "updated_at": _now(),
            "settings": self.config,
            "summary": summarize(records, self.s.modes, usage),
            "extraction": self.extraction,
            "questions": [r.model_dump(mode="json") for r in records],
        }
        write_atomic(self.s.out, json.dumps(self.report, ensure_ascii=False, indent=1) + "\n")
        write_atomic(self.s.out.with_suffix(".md"), render_markdown(self.report))


def _load(files: Sequence[str | Path]) -> list[tuple[Conversation, Path, str]]:
    out, seen = [], {}
    for name in files:
        path = Path(name)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"cannot read: {exc.strerror}", field=str(path)) from None
        digest = hashlib.sha256(raw).hexdigest()
        for conv in load_conversations(path):
            if conv.conversation_id in seen:
                raise InvalidInput(f"conversation {conv.conversation_id} is also in {seen[conv.conversation_id]}; "
                                   "pass each conversation once", field=str(path))
            seen[conv.conversation_id] = path
            out.append((conv, path, digest))
    return out


def _attempt(report: ExtractionReport) -> dict[str, Any]:
    """One extraction of a session as the report keeps it: outcome, errors, and its calls' usage totals.

    ``failed`` marks an attempt none of whose calls produced anything (so none was billed).
    """
    total = report.stages.get("total") or StageStats()
    return {
        "status": report.status, "reason": report.reason, "counts": report.counts,
        "errors": [f"{d.stage}: {d.code}" for d in report.errors],
        "provider_failed": report.status == "failed" or any(d.code in PROVIDER_FAILURES for d in report.errors),
        "calls": total.calls, "prompt_tokens": total.prompt_tokens, "completion_tokens": total.completion_tokens,
        "cost_usd": total.cost_usd,
        "failed": bool(report.errors) and total.prompt_tokens is None and total.completion_tokens is None,
    }


def _provider_failed(attempt: dict[str, Any]) -> bool:
    return bool(attempt.get("provider_failed")) or attempt.get("status") == "failed"


def _comparable(value: Any) -> Any:
    """Settings as compared on resume: the files by content, not by the path they were given as."""
    if isinstance(value, list) and value and isinstance(value[0], dict) and "sha256" in value[0]:
        return [{k: v for k, v in item.items() if k != "file"} for item in value]
    return value


def _evidence_ids(mem: Memory, block: MemoryBlock) -> set[str]:
    """The dialogue ids a block leads to: a turn's own id, a memory's source turns."""
    found: set[str] = set()
    for p in block.pointers:
        if p.kind == "turn":
            if p.external_id:
                found.add(p.external_id)
            continue
        found.update(s.external_id for s in mem.expand(p.id).sources if s.external_id)
    return found


def _block_answer(block: MemoryBlock) -> str:
    """With no answer model: what the block retrieved (its pointers' labels and text), or, when it is
    empty, the answer a reader given nothing would give."""
    if not block.pointers:
        return NOT_MENTIONED
    return "\n".join(f"{p.label}: {p.synopsis}" for p in block.pointers)


def _usage(result: LLMResult) -> CallUsage:
    return CallUsage(model=result.model, attempts=result.attempts, prompt_tokens=result.prompt_tokens,
                     completion_tokens=result.completion_tokens, cost_usd=result.cost_usd)


def _label(text: str) -> tuple[Literal["CORRECT", "WRONG"] | None, str | None]:
    """The judge's label: the JSON ``label`` field, else the only label word in the reply (None if not one)."""
    reason = None
    try:
        value = parse_json(text, "object").value
    except MalformedOutput:
        value = None
    if isinstance(value, dict):
        label = str(value.get("label", "")).strip().upper()
        reason = value.get("reason") if isinstance(value.get("reason"), str) else None
        if label in ("CORRECT", "WRONG"):
            return label, reason  # type: ignore[return-value]
    words = set(_LABEL.findall(text))
    if len(words) == 1:
        return words.pop(), reason  # type: ignore[return-value]
    return None, reason or text.strip()[:300] or None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

