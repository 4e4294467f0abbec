"""The ``tortoise`` command line: each subcommand calls one ``Memory`` method.

Exit codes: 0 success, 2 invalid input (one line on stderr), 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError, IdempotencyConflict, InvalidInput, NotFoundError, StreamParseError, TortoiseError

__all__ = ("main",)

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console-script entry point)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (InvalidInput, ConfigError, NotFoundError, StreamParseError, IdempotencyConflict) as exc:
        print(f"tortoise: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user gave cannot be read or written
        print(f"tortoise: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except TortoiseError as exc:
        print(f"tortoise: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tortoise", description="Long-term memory for LLM agents.")
    parser.add_argument("--db", help="SQLite path or postgresql:// URL (default: $TORTOISE_DB or ~/.tortoise/memory.db)")
    parser.add_argument("--namespace", default="default", help="namespace to act in (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in REGISTRY:
        register(sub)
    return parser


def open_memory(args: argparse.Namespace, **kwargs: Any):  # noqa: ANN201 - returns Memory, imported lazily
    from .memory import Memory

    return Memory(args.db, namespace=args.namespace, **kwargs)


def run_and_print(
    args: argparse.Namespace, call: Callable[[Any], Any], text: Callable[[Any], object], **options: Any
) -> int:
    """Open the memory, ``call`` one method on it, print the result; returns 0.

    With ``--json`` the result is printed as one JSON document, else ``text(result)`` prints it.
    """
    with open_memory(args, **options) as mem:
        result = call(mem)
    if args.json:
        emit_json(result)
    else:
        text(result)
    return 0


def emit_json(doc: Any) -> None:
    """Print one JSON document (pydantic models are dumped in JSON mode)."""
    print(json.dumps(_jsonable(doc), ensure_ascii=False, indent=2))


def _jsonable(doc: Any) -> Any:
    if hasattr(doc, "model_dump"):
        return doc.model_dump(mode="json")
    if isinstance(doc, list):
        return [_jsonable(d) for d in doc]
    if isinstance(doc, dict):
        return {k: _jsonable(v) for k, v in doc.items()}
    return doc


# -- capture -----------------------------------------------------------------------------------


def read_json_records(path: str, text: str | None = None) -> list[Any]:
    """JSON or JSONL from a file or ``-`` (or its ``text``, already read); a top-level JSON list is its items."""
    if text is None:
        text = sys.stdin.read() if path == "-" else _read_text(path)
    stripped = text.strip()
    if not stripped:
        raise InvalidInput("the input is empty", field=path)
    if stripped[0] == "[":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"not valid JSON: {exc}", field=path) from None
        return list(data)
    records = []
    for n, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if n == 1:
                try:  # a single pretty-printed JSON object
                    return [json.loads(stripped)]
                except json.JSONDecodeError:
                    pass
            raise InvalidInput(f"line {n} is not valid JSON: {exc.msg}", field=path) from None
    return records


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read file: {exc.strerror}", field=path) from None


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar on a terminal for long imports."""
    if total < 50 or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, total: bar.update(task, completed=done)


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
    mem = open_memory(args, **_model_options(args))
    with mem:
        if is_batch:
            if args.session or args.key:
                raise InvalidInput("--session and --key apply to a single-session file, not a batch of sessions",
                                   field="--session")
            batch = [dict(r, date=r.get("date", args.date)) for r in records]
            with _progress(len(batch), "importing sessions") as advance:
                receipts = mem.capture_many(batch, extract=_extract_mode(args), chunk_size=100, progress=advance)
        else:
            if not args.session:
                raise InvalidInput("a file of turns needs --session ID", field="--session")
            receipts = [mem.capture(args.session, records, session_date=args.date, idempotency_key=args.key,
                                    extract=_extract_mode(args))]
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
                print(f"extraction {r.session_id}: {_report_line(r.extraction)}")
    return 0


