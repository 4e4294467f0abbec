"""The ``tortoise`` command line: each subcommand calls one ``Memory`` method.

Exit codes: 0 success, 2 invalid input (one line on stderr), 1 unexpected failure.

One module per group of subcommands, each with ``register(sub)`` adding its parsers (and
their handlers) to the ``tortoise`` parser; ``REGISTRY`` lists them in help order. A new
group is a new module whose ``register`` is appended there. Shared helpers: ``_common``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..errors import ConfigError, IdempotencyConflict, InvalidInput, NotFoundError, StreamParseError, TortoiseError
from . import admin, capture, evaluate, extract, hosts, read, subagents

__all__ = ("REGISTRY", "build_parser", "main")

#: The ``register(sub)`` of each group of subcommands, in the order ``tortoise --help`` lists them.
REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = [
    capture.register,
    read.register,
    extract.register,
    admin.register,
    subagents.register,
    hosts.register,
    evaluate.register,
]


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
