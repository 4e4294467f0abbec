"""The ``tortoise`` command line: each subcommand calls one ``Memory`` method.

Exit codes: 0 success, 2 invalid input (one line on stderr), 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError, InvalidInput, NotFoundError, StreamParseError, TortoiseError

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
    except (InvalidInput, ConfigError, NotFoundError, StreamParseError) as exc:
        print(f"tortoise: {exc}", file=sys.stderr)
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


def read_json_records(path: str) -> list[Any]:
    """JSON or JSONL from a file or ``-``; a top-level JSON list is its items."""
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


def _progress(items: list[Any], label: str) -> Iterator[Any]:
    """Yield items, showing a progress bar on a terminal for long imports."""
    if len(items) < 50 or not sys.stderr.isatty():
        yield from items
        return
    from rich.progress import track

    yield from track(items, description=label, console=None, transient=True)


def _cmd_capture(args: argparse.Namespace) -> int:
    records = read_json_records(args.file)
    is_batch = all(isinstance(r, dict) and "turns" in r for r in records)
    mem = open_memory(args)
    with mem:
        if is_batch:
            if args.session or args.key:
                raise InvalidInput("--session and --key apply to a single-session file, not a batch of sessions",
                                   field="--session")
            receipts = []
            batch = [dict(r, date=r.get("date", args.date)) for r in records]
            for start in _progress(list(range(0, len(batch), 100)), "importing sessions"):
                receipts.extend(mem.capture_many(batch[start:start + 100]))
        else:
            if not args.session:
                raise InvalidInput("a file of turns needs --session ID", field="--session")
            receipts = [mem.capture(args.session, records, session_date=args.date, idempotency_key=args.key)]
    if args.json:
        emit_json(receipts if is_batch else receipts[0])
    else:
        stored = sum(r.turns_stored for r in receipts)
        received = sum(r.turns_received for r in receipts)
        replayed = sum(r.replayed for r in receipts)
        print(f"captured {len(receipts)} session(s): {stored} new turn(s) of {received} received"
              + (f", {replayed} replayed" if replayed else ""))
    return 0


def _register_capture(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capture", help="capture turns (JSONL) or a batch of sessions (JSON/JSONL)",
                       description="Capture one session's turns (JSONL of turns, needs --session) or a batch of "
                                   'session objects {"session_id", "date"?, "turns"}. Example: '
                                   "tortoise capture chat.jsonl --session s1 --date 2023-05-08T13:56:00")
    p.add_argument("file", help="path, or - for stdin")
    p.add_argument("--session", help="session id for a file of turns")
    p.add_argument("--date", help="session date, ISO 8601")
    p.add_argument("--key", help="idempotency key")
    p.add_argument("--json", action="store_true", help="print the receipt(s) as JSON")
    p.set_defaults(handler=_cmd_capture)


# -- search, sessions, export ------------------------------------------------------------------


def _cmd_search(args: argparse.Namespace) -> int:
    with open_memory(args) as mem:
        hits = mem.search(args.query, k=args.k, session_id=args.session)
    if args.json:
        emit_json(hits)
        return 0
    for h in hits:
        who = h.name or h.role
        date = f" {h.session_date}" if h.session_date else ""
        print(f"{h.score:7.3f}  [{h.session_id}#{h.index}{date}] {who}: {_one_line(h.content)}")
    if not hits:
        print("no matches", file=sys.stderr)
    return 0


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
    with open_memory(args) as mem:
        sessions = mem.sessions()
    if args.json:
        emit_json(sessions)
        return 0
    for s in sessions:
        print(f"{s.session_id}\t{s.session_date or '-'}\t{s.turn_count} turns")
    return 0


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


REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = [
    _register_capture,
    _register_search,
    _register_sessions,
    _register_export,
    _register_demo,
]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