def _turn_records(path: str, text: str | None) -> list[Any] | None:
    """The records of a file of turns or session objects (today's capture input); None for any other stream."""
    try:
        records = read_json_records(path, text)
    except InvalidInput:
        first = next((line for line in (text if text is not None else _read_text(path)).splitlines()
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
    with open_memory(args, **_model_options(args)) as mem:
        report = mem.ingest(text.splitlines() if text is not None else args.file,
                            format=args.format, session_id=args.session, extract=_extract_mode(args))
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
            print(f"extraction {r.session_id}: {_report_line(r.extraction)}")
    for d in report.errors:
        print(f"tortoise: session {(d.detail or {}).get('session_id')}: {d.message}", file=sys.stderr)
    return _ingest_exit_code(report)


def _ingest_exit_code(report: Any) -> int:
    """0 when every session was captured; 2 when only the input was at fault (conflicts); else 1."""
    if report.ok:
        return 0
    user_errors = {"CaptureConflict", "IdempotencyConflict", "InvalidInput"}
    return 2 if all(d.code in user_errors for d in report.errors) else 1


def _model_options(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in (("model", getattr(args, "model", None)), ("api_base", getattr(args, "api_base", None)))
            if v}


def _extract_mode(args: argparse.Namespace) -> Any:
    mode = getattr(args, "extract", None)
    return {"inline": "inline", "background": "background", "off": False}.get(mode) if mode else None


def _report_line(e: Any) -> str:
    parts = [e.status]
    if e.outcomes:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(e.outcomes.items())))
    if e.reason:
        parts.append(e.reason)
    if e.job_id:
        parts.append(f"job {e.job_id}")
    return " - ".join(parts)


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="litellm model for extraction (default: $TORTOISE_MODEL)")
    p.add_argument("--api-base", help="model endpoint URL, e.g. http://localhost:8000/v1")


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
    _add_model_options(p)
    p.set_defaults(handler=_cmd_capture)


# -- sub-agents and stats -----------------------------------------------------------------------


def _cmd_subagents(args: argparse.Namespace) -> int:
    return run_and_print(args, lambda mem: mem.subagents(session_id=args.session), _print_subagents)


def _print_subagents(rows: list[Any]) -> None:
    if not rows:
        print("no sub-agent invocations recorded (ingest a transcript with `tortoise capture FILE`)", file=sys.stderr)
        return
    from rich.console import Console
    from rich.table import Table

    nested = any(r.parent_tool_call_id for r in rows)
    table = Table(box=None, header_style="bold")
    for name in ("observed", "session", "tool call", "type", "description", "status", "async",
                 "tokens", "tools", "duration", *(("parent",) if nested else ())):
        table.add_column(name, justify="right" if name in ("tokens", "tools", "duration") else "left",
                         no_wrap=name != "description", min_width=12 if name == "description" else None)
    for r in rows:
        status = r.tool_status or "-"
        if r.agent_status and r.agent_status != r.tool_status:
            status += f" ({r.agent_status})"
        table.add_row(
            r.observed_at.strftime("%Y-%m-%d %H:%M:%S"), _short(r.session_id), r.tool_call_id,
            r.subagent_type or "-", r.description or "-", status + ("" if r.settled_at else " …"),
            "yes" if r.is_async else "", _num(r.total_tokens), _num(r.tool_use_count),
            "-" if r.duration_ms is None else f"{r.duration_ms / 1000:.1f}s",
            *((r.parent_tool_call_id or "",) if nested else ()),
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _short(text: str, width: int = 12) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _register_subagents(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("subagents", help="list recorded sub-agent invocations",
                       description="One row per sub-agent invocation (Task/Agent tool calls ...), in observed "
                                   "order; '-' is a figure the stream did not report. "
                                   "Example: tortoise subagents --session SESSION --json")
    p.add_argument("--session", help="only this session")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_subagents)


def _cmd_stats(args: argparse.Namespace) -> int:
    return run_and_print(args, _stats, _print_stats)


def _stats(mem: Any) -> dict[str, Any]:
    sessions = mem.sessions()
    return {
        "namespace": mem.namespace,
        "sessions": len(sessions),
        "turns": sum(s.turn_count for s in sessions),
        "subagents": len(mem.subagents()),
        "subagent_counters": mem.subagent_counters().model_dump(),
    }


def _print_stats(doc: dict[str, Any]) -> None:
    print(f"namespace {doc['namespace']}: {doc['sessions']} session(s), {doc['turns']} turn(s), "
          f"{doc['subagents']} sub-agent invocation(s)")
    print("sub-agent frames: " + ", ".join(f"{k} {v}" for k, v in doc["subagent_counters"].items()))


def _register_stats(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="counts of sessions, turns and sub-agent invocations, and recorder counters",
                       description="Example: tortoise stats --json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_stats)


# -- extraction: extract, memories, worker -----------------------------------------------------


def _cmd_extract(args: argparse.Namespace) -> int:
    with open_memory(args, **_model_options(args)) as mem:
        report = mem.extract(args.session)
    if args.json:
        emit_json(report)
    else:
        print(f"extraction {args.session}: {_report_line(report)}")
        for d in report.errors + report.warnings:
            print(f"  {d.stage} {d.code}: {d.message}", file=sys.stderr)
    return 0 if report.status != "failed" else 1


def _register_extract(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extract", help="(re-)extract memories from a stored session",
                       description="Example: TORTOISE_MODEL=openai/gpt-4o-mini tortoise extract s1")
    p.add_argument("session", help="session id")
    p.add_argument("--json", action="store_true", help="print the extraction report as JSON")
    _add_model_options(p)
    p.set_defaults(handler=_cmd_extract)


def _cmd_memories(args: argparse.Namespace) -> int:
    return run_and_print(args, lambda mem: mem.memories(args.session, include_superseded=args.all), _print_memories)


def _print_memories(records: list[Any]) -> None:
    for m in records:
        status = "" if m.status == "live" else f" ({m.status})"
        when = f" [{m.when}]" if m.when else ""
        print(f"{m.id}  {m.kind}{status}{when}: {m.content}")
    if not records:
        print("no memories (capture with a model configured, or run `tortoise extract SESSION`)", file=sys.stderr)


def _register_memories(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memories", help="list extracted memories",
                       description="Example: tortoise memories --session s1 --json")
    p.add_argument("--session", help="only memories from this session")
    p.add_argument("--all", action="store_true", help="include superseded and retracted memories")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_memories)


def _cmd_worker(args: argparse.Namespace) -> int:
    import time

    with open_memory(args, **_model_options(args)) as mem:
        ran = 0
        while True:
            jobs = mem.process_pending(max_jobs=None if args.max_jobs is None else args.max_jobs - ran)
            for job in jobs:
                print(f"job {job.job_id} {job.session_id}: {job.status} (attempt {job.attempts})"
                      + (f" - {job.errors[-1]}" if job.errors and job.status != "done" else ""))
            ran += len(jobs)
            if args.once or (args.max_jobs is not None and ran >= args.max_jobs):
                return 0
            time.sleep(args.poll)


def _register_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run queued background extractions",
                       description="Runs jobs queued by `capture --extract background`. Example: tortoise worker --once")
    p.add_argument("--once", action="store_true", help="run what is queued now, then exit")
    p.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between polls (default: %(default)s)")
    _add_model_options(p)
    p.set_defaults(handler=_cmd_worker)


