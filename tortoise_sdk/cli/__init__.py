"""The ``tortoise`` command line: each subcommand calls one ``Memory`` method.

Exit codes: 0 success, 2 invalid input (one line on stderr), 1 unexpected failure.

One module per group of subcommands, each with ``register(sub)`` adding its parsers (and
their handlers) to the ``tortoise`` parser; ``REGISTRY`` lists them in help order. A new
group is a new module whose ``register`` is appended there. Shared helpers: ``_common``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
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
from . import admin, capture, embed, evaluate, extract, forget, hosts, read, serve, subagents
from ._common import NO_MODEL_HINT, cli_terms, terminal_safe

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
    serve.register,
    evaluate.register,
]


#: Memory options a command accepts (scripts keep working) but does not use, so its help does not list them.
NOT_APPLICABLE = {"migrate-store": ("--db", "--namespace"), "eval": ("--db", "--namespace"),
                  "locomo": ("--db", "--namespace"), "vacuum": ("--namespace",), "namespaces": ("--namespace",)}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console-script entry point)."""
    with terminal_safe():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if _command_parser(parser, argv).prog == f"{parser.prog} hook":
        # Claude Code reads a hook's exit 2 as "block": it would erase the user's prompt for a settings file
        # written by another version of tortoise. A refused argument is logged to hooks.log instead.
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            code, args = _parse(parser, argv)
        if args is None:
            if code:
                hosts.log_refused_arguments(argv, said.getvalue())
            return 0
    else:
        code, args = _parse(parser, argv)
        if args is None:
            return code
    # Whether --namespace was given at all (`hooks install` names a namespace after the project otherwise).
    args.namespace_given = any(a == "--namespace" or a.startswith("--namespace=") for a in argv)
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
        print(f"tortoise: {f'{exc.filename}: ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except TortoiseError as exc:  # a store that cannot be reached (the driver's message may span lines), or worse
        print("tortoise: " + re.sub(r"\s*\n\s*", " ", str(exc)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


#: A command whose own namespace is not the default one (the demo writes its sample sessions apart).
NAMESPACE_OF = {"demo": "demo"}

#: The command line's flag for a library argument an error names.
FLAGS = {"namespace": "--namespace", "model": "--model", "k": "--k", "session_id": "--session",
         "session_date": "--date", "idempotency_key": "--key", "db": "--db", "pointer_id": "ID", "since": "--since"}


def _in_cli_terms(exc: TortoiseError) -> str:
    """The error's message, with the flags and environment variables of the command line for Python arguments."""
    field = getattr(exc, "field", None)
    if isinstance(exc, ConfigError) and field == "model":
        return NO_MODEL_HINT
    if isinstance(exc, ConfigError) and field == "embedder" and "no embedder configured" in str(exc):
        return ("no embedder configured: pass --embedder (a litellm embedding model, e.g. "
                "--embedder openai/text-embedding-3-small) or set TORTOISE_EMBEDDER")
    if isinstance(exc, ConfigError) and field == "namespace":
        return "--namespace must be a non-blank name without NUL characters, e.g. --namespace alice"
    text = cli_terms(str(exc))
    if field in FLAGS and text.startswith(f"{field}: "):
        return f"{FLAGS[field]}: {text[len(field) + 2:]}"
    return text


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[int, argparse.Namespace | None]:
    """The parsed arguments (exit code 0), or None and the exit code of ``--help`` or of a usage error (said)."""
    before = _unknown_before_command(parser, argv)
    if before is not None:
        return _unknown_arguments(parser, argv, [before]), None
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0), None
    if unknown:
        return _unknown_arguments(parser, argv, unknown), None
    return 0, args


def _unknown_before_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """An unknown option before the command (``--nmespace x sessions``), else None.

    argparse skips it and reads its value as the command: "unknown command 'x'" hid the typo.
    """
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    words = iter(argv)
    for word in words:
        if word in commands or word == "--" or not word.startswith("-") or word == "-":
            return None
        name = word.split("=", 1)[0]
        known = [o for o in parser._option_string_actions if o == name] or \
            [o for o in parser._option_string_actions if o.startswith(name) and name.startswith("--")]
        if not known:
            return word
        if len(known) == 1 and parser._option_string_actions[known[0]].nargs != 0 and "=" not in word:
            next(words, None)  # the option's value
    return None


def _unknown_arguments(parser: argparse.ArgumentParser, argv: list[str], unknown: list[str]) -> int:
    """Name what was not understood, suggest the near option of the command it was given to, show its usage."""
    import difflib

    first = next((i for i, word in enumerate(argv) if word in unknown), len(argv))
    command = _command_parser(parser, argv[:first])  # the command the unknown word came after
    options = [o for a in command._actions if a.help != argparse.SUPPRESS for o in a.option_strings]
    option = next((u.split("=", 1)[0] for u in unknown if u.startswith("-")), None)
    near = difflib.get_close_matches(option, options, n=1, cutoff=0.6) if option else []
    what = f"unknown option {option}" if option else f"unexpected argument(s): {' '.join(unknown)}"
    hint = (f"; options go before '--' (every word after it is an argument)" if "--" in argv[:first]
            else f"; did you mean {near[0]}?" if near else "")
    print(f"{command.prog}: {what}{hint}", file=sys.stderr)
    command.print_usage(sys.stderr)
    return 2


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)command parser the words of ``argv`` reach, e.g. ``eval locomo``'s."""
    current = parser
    for word in argv:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and word in sub.choices:
            current = sub.choices[word]
    return current


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr (exit 2), pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        import difflib
        import re

        # An unknown command: the nearest one, as unknown options get ("serach" -> search).
        typed = re.match(r"argument COMMAND: invalid choice: '?([^' ]*)'?", message)
        commands = [c for a in self._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices]
        if typed and commands:
            near = difflib.get_close_matches(typed.group(1), commands, n=1, cutoff=0.6)
            message = f"unknown command {typed.group(1)!r}" + (f"; did you mean {near[0]}?" if near else "")
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog="tortoise", description="Long-term memory for LLM agents.")
    parser.add_argument("--version", action="version", version=f"tortoise-sdk {__version__}")
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
    hidden = () if top else NOT_APPLICABLE.get(p.prog.split()[-1], ())
    group = p.add_argument_group("memory options (before or after the command)")
    group.add_argument("--db", metavar="PATH|URL", default=None if top else argparse.SUPPRESS,
                       help=argparse.SUPPRESS if "--db" in hidden else
                       "SQLite path or postgresql:// URL (default: $TORTOISE_DB, else ~/.tortoise/memory.db)")
    group.add_argument("--namespace", metavar="NS", default=DEFAULT_NAMESPACE if top else argparse.SUPPRESS,
                       help=argparse.SUPPRESS if "--namespace" in hidden else
                       f"the namespace to act in (default: {NAMESPACE_OF.get(p.prog.split()[-1], DEFAULT_NAMESPACE)})")


def _everywhere(parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser], None]) -> None:
    """Call ``add`` on every subcommand's parser, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                add(child)
                _everywhere(child, add)
