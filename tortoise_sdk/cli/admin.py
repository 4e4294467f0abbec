"""Whole-store and first-run commands: ``migrate-store`` (SQLite to PostgreSQL) and ``demo``."""

from __future__ import annotations

import argparse
import sys

from ._common import emit_json

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``demo`` and ``migrate-store``."""
    _register_demo(sub)
    _register_migrate_store(sub)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(args)


def _register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="capture a sample conversation into the embedded store and search it")
    p.set_defaults(handler=_cmd_demo)


def _cmd_migrate_store(args: argparse.Namespace) -> int:
    # Copies a whole database (every namespace), which no namespaced Memory method covers.
    from ..memory import migrate_store

    report = migrate_store(args.src, args.dst, progress=None if args.json else _print_copied)
    if args.json:
        emit_json({"source": report.source, "destination": report.destination,
                   "schema_version": report.schema_version, "rows": report.rows, "namespaces": report.namespaces})
    else:
        print(f"copied {report.total} rows ({len(report.namespaces)} namespace(s)) into {report.destination}")
    return 0


def _print_copied(table: str, rows: int) -> None:
    """One progress line per table. It is called inside the copy's transaction: a reader gone (``2>&1 | head``)
    must not roll the copy back, as a BrokenPipeError raised here did (then reported as exit 0)."""
    try:
        print(f"{table}: {rows} rows", file=sys.stderr)
    except OSError:
        pass


def _register_migrate_store(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("migrate-store", help="copy a SQLite memory into an empty PostgreSQL database",
                       description="Copies every namespace, turn, receipt, memory and job, ids kept, in one "
                                   "transaction. Example: tortoise migrate-store ~/.tortoise/memory.db "
                                   "postgresql://app@db.internal/tortoise")
    p.add_argument("src", help="SQLite path (or URL: sqlite:///relative.db, sqlite:////absolute.db)")
    p.add_argument("dst", help="postgresql:// URL of an empty database")
    p.add_argument("--json", action="store_true", help="print the copy report as JSON")
    p.set_defaults(handler=_cmd_migrate_store)
