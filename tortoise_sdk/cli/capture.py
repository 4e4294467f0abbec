"""``tortoise capture``: turns, a batch of sessions, or a whole agent transcript (ingest)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ..errors import InvalidInput, StreamParseError
from ..streams import detect_format
from ._common import (
    EXIT_EXTRACTION_FAILED,
    add_model_options,
    cell,
    emit_json,
    explain_extraction,
    extract_mode,
    extraction_failed,
    model_options,
    open_memory,
    parse_json_records,
    progress,
    read_input,
    report_line,
)

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``capture``."""
    _register_capture(sub)


#: What a session of a batch looks like, for the messages that say so.
_SESSION_SHAPE = '{"session_id": "s1", "turns": [{"role": "user", "content": "..."}]}'


def _cmd_capture(args: argparse.Namespace) -> int:
    text = read_input(args.file)
    if args.format == "turns" or (args.format == "auto" and _is_turns(text)):
        return _capture_turns(args, text)
    if args.format == "auto":
        _refuse_unknown_format(text, args.file)
    return _cmd_ingest(args, text)


def _capture_turns(args: argparse.Namespace, text: str) -> int:
    from ..memory import DEFAULT_MAX_TURNS_PER_CAPTURE, Memory

    records, lines = parse_json_records(text, args.file)
    if not records:  # `[]`: all() of no record would call it a batch, and an empty one captured nothing, exit 0
        raise InvalidInput(f"the file holds no turn (an empty JSON array); nothing was captured: a turn is "
                           f'{{"role": ..., "content": ...}} per line with --session ID, a session {_SESSION_SHAPE}',
                           field=args.file)
    is_batch = all(isinstance(r, dict) and "turns" in r for r in records)
    # A file is one import, as `capture` of a transcript is: the per-call limit guards API callers, and a CLI
    # user could not raise it (a session of 50,000 turns was refused with advice no flag could follow).
    most = max([DEFAULT_MAX_TURNS_PER_CAPTURE, len(records),
                *(len(r["turns"]) for r in records if is_batch and isinstance(r.get("turns"), list))])
    batch = [dict(r, date=r.get("date", args.date)) for r in records] if is_batch else []
    try:  # before the store opens: a refused file creates no database
        if not is_batch and any(isinstance(r, dict) and "role" not in r and ("turns" in r or "session_id" in r)
                                for r in records):  # sessions, one of them (or all) without its turns
            i = next(i for i, r in enumerate(records) if not (isinstance(r, dict) and "turns" in r))
            raise InvalidInput(f'this session has no "turns" (a batch is one {_SESSION_SHAPE} per line, or a JSON '
                               "array of them)", field=f"sessions[{i}]")
        if is_batch:
            if args.session or args.key:  # named as given: `--key` alone was reported as a --session error
                given = " and ".join(f for f, v in (("--session", args.session), ("--key", args.key)) if v)
                both = " and " in given
                raise InvalidInput(f"a batch of sessions takes no {given.replace(' and ', ' or ')} "
                                   f"({'they apply' if both else 'it applies'} to a file of one session's turns; each "
                                   f"session object names its own id): drop {'them' if both else 'it'}",
                                   field="--session" if args.session else "--key")
            Memory.check_sessions(batch, max_turns_per_capture=most)
        else:
            if not args.session:
                # The turns' own faults first (items without "role" were told only to add --session).
                try:
                    Memory.check_capture("SESSION", records, session_date=args.date, idempotency_key=args.key,
                                         max_turns_per_capture=most)
                except InvalidInput as exc:
                    raise _at_line(exc, lines, args.file, also="the file also needs --session ID") from None
                raise InvalidInput("a file of turns needs --session ID", field="--session")
            Memory.check_capture(args.session, records, session_date=args.date, idempotency_key=args.key,
                                 max_turns_per_capture=most)
    except InvalidInput as exc:
        raise _at_line(exc, lines, args.file) from None
    with open_memory(args, max_turns_per_capture=most, **model_options(args)) as mem:
        try:
            if is_batch:
                with progress(len(batch), "importing sessions") as advance:
                    receipts = mem.capture_many(batch, extract=extract_mode(args), chunk_size=100, progress=advance)
            else:
                receipts = [mem.capture(args.session, records, session_date=args.date, idempotency_key=args.key,
                                        extract=extract_mode(args))]
        except InvalidInput as exc:  # a conflict with what is stored
            raise _at_line(exc, lines, args.file) from None
    failed = any(extraction_failed(r.extraction) for r in receipts if not r.replayed)
    code = EXIT_EXTRACTION_FAILED if failed else 0
    if args.json:
        emit_json(receipts if is_batch else receipts[0])
        return code
    fresh = [r for r in receipts if not r.replayed]
    replayed = len(receipts) - len(fresh)
    if fresh:
        print(f"captured {len(fresh)} session(s): {sum(r.turns_stored for r in fresh)} new turn(s) of "
              f"{sum(r.turns_received for r in fresh)} received" + (f"; {replayed} replayed" if replayed else ""))
    if replayed:
        keys = ", ".join(sorted({r.idempotency_key for r in receipts if r.replayed and r.idempotency_key}))
        print(f"{replayed} session(s) replayed, nothing new: already captured under idempotency key {keys}")
    for r in fresh:
        for w in r.warnings:
            print(f"note {cell(r.session_id)}: {w.message}", file=sys.stderr)
        if r.extraction is not None:
            print(f"extraction {cell(r.session_id)}: {report_line(r.extraction)}")
            explain_extraction(r.session_id, r.extraction)
    return code


