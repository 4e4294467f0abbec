"""Extraction from the command line: ``extract`` a stored session now, ``flush`` what is queued, or run the ``worker``."""

from __future__ import annotations

import argparse
import sys

from ..models import JobInfo
from ._common import (
    EXIT_EXTRACTION_FAILED,
    add_embedder_options,
    add_model_options,
    bounded_int,
    emit_json,
    explain_extraction,
    extraction_failed,
    model_options,
    open_memory,
    report_line,
)

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``extract``, ``flush`` and ``worker``."""
    _register_extract(sub)
    _register_flush(sub)
    _register_worker(sub)


def _cmd_extract(args: argparse.Namespace) -> int:
    with open_memory(args, create=False, **model_options(args)) as mem:
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
    print(f"job {job.job_id} {job.session_id}: {job.status} (attempt {job.attempts})"
          + (f" - {job.errors[-1]}" if job.errors and job.status != "done" else "")
          + (f", due again at {job.due_at.isoformat(timespec='seconds')} (`tortoise flush` runs it now)"
             if job.status == "pending" and job.due_at is not None else ""), flush=True)
    if job.status != "done" and job.errors:
        print(f"tortoise: extraction of {job.session_id} failed (job {job.job_id}, attempt {job.attempts}): "
              f"{job.errors[-1].split(': ', 1)[-1]}", file=sys.stderr, flush=True)


def _jobs_exit(mem: object, jobs: list[JobInfo]) -> int:
    """3 when a job that ran did not finish, or extraction is paused with jobs waiting; else 0."""
    paused = mem.extraction_paused()  # type: ignore[attr-defined]
    if paused:
        print(f"tortoise: {paused}", file=sys.stderr)
    failed = any(j.status != "done" for j in jobs)
    return EXIT_EXTRACTION_FAILED if failed or paused else 0


def _cmd_flush(args: argparse.Namespace) -> int:
    # Nothing can be pending in a database that does not exist: a mistyped --db is refused, not created empty.
    with open_memory(args, create=False, **model_options(args)) as mem:
        jobs = mem.flush(args.session)
        if args.json:
            emit_json(jobs)
        else:
            for job in jobs:
                _print_job(job)
            if not jobs:
                print("nothing pending")
        return _jobs_exit(mem, jobs)


def _register_flush(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("flush", help="extract now what background captures left pending",
                       description="Runs the queued extractions (of one session, or all) without waiting for their "
                                   "batch to fill. Example: tortoise flush --session chat-42")
    p.add_argument("--session", help="only this session")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    add_model_options(p)
    add_embedder_options(p)
    p.set_defaults(handler=_cmd_flush)


def _cmd_worker(args: argparse.Namespace) -> int:
    ran: list[JobInfo] = []

    def on_job(job: JobInfo) -> None:
        ran.append(job)
        _print_job(job)

    with open_memory(args, **model_options(args)) as mem:
        mem.run_worker(poll_s=args.poll, once=args.once, max_jobs=args.max_jobs, on_job=on_job)
        if args.once and not ran:
            print(_nothing_due(mem.store.jobs(mem.namespace, status="pending")), flush=True)
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
                                   "unreachable) no job runs for a minute. Exit 3: a job that ran failed. "
                                   "Example: tortoise worker --once")
    p.add_argument("--once", action="store_true", help="run what is queued now, then exit")
    p.add_argument("--max-jobs", type=bounded_int(1, 10**9), help="exit after this many jobs")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between polls (default: %(default)s)")
    add_model_options(p)
    add_embedder_options(p)
    p.set_defaults(handler=_cmd_worker)
