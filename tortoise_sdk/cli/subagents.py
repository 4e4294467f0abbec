"""``tortoise subagents`` (the recorded sub-agent invocations) and ``tortoise stats`` (the counts)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import InvalidInput
from ._common import emit_json, open_memory, rich_console, run_and_print, stored_text

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``subagents`` and ``stats``."""
    _register_subagents(sub)
    _register_stats(sub)


def _cmd_subagents(args: argparse.Namespace) -> int:
    if args.health:
        return _cmd_health(args)
    if args.since is not None:
        raise InvalidInput("--since goes with --health", field="since")
    return run_and_print(args, lambda mem: _rows(mem, args.session),
                         lambda rows: _print_subagents(rows, args.session), empty_hint=True)


def _rows(mem: Any, session: str | None) -> list[Any]:
    """The rows of ``session``; for an id the table cut short (``9667a07f-c6…``), of the sessions it starts."""
    if session is None or not session.endswith("…"):
        return mem.subagents(session_id=session)
    start = session[:-1]
    return [r for r in mem.subagents() if start and r.session_id.startswith(start)]


def _cmd_health(args: argparse.Namespace) -> int:
    """Exit 1 when a launch has no row (so it can alarm), else 0: rows with no launch are reported, never alarmed."""
    with open_memory(args, create=False) as mem:
        health = mem.subagent_health(since=args.since, session_id=args.session)
    if args.json:
        emit_json(health)
    else:
        _print_health(health)
    return 0 if health.ok else 1


def _print_health(health: Any) -> None:
    last = health.last_observed_at.strftime("%Y-%m-%d %H:%M:%S") if health.last_observed_at else "never"
    print(f"shortfall {len(health.shortfall)}, excess {len(health.excess)}, no launch expected "
          f"{len(health.no_launch_expected)}; {health.expected} launch(es) expected, {health.observed} row(s) "
          f"observed; last sub-agent observed {last}")
    for call in health.shortfall:
        print(f"  not recorded: {call.tool_name} call {call.tool_call_id} in turn {call.turn_id} "
              f"(session {call.session_id})")
    for label, keys in (("no launching call", health.excess), ("no launch expected", health.no_launch_expected)):
        for key in keys:
            print(f"  {label}: row ({key.session_id}, {key.agent_execution_id}, {key.tool_call_id}), {key.source}")


def _print_subagents(rows: list[Any], session: str | None = None) -> None:
    if not rows:
        print(f"no sub-agent invocation recorded for session {session!r} (`tortoise subagents` without --session "
              "lists every session's)" if session else
              "no sub-agent invocations recorded (ingest a transcript with `tortoise capture FILE`)", file=sys.stderr)
        return
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
        table.add_row(  # stored text: never markup, escaped on a terminal (rich draws on it unescaped)
            r.observed_at.strftime("%Y-%m-%d %H:%M:%S"), *map(stored_text, (
                _short(r.session_id), r.tool_call_id, r.subagent_type or "-", r.description or "-",
                status + ("" if r.settled_at else " …"))),
            "yes" if r.is_async else "", _num(r.total_tokens), _num(r.tool_use_count),
            "-" if r.duration_ms is None else f"{r.duration_ms / 1000:.1f}s",
            *((stored_text(r.parent_tool_call_id or ""),) if nested else ()),
        )
    rich_console(sys.stdout).print(table)


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _short(text: str, width: int = 12) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _register_subagents(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("subagents", help="list recorded sub-agent invocations",
                       description="One row per sub-agent invocation (Task/Agent tool calls ...), in observed "
                                   "order; '-' is a figure the stream did not report. With --health, the "
                                   "launches not recorded and the rows with no launch instead. "
                                   "Example: tortoise subagents --session SESSION --json; "
                                   "tortoise subagents --health --since 2026-02-01")
    p.add_argument("--session", help="only this session (and, with --health, its derived sessions); an id the "
                                     "table cut short, ending in …, matches the sessions it starts")
    p.add_argument("--health", action="store_true",
                   help="compare launching calls in the captured turns with the recorded rows: exit 1 when a "
                        "launch was not recorded (shortfall), else 0; rows with no launch are listed, not alarmed")
    p.add_argument("--since", help="with --health: only what was observed from this ISO 8601 time on")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_subagents)


def _cmd_stats(args: argparse.Namespace) -> int:
    # Empty as ``name_other_namespaces`` means it (no session, no live memory), told from the counts just read.
    return run_and_print(args, _stats, _print_stats, empty_hint=lambda doc: not (doc["sessions"] or doc["memories"]))


def _stats(mem: Any) -> dict[str, Any]:
    vectors = mem.vector_stats()
    return {**mem.stats().model_dump(mode="json"),
            **(vectors if vectors["embedder"] or vectors["vectors"] else {})}  # only once embeddings are in use


def _print_stats(doc: dict[str, Any]) -> None:
    print(f"namespace {doc['namespace']}: {doc['sessions']} session(s), {doc['turns']} turn(s), "
          f"{doc['memories']} live memory(ies), {doc['entities']} entity(ies), "
          f"{doc['subagents']} sub-agent invocation(s)")
    print("sub-agent frames: " + ", ".join(f"{k} {v}" for k, v in doc["subagent_counters"].items()
                                           if k != "upserted"))  # the deprecated name of persisted
    print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(doc["jobs"].items())) or "none")
          + (" (`tortoise flush --retry-failed` queues the failed ones again)" if doc["jobs"].get("failed") else ""))
    if "vectors" in doc:
        vectors = ", ".join(f"{n} by {model}" for model, n in doc["vectors"].items()) or "none"
        print(f"vectors: {vectors}; embedder {doc['embedder'] or 'none'}; search: {doc['vector_search']}")


def _register_stats(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="counts of sessions, turns, live memories, entities, sub-agent invocations and "
                                     "jobs by status, and "
                                     "recorder counters",
                       description="Example: tortoise stats --json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_stats)