# -- search, sessions, export ------------------------------------------------------------------


def _cmd_search(args: argparse.Namespace) -> int:
    return run_and_print(args, lambda mem: mem.search(args.query, k=args.k, session_id=args.session), _print_hits)


def _print_hits(hits: list[Any]) -> None:
    for h in hits:
        who = h.name or h.role
        date = f" {h.session_date}" if h.session_date else ""
        print(f"{h.score:7.3f}  [{h.session_id}#{h.index}{date}] {who}: {_one_line(h.content)}")
    if not hits:
        print("no matches", file=sys.stderr)


def _one_line(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _register_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="BM25 search over captured turns",
                       description="Example: tortoise search 'where does Maya work' --k 5")
    p.add_argument("query")
    p.add_argument("--k", type=int, default=10, help="number of hits (default: %(default)s)")
    p.add_argument("--session", help="only this session")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_search)


def _cmd_sessions(args: argparse.Namespace) -> int:
    return run_and_print(args, lambda mem: mem.sessions(), _print_sessions)


def _print_sessions(sessions: list[Any]) -> None:
    for s in sessions:
        print(f"{s.session_id}\t{s.session_date or '-'}\t{s.turn_count} turns")


def _register_sessions(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="list captured sessions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_sessions)


def _cmd_export(args: argparse.Namespace) -> int:
    from .graph import export_graph

    with open_memory(args) as mem:
        g = mem.graph()
    export_graph(g, args.out, args.format)
    print(f"wrote {g.number_of_nodes()} nodes and {g.number_of_edges()} edges to {args.out}", file=sys.stderr)
    return 0


def _register_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export the memory graph (GraphML or node-link JSON)")
    p.add_argument("--format", choices=("graphml", "json"), default="graphml")
    p.add_argument("out", help="output file")
    p.set_defaults(handler=_cmd_export)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def _register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="capture a sample conversation into the embedded store and search it")
    p.set_defaults(handler=_cmd_demo)


def _cmd_migrate_store(args: argparse.Namespace) -> int:
    # Copies a whole database (every namespace), which no namespaced Memory method covers.
    from .memory import migrate_store

    report = migrate_store(args.src, args.dst, progress=None if args.json else _print_copied)
    if args.json:
        emit_json({"source": report.source, "destination": report.destination,
                   "schema_version": report.schema_version, "rows": report.rows, "namespaces": report.namespaces})
    else:
        print(f"copied {report.total} rows ({len(report.namespaces)} namespace(s)) into {report.destination}")
    return 0


