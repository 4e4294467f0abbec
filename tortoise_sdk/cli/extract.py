"""Extraction from the command line: ``extract`` a stored session now, ``flush`` what is queued, run the ``worker``,
or list the ``jobs``.

``flush`` and ``worker --once`` exit 3 while a job of the namespace is failed for good (its
attempts spent), saying how many and that ``tortoise flush --retry-failed`` queues them again:
a scheduled flush must not report success while turns wait that no run will read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..models import JobInfo
from ..memory import MAX_POLL_S
from ._common import (
    EXIT_EXTRACTION_FAILED,
    add_embedder_options,
    add_model_options,
    bounded_float,
    bounded_int,
    cli_terms,
    emit_json,
    explain_extraction,
    extraction_failed,
    model_options,
    name_other_namespaces,
    open_memory,
    report_line,
)

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``extract``, ``flush``, ``worker`` and ``jobs``."""
    _register_extract(sub)
    _register_flush(sub)
    _register_worker(sub)
    _register_jobs(sub)


def _cmd_extract(args: argparse.Namespace) -> int:
    with open_memory(args, create=False, **model_options(args)) as mem:
        mem.reset_breaker()  # an extraction asked for by name is tried now, a model pause another process kept aside
        report = mem.extract(args.session, full=args.full)
    if args.json:
        emit_json(report)
    else:
        print(f"extraction {args.session}: {report_line(report)}")
        explain_extraction(args.session, report)
        for d in report.warnings:
            print(f"  {d.stage} {d.code}: {d.message}", file=sys.stderr)
    return EXIT_EXTRACTION_FAILED if extraction_failed(report) else 0


def _register_extract(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extract", help="(re-)extract memories from a stored session",
                       description="Example: TORTOISE_MODEL=openai/gpt-4o-mini tortoise extract s1")
    p.add_argument("session", help="session id")
    p.add_argument("--full", action="store_true",
                   help="read every turn again, not only those captured since the last extraction")
    p.add_argument("--json", action="store_true", help="print the extraction report as JSON")
    add_model_options(p)
    p.set_defaults(handler=_cmd_extract)


def _print_job(job: JobInfo) -> None:
    """The job's state on stdout; when it did not finish, its error once, on stderr."""
    print(f"job {job.job_id} {job.session_id}: {job.status} (attempt {job.attempts})"
          + (f", turns {job.turns[0]}-{job.turns[1]} wait" if job.turns and job.status != "done" else "")
          + (f", due again at {job.due_at.isoformat(timespec='seconds')} (`tortoise flush` runs it now)"
             if job.status == "pending" and job.due_at is not None else ""), flush=True)
    if _failed(job):
        print(f"tortoise: extraction of {job.session_id} failed (job {job.job_id}, attempt {job.attempts}): "
              f"{job.errors[-1].split(': ', 1)[-1]}", file=sys.stderr, flush=True)


def _failed(job: JobInfo) -> bool:
    return job.status != "done" and bool(job.errors)


def _jobs_exit(mem: object, jobs: list[JobInfo]) -> int:
    """3 when a job that ran did not finish, a job is failed for good, or extraction is paused; else 0."""
    # A job's failure was just said: the pause that failure opened is named without repeating it.
    paused = mem.extraction_paused(cause=not any(map(_failed, jobs)))  # type: ignore[attr-defined]
    if paused:
        print(f"tortoise: {cli_terms(paused)}", file=sys.stderr)
    failed = any(j.status != "done" for j in jobs)
    for_good = _say_failed_for_good(mem)
    return EXIT_EXTRACTION_FAILED if failed or paused or for_good else 0


def _say_failed_for_good(mem: object) -> int:
    """Say on stderr how many jobs are failed for good and how to queue them again; return how many."""
    failed = mem.jobs(status="failed")  # type: ignore[attr-defined]
    if failed:
        sessions = ", ".join(dict.fromkeys(j.session_id for j in failed))
        print(f"tortoise: {len(failed)} job(s) failed for good ({sessions}); run `tortoise flush --retry-failed` "
              "to queue them again (`tortoise jobs --status failed` says why)", file=sys.stderr, flush=True)
    return len(failed)


def _cmd_flush(args: argparse.Namespace) -> int:
    # Nothing can be pending in a database that does not exist: a mistyped --db is refused, not created empty.
    with open_memory(args, create=False, **model_options(args)) as mem:
        if args.retry_failed and not mem.model:  # re-queueing calls no model (POST /jobs/retry-failed takes none)
            return _requeue_only(mem, args)
        jobs = mem.flush(args.session, retry_failed=args.retry_failed)
        if args.json:
            emit_json(jobs)
        else:
            for job in jobs:
                _print_job(job)
            # A session's jobs run one at a time: one queued while another worker runs that session waits for it.
            waiting = [j for j in mem.jobs(status="pending", session_id=args.session)
                       if any(r.session_id == j.session_id for r in mem.jobs(status="running"))]
            if waiting:
                sessions = ", ".join(dict.fromkeys(j.session_id for j in waiting))
                print(f"{len(waiting)} job(s) left pending: another worker is running a job of the same session "
                      f"({sessions}); they run when it ends (`tortoise jobs` lists them)")
            elif not jobs and not mem.extraction_paused():  # a pause holds the pending jobs: said on stderr
                print("nothing pending")
                name_other_namespaces(mem)  # a flush of the wrong namespace says where the data is
        return _jobs_exit(mem, jobs)