def _is_turns(text: str) -> bool:
    """Turns or session objects, rather than an agent transcript: decided by the formats' own markers.

    A line with a top-level ``role`` (or ``turns``) is a turn (a session); otherwise the first
    lines vote as ``detect_format`` counts them. Lines that are not JSON are left to the reader
    that follows (they are a turns file's error, or a transcript's torn line).
    """
    objects = _first_objects(text)
    if not objects:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return not text.strip() or text.lstrip().startswith("[")
        objects = doc if isinstance(doc, list) else [doc]
    if all(isinstance(o, dict) and ("role" in o or "turns" in o) for o in objects):
        return True
    if any(isinstance(o, dict) and "turns" in o for o in objects) and all(
            isinstance(o, dict) and ("turns" in o or "session_id" in o) for o in objects):
        return True  # sessions, one of them without its turns: refused as such, not read as a transcript
    try:
        return detect_format(o for o in objects if isinstance(o, dict)) == "turns"
    except StreamParseError:
        return not any(isinstance(o, dict) for o in objects)


def _first_objects(text: str) -> list[Any]:
    """The JSON values of the first 200 lines that are JSON (the lines a format is detected from)."""
    objects = []
    for line in text.splitlines()[:200]:
        try:
            objects.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return objects


def _refuse_unknown_format(text: str, where: str) -> None:
    """Refuse, before the store opens, lines of JSON objects none of which is of a known format (``{"foo": 1}``):
    read as a transcript, the database was created first, and the error asked for ``format=``."""
    objects = [o for o in _first_objects(text) if isinstance(o, dict)]
    if not objects:
        return  # one JSON document over many lines, or no JSON at all: the transcript reader says what it finds
    try:
        detect_format(objects)
    except StreamParseError:
        raise InvalidInput("no line holds a turn, a session or a line of a transcript format tortoise reads "
                           f"(Claude Code, stream-json, ACP); nothing was captured: a session is {_SESSION_SHAPE} "
                           'per line (or a JSON array of them), a turn {"role": ..., "content": ...} per line with '
                           "--session ID", field=where) from None


def _at_line(exc: InvalidInput, lines: list[int | None], where: str, also: str = "") -> InvalidInput:
    """The capture's error with the input line of the turn (or session) it names; nothing was captured.

    ``also`` is a second fault of the same input, said after the first.
    """
    found = re.match(r"(?:turns|sessions)\[(\d+)\]", exc.field or "")
    index = int(found.group(1)) if found else None
    line = lines[index] if index is not None and index < len(lines) else None
    more = f"; {also}" if also else ""
    if index is None:
        return InvalidInput(f"{exc}{more}", field=None) if also else exc
    at = f"line {line}" if line is not None else f"item {index + 1}"
    return InvalidInput(f"{at}: {exc}{more}; nothing was captured", field=where)


def _cmd_ingest(args: argparse.Namespace, text: str | None) -> int:
    if args.key or args.date:
        raise InvalidInput("--key and --date apply to --format turns; a transcript carries its own ids and times",
                           field="--key" if args.key else "--date")
    with open_memory(args, **model_options(args)) as mem:
        report = mem.ingest(text.splitlines() if args.file == "-" else args.file,
                            format=args.format, session_id=args.session, extract=extract_mode(args))
    skipped = report.parse.skip_reasons()
    if args.format == "auto" and skipped and not (report.turns_received or report.frames):
        # No line holds a turn: "0 sessions" with exit 0 looked like success.
        raise InvalidInput("no line holds a turn (" + ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
                           + f"); nothing was captured: a session is {_SESSION_SHAPE} per line (or a JSON array of "
                           "them), a turn {\"role\": ..., \"content\": ...} per line with --session ID",
                           field=args.file)
    if args.format != "auto" and skipped and not (report.turns_received or report.frames):
        # A format forced on the wrong input reads nothing; "0 sessions" with exit 0 looked like success.
        raise InvalidInput(f"no line was read as {args.format} ("
                           + ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
                           + "); nothing was captured: drop --format to detect the input's format", field="--format")
    if args.json:
        emit_json(report)
        return _ingest_exit_code(report)
    c = report.counters
    print(f"ingested {report.format}: {report.sessions} session(s), {report.turns_stored} new turn(s) of "
          f"{report.turns_received}; {report.frames_recorded} of {report.frames} sub-agent frame(s) recorded"
          + "".join(f", {n} {label}" for n, label in ((c.skipped_no_identity, "without identity"),
                                                      (c.anomalous_value, "anomalous value(s)"),
                                                      (c.failed, "failed")) if n))
    if skipped:
        print("lines not used: " + ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())),
              file=sys.stderr)
    for r in report.receipts:
        if r.extraction is not None and (r.extraction.status != "skipped" or r.extraction.errors):
            print(f"extraction {cell(r.session_id)}: {report_line(r.extraction)}")
            explain_extraction(r.session_id, r.extraction)
    for d in report.errors:
        print(f"tortoise: session {(d.detail or {}).get('session_id')}: {d.message}", file=sys.stderr)
    return _ingest_exit_code(report)


def _ingest_exit_code(report: Any) -> int:
    """0 when every session was captured and extracted; 3 when captured but an extraction failed; 2 when only
    the input was at fault (conflicts); else 1."""
    if report.ok:
        failed = any(extraction_failed(r.extraction) for r in report.receipts if not r.replayed)
        return EXIT_EXTRACTION_FAILED if failed else 0
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
                   help="extract memories now, queue a job for `tortoise worker`, or not at all; inline and "
                        "background both need a model here (--model or TORTOISE_MODEL): without one nothing is "
                        "queued, and `tortoise extract SESSION --model M` extracts the turns later "
                        "(default: inline when a model is configured)")
    add_model_options(p)
    p.set_defaults(handler=_cmd_capture)
