"""``tortoise capture``: turns, a batch of sessions, or a whole agent transcript (ingest)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import InvalidInput
from ._common import (
    add_model_options,
    emit_json,
    extract_mode,
    model_options,
    open_memory,
    progress,
    read_json_records,
    read_text,
    report_line,
)

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``capture``."""
    _register_capture(sub)


def _cmd_capture(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.file == "-" else None
    records = None
    if args.format == "auto":
        records = _turn_records(args.file, text)
    if args.format != "turns" and records is None:
        return _cmd_ingest(args, text)
    if records is None:
        records = read_json_records(args.file, text)
    is_batch = all(isinstance(r, dict) and "turns" in r for r in records)
    mem = open_memory(args, **model_options(args))
    with mem:
        if is_batch:
            if args.session or args.key:
                raise InvalidInput("--session and --key apply to a single-session file, not a batch of sessions",
                                   field="--session")
            batch = [dict(r, date=r.get("date", args.date)) for r in records]
            with progress(len(batch), "importing sessions") as advance:
                receipts = mem.capture_many(batch, extract=extract_mode(args), chunk_size=100, progress=advance)
        else:
            if not args.session:
                raise InvalidInput("a file of turns needs --session ID", field="--session")
            receipts = [mem.capture(args.session, records, session_date=args.date, idempotency_key=args.key,
                                    extract=extract_mode(args))]
    if args.json:
        emit_json(receipts if is_batch else receipts[0])
    else:
        stored = sum(r.turns_stored for r in receipts)
        received = sum(r.turns_received for r in receipts)
        replayed = sum(r.replayed for r in receipts)
        print(f"captured {len(receipts)} session(s): {stored} new turn(s) of {received} received"
              + (f", {replayed} replayed" if replayed else ""))
        for r in receipts:
            if r.extraction is not None:
                print(f"extraction {r.session_id}: {report_line(r.extraction)}")
    return 0


def _turn_records(path: str, text: str | None) -> list[Any] | None:
    """The records of a file of turns or session objects (today's capture input); None for any other stream."""
    try:
        records = read_json_records(path, text)
    except InvalidInput:
        first = next((line for line in (text if text is not None else read_text(path)).splitlines()
                      if line.strip()), "")
        if not first:
            raise  # empty input: report it as before
        try:
            head = json.loads(first)
        except json.JSONDecodeError:
            return None
        if isinstance(head, dict) and ("turns" in head or {"role", "content"} <= head.keys()):
            raise  # a file of turns with a bad line: report it as before
        return None
    turnish = all(isinstance(r, dict) and ("turns" in r or {"role", "content"} <= r.keys()) for r in records)
    return records if turnish else None


def _cmd_ingest(args: argparse.Namespace, text: str | None) -> int:
    if args.key or args.date:
        raise InvalidInput("--key and --date apply to --format turns; a transcript carries its own ids and times",
                           field="--key" if args.key else "--date")
    with open_memory(args, **model_options(args)) as mem:
        report = mem.ingest(text.splitlines() if text is not None else args.file,
                            format=args.format, session_id=args.session, extract=extract_mode(args))
    if args.json:
        emit_json(report)
        return _ingest_exit_code(report)
    c = report.counters
    print(f"ingested {report.format}: {report.sessions} session(s), {report.turns_stored} new turn(s) of "
          f"{report.turns_received}; {report.frames_recorded} of {report.frames} sub-agent frame(s) recorded"
          + "".join(f", {n} {label}" for n, label in ((c.skipped_no_identity, "without identity"),
                                                      (c.anomalous_value, "anomalous value(s)"),
                                                      (c.failed, "failed")) if n))
    skipped = report.parse.skip_reasons()
    if skipped:
        print("lines not used: " + ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())),
              file=sys.stderr)
    for r in report.receipts:
        if r.extraction is not None and r.extraction.status != "skipped":
            print(f"extraction {r.session_id}: {report_line(r.extraction)}")
    for d in report.errors:
        print(f"tortoise: session {(d.detail or {}).get('session_id')}: {d.message}", file=sys.stderr)
    return _ingest_exit_code(report)


def _ingest_exit_code(report: Any) -> int:
    """0 when every session was captured; 2 when only the input was at fault (conflicts); else 1."""
    if report.ok:
        return 0
    user_errors = {"CaptureConflict", "IdempotencyConflict", "InvalidInput"}
    return 2 if all(d.code in user_errors for d in report.errors) else 1


def _register_capture(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capture", help="capture turns (JSONL), a batch of sessions, or an agent transcript",
                       description="Capture one session's turns (JSONL of turns, needs --session), a batch of "
                                   'session objects {"session_id", "date"?, "turns"}, or a whole agent transcript '
                                   "(Claude Code, Claude stream-json, ACP): its turns and sub-agent invocations. "
                                   "Examples: tortoise capture chat.jsonl --session s1 --date 2023-05-08T13:56:00; "
                                   "tortoise capture ~/.claude/projects/app/SESSION.jsonl")
    p.add_argument("file", help="path, or - for stdin")
    p.add_argument("--format", choices=("auto", "turns", "claude-code", "stream-json", "acp"), default="auto",
                   help="input format (default: %(default)s, detected from the first lines)")
    p.add_argument("--session", help="session id for a file of turns (for a transcript: lines naming none)")
    p.add_argument("--date", help="session date, ISO 8601")
    p.add_argument("--key", help="idempotency key")
    p.add_argument("--json", action="store_true", help="print the receipt(s) as JSON")
    p.add_argument("--extract", choices=("inline", "background", "off"),
                   help="extract memories now, queue a job for `tortoise worker`, or not at all "
                        "(default: inline when a model is configured)")
    add_model_options(p)
    p.set_defaults(handler=_cmd_capture)