def _print_copied(table: str, rows: int) -> None:
    print(f"{table}: {rows} rows", file=sys.stderr)


def _register_migrate_store(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("migrate-store", help="copy a SQLite memory into an empty PostgreSQL database",
                       description="Copies every namespace, turn, receipt, memory and job, ids kept, in one "
                                   "transaction. Example: tortoise migrate-store ~/.tortoise/memory.db "
                                   "postgresql://app@db.internal/tortoise")
    p.add_argument("src", help="SQLite path (or sqlite:///path)")
    p.add_argument("dst", help="postgresql:// URL of an empty database")
    p.add_argument("--json", action="store_true", help="print the copy report as JSON")
    p.set_defaults(handler=_cmd_migrate_store)


# -- context and expand (the reflex) -----------------------------------------------------------


def _cmd_context(args: argparse.Namespace) -> int:
    window = read_json_records(args.window)
    if not all(isinstance(t, (dict, str)) for t in window):
        raise InvalidInput('expected turns such as {"role": "user", "content": "..."}', field=args.window)
    prior = _read_prior(args.prior) if args.prior else None
    return run_and_print(args, lambda mem: mem.context(window, prior, budget=args.budget, max_tokens=args.max_tokens,
                                                       session_id=args.session), _print_block)


def _print_block(block: Any) -> None:
    if block.block:
        print(block.block)
        for p, why in zip(block.pointers, block.why):
            print(f"# {p.id}: {why}", file=sys.stderr)
    else:
        reason = f" ({block.degraded_reason})" if block.degraded_reason else ""
        print(f"no memory block: nothing relevant{reason}", file=sys.stderr)


def _read_prior(path: str) -> Any:
    """Prior context: a block from ``tortoise context --json``, a JSON/JSONL list of turns, or plain text."""
    from .models import MemoryBlock

    text = sys.stdin.read() if path == "-" else _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            return read_json_records(path, text)
        except InvalidInput:
            return text
    if isinstance(doc, dict) and "block" in doc:
        return MemoryBlock.model_validate(doc)
    return doc if isinstance(doc, list) else text


def _register_context(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("context", help="the memory block the next model call would receive",
                       description="Reads the recent conversation (JSON/JSONL turns) and prints the bounded memory "
                                   "block for it; reasons go to stderr. Example: tortoise context --window chat.jsonl "
                                   "--budget 5")
    p.add_argument("--window", required=True, help="recent turns, JSON or JSONL file (or - for stdin)")
    p.add_argument("--prior", help="what the model was already shown: a block from --json, turns, or text")
    p.add_argument("--budget", type=int, default=3, help="at most this many pointers, cap 8 (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=400, help="token cap for the whole block (default: %(default)s)")
    p.add_argument("--session", help="the conversation the window belongs to")
    p.add_argument("--json", action="store_true", help="print the MemoryBlock as JSON")
    p.set_defaults(handler=_cmd_context)


def _cmd_expand(args: argparse.Namespace) -> int:
    return run_and_print(args, lambda mem: mem.expand(args.id), _print_expanded)


def _print_expanded(full: Any) -> None:
    date = f" {full.session_date[:10]}" if full.session_date else ""
    print(f"{full.kind} {full.id} [{full.status}] {full.session_id or ''}{date}")
    print(full.content)
    for m in full.supersession:
        print(f"  version: [{m.status}] {m.content}")
    for s in full.sources:
        print(f'  source {s.external_id or s.turn_id}: "{s.quote or ""}"')
    for h in full.surrounding:
        mark = ">" if h.turn_id in (full.id, *(s.turn_id for s in full.sources)) else " "
        print(f"  {mark} [{h.session_id}#{h.index}] {h.name or h.role}: {_one_line(h.content)}")


def _register_expand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("expand", help="the full turn or memory behind a pointer id",
                       description="Example: tortoise expand t_3ad9b9e04bb769be6516")
    p.add_argument("id", help="a pointer id from `tortoise context` (t_... or m_...)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_expand)


def _register_hosts(sub: argparse._SubParsersAction) -> None:
    from .cli_hosts import register

    register(sub)


def _register_eval(sub: argparse._SubParsersAction) -> None:
    from .cli_eval import register

    register(sub)


REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = [
    _register_capture,
    _register_search,
    _register_sessions,
    _register_export,
    _register_extract,
    _register_memories,
    _register_worker,
    _register_demo,
    _register_migrate_store,
    _register_subagents,
    _register_stats,
    _register_context,
    _register_expand,
    _register_hosts,
    _register_eval,
]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
