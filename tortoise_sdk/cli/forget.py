"""``tortoise forget`` (a session or a memory, for good) and ``tortoise vacuum`` (what deletes leave on disk)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import InvalidInput
from ._common import emit_json, open_memory

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``forget`` and ``vacuum``."""
    p = sub.add_parser(
        "forget", help="forget a session (with its derived sessions and what was extracted from it) or a memory",
        description="Removes a session's turns, search entries, receipts, jobs, sub-agent rows and the memories "
                    "only it sourced, or one memory, in one transaction, and leaves a tombstone (counts, no "
                    "content). Asks for confirmation on a terminal; pass --yes in scripts. "
                    "Example: tortoise forget --session SESSION --yes",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", help="the session to forget (its <session>:agent-/:task- sessions too)")
    which.add_argument("--memory", help="the memory id to forget (from `tortoise memories --json`)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_forget)

    v = sub.add_parser(
        "vacuum", help="physically drop what forgetting left in the database files (every namespace)",
        description="SQLite: merges the full-text indexes, rewrites the file, empties the WAL. PostgreSQL: "
                    "VACUUM (FULL, ANALYZE), which locks each table while it is rewritten. Example: tortoise vacuum",
    )
    v.set_defaults(handler=_cmd_vacuum)


def _cmd_forget(args: argparse.Namespace) -> int:
    subject, target = ("session", args.session) if args.session is not None else ("memory", args.memory)
    with open_memory(args, create=False) as mem:
        if not args.yes and not _confirmed(f"Forget {subject} {target!r} in namespace {mem.namespace!r}"
                                           + (" and its derived sessions" if subject == "session" else "")):
            print("tortoise: not confirmed; nothing was forgotten", file=sys.stderr)
            return 0  # the user's answer, not a failure (1 is a store that cannot be reached)
        report = mem.forget_session(target) if subject == "session" else mem.forget_memory(target)
    if args.json:
        emit_json(report)
    else:
        _print_report(report, subject, target)
    return 0


def _confirmed(question: str) -> bool:
    if not sys.stdin.isatty():
        raise InvalidInput("forget asks for confirmation, and stdin is not a terminal: add --yes to forget "
                           "without asking, e.g. tortoise forget --session SESSION --yes")
    print(f"{question}? This cannot be undone. [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _print_report(report: Any, subject: str, target: str) -> None:
    if not report.total:
        print(f"nothing to forget: no {subject} {target!r} in namespace {report.namespace!r} (or already forgotten)")
        return
    removed = ", ".join(f"{n} {table}" for table, n in report.removed.items() if n)
    print(f"forgot {subject} {target}: removed {removed}; tombstone {report.tombstone_id}")
    if report.updated:
        print("kept but changed: " + ", ".join(f"{n} {table}" for table, n in report.updated.items()))
    print("deleted data can stay in database files until `tortoise vacuum` (see docs/forgetting.md)")


def _cmd_vacuum(args: argparse.Namespace) -> int:
    with open_memory(args, create=False) as mem:
        mem.vacuum()
    print(f"vacuumed {mem.store.url}")
    return 0
