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
from typing import NoReturn

from ..errors import (
    ConfigError,
    IdempotencyConflict,
    InvalidInput,
    NotADatabase,
    NotFoundError,
    ReadOnlyStore,
    SchemaTooNew,
    StreamParseError,
    TortoiseError,
)
from ..memory import DEFAULT_NAMESPACE
from . import admin, capture, embed, evaluate, extract, forget, hosts, read, subagents
from ._common import NO_MODEL_HINT

__all__ = ("REGISTRY", "build_parser", "main")

#: The ``register(sub)`` of each group of subcommands, in the order ``tortoise --help`` lists them.
REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = [
    capture.register,
    read.register,
    extract.register,
    embed.register,
    admin.register,
    subagents.register,
    forget.register,
    hosts.register,
    evaluate.register,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console-script entry point)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (InvalidInput, ConfigError, NotFoundError, NotADatabase, SchemaTooNew, ReadOnlyStore, StreamParseError,
            IdempotencyConflict) as exc:
        print(f"tortoise: {_in_cli_terms(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): not an error
        return 0
    except OSError as exc:  # a path the user gave cannot be read or written
        print(f"tortoise: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except TortoiseError as exc:
        print(f"tortoise: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


#: The command line's flag for a library argument an error names.
FLAGS = {"namespace": "--namespace", "model": "--model", "k": "--k", "session_id": "--session",
         "session_date": "--date", "idempotency_key": "--key", "db": "--db"}


def _in_cli_terms(exc: TortoiseError) -> str:
    """The error's message, with the flags and environment variables of the command line for Python arguments."""
    field = getattr(exc, "field", None)
    if isinstance(exc, ConfigError) and field == "model":
        return NO_MODEL_HINT
    if isinstance(exc, ConfigError) and field == "namespace":
        return "--namespace must be a non-blank name without NUL characters, e.g. --namespace alice"
    text = str(exc)
    if field in FLAGS and text.startswith(f"{field}: "):
        return f"{FLAGS[field]}: {text[len(field) + 2:]}"
    return text


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr (exit 2), pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tortoise", description="Long-term memory for LLM agents.")
    _memory_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in REGISTRY:
        register(sub)
    _everywhere(parser, _memory_options)
    return parser


def _memory_options(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--db`` and ``--namespace``: before the command (``top``) or after it, where they override the first."""
    if "--db" in p._option_string_actions:
        return
    group = p.add_argument_group("memory options (before or after the command)")
    group.add_argument("--db", metavar="PATH|URL", default=None if top else argparse.SUPPRESS,
                       help="SQLite path or postgresql:// URL (default: $TORTOISE_DB, else ~/.tortoise/memory.db)")
    group.add_argument("--namespace", metavar="NS", default=DEFAULT_NAMESPACE if top else argparse.SUPPRESS,
                       help=f"the namespace to act in (default: {DEFAULT_NAMESPACE})")


def _everywhere(parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser], None]) -> None:
    """Call ``add`` on every subcommand's parser, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                add(child)
                _everywhere(child, add)