def _requeue_only(mem: Any, args: argparse.Namespace) -> int:
    """``flush --retry-failed`` without a model: queue the jobs failed for good again, run none; exit 0."""
    failed = mem.jobs(status="failed", session_id=args.session)
    queued = mem.retry_failed_jobs(args.session)
    if args.json:
        emit_json(queued)
        return 0
    for job in queued:
        _print_job(job)
    if failed:
        print(f"queued {len(failed)} job(s) that had failed for good again; no model is configured, so none ran: "
              "`tortoise worker --model M` or `tortoise flush --model M` runs them")
    else:
        print("no job had failed for good" + (f" in session {args.session}" if args.session else ""))
        name_other_namespaces(mem)
    return 0


def _register_flush(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("flush", help="extract now what background captures left pending",
                       description="Runs the queued extractions (of one session, or all) without waiting for their "
                                   "batch to fill. Example: tortoise flush --session chat-42")
    p.add_argument("--session", help="only this session")
    p.add_argument("--retry-failed", action="store_true",
                   help="first queue the jobs that failed for good again (their attempts start over); without a "
                        "model (--model or TORTOISE_MODEL) only that, no job runs")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    add_model_options(p)
    add_embedder_options(p)
    p.set_defaults(handler=_cmd_flush)


def _cmd_worker(args: argparse.Namespace) -> int:
    ran: list[JobInfo] = []

    def on_job(job: JobInfo) -> None:
        ran.append(job)
        _print_job(job)
        if job.status == "failed" and not args.once:
            _say_failed_for_good(mem)

    missing = ("created an empty one, whose jobs this worker runs as captures queue them: if your application "
               "writes another database, stop this worker and pass that one's path with --db (or TORTOISE_DB)")
    with open_memory(args, create=missing, **model_options(args)) as mem:
        if not args.once:
            _say_failed_for_good(mem)  # once at the start; then whenever a job fails for good
        mem.run_worker(poll_s=args.poll, once=args.once, max_jobs=args.max_jobs, on_job=on_job)
        if args.once and not ran and not mem.extraction_paused():
            print(_nothing_due(mem.jobs(status="pending")), flush=True)
            name_other_namespaces(mem)
        return _jobs_exit(mem, ran)


def _nothing_due(pending: list[JobInfo]) -> str:
    """What ``worker --once`` says when no job ran: none queued, or when the next one is due."""
    if not pending:
        return "no job queued"
    due = [j.due_at for j in pending if j.due_at is not None]
    when = f", the next due at {min(due).isoformat(timespec='seconds')}" if due else ""
    return f"no job due ({len(pending)} pending{when}; `tortoise flush` runs them now)"


def _register_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run queued background extractions",
                       description="Runs jobs queued by `capture --extract background` once they are due; waits out "
                                   "a database outage (logged, with backoff). A failed job is due again after a "
                                   "backoff; after a fatal provider failure (auth, billing, model_not_found, timeout, "
                                   "unreachable) no job runs for a minute. A job is failed for good after 3 "
                                   "attempts (`tortoise jobs --status failed`). Exit 3: a job that ran failed, or "
                                   "one is failed for good. Example: tortoise worker --once")
    p.add_argument("--once", action="store_true", help="run what is queued now, then exit")
    p.add_argument("--max-jobs", type=bounded_int(1, 10**9), help="exit after this many jobs")
    p.add_argument("--poll", type=bounded_float(0.01, MAX_POLL_S), default=2.0,
                   help="seconds between polls (default: %(default)s)")
    add_model_options(p)
    add_embedder_options(p)
    p.set_defaults(handler=_cmd_worker)


def _cmd_jobs(args: argparse.Namespace) -> int:
    with open_memory(args, create=False) as mem:
        jobs = mem.jobs(status=args.status, session_id=args.session)
        if not jobs and not args.json:
            name_other_namespaces(mem)  # the jobs of the wrong namespace: say where the data is
    if args.json:
        emit_json(jobs)
        return 0
    for job in jobs:
        turns = f"turns {job.turns[0]}-{job.turns[1]}" if job.turns else "no turn waits"
        print(f"{job.job_id} {job.session_id}: {job.status}, {job.attempts} attempt(s), {turns}, "
              f"updated {job.updated_at.isoformat(timespec='seconds')}"
              + (f" - {job.last_error}" if job.last_error and job.status != "done" else "")
              # A done job's last note: the failed attempt before its success, or the job it handed its retry to.
              + (f" (earlier: {job.last_error})" if job.last_error and job.status == "done" else ""))
    if not jobs:
        print("no jobs" + (f" {args.status}" if args.status else ""))
    return 0


def _register_jobs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="list background extraction jobs: status, attempts, last error, waiting turns",
                       description="A failed job is failed for good (its attempts spent); `tortoise flush "
                                   "--retry-failed` queues it again. Example: tortoise jobs --status failed")
    p.add_argument("--status", choices=("pending", "running", "done", "failed"), help="only jobs in this state")
    p.add_argument("--session", help="only this session's jobs")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(handler=_cmd_jobs)
