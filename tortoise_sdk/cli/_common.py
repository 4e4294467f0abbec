"""What the subcommands share: opening the memory, printing JSON or text, reading input files, options."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import stat
import sys
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFoundError, reword

__all__ = (
    "EXIT_EXTRACTION_FAILED",
    "NO_MODEL_HINT",
    "TIMEOUT_HELP",
    "Handler",
    "add_model_options",
    "bounded_float",
    "cell",
    "cli_terms",
    "bounded_int",
    "emit_json",
    "explain_extraction",
    "extract_mode",
    "extraction_failed",
    "model_options",
    "data_is_in",
    "name_other_namespaces",
    "open_memory",
    "parse_json_records",
    "progress",
    "read_input",
    "read_json_records",
    "report_line",
    "rich_console",
    "run_and_print",
    "seconds",
    "shown_on_terminal",
    "stored_text",
    "time_budget_ms",
    "terminal_safe",
)

#: The exit code of capture, extract, flush and worker when the turns are stored but an extraction failed
#: (or was skipped after a fatal provider failure); 2 is bad input, 1 a store that cannot be reached or an unexpected failure.
EXIT_EXTRACTION_FAILED = 3

#: What ``--timeout`` does, on every command that calls a model.
TIMEOUT_HELP = ("seconds one model request may take (default: 60); a request that times out is retried once, a "
                "second timeout stops the extraction and pauses model calls for a minute")

#: The no-model message in the command line's terms.
NO_MODEL_HINT = "no model configured: pass --model (e.g. --model openai/gpt-4o-mini) or set TORTOISE_MODEL"

#: The library's advice (the Python call, or both forms) as the command line gives it: a reviewer was told to run
#: ``mem.extract(session_id, full=True)`` at a shell prompt.
_IN_CLI_TERMS = (
    ("mem.extract(session_id, full=True) or `tortoise extract SESSION --full`", "`tortoise extract SESSION --full`"),
    ("mem.extract(session_id, full=True)", "`tortoise extract SESSION --full`"),
    ("mem.sessions() or `tortoise sessions`", "`tortoise sessions`"),
    ("mem.memories() or `tortoise memories`", "`tortoise memories`"),
    ("run by `tortoise worker` or mem.process_pending(), now by mem.flush() or `tortoise flush`",
     "run by `tortoise worker`, now by `tortoise flush`"),
    ("extract them later with mem.extract(session_id) or `tortoise extract SESSION`",
     "extract them later with `tortoise extract SESSION`"),
    ("at once when the model, api_base, key or timeout changes",
     "at once when --model, --api-base, --api-key or --timeout changes"),
    ("take one from MemoryBlock.pointers, search() or memories()",
     "take one from the refs `tortoise context` prints, `tortoise search` or `tortoise memories`"),
)


def cli_terms(text: str) -> str:
    """``text`` (an error's or a report's) with the library's advice in the command line's terms."""
    return reword(text, _IN_CLI_TERMS)


Handler = Callable[[argparse.Namespace], int]


def open_memory(args: argparse.Namespace, *, create: bool | str = True, **kwargs: Any):  # noqa: ANN201 - Memory, lazily
    """The ``Memory`` of ``--db``/``--namespace``; with ``create=False`` (read commands) a missing database is refused;
    with ``create`` a string, it is created and that string said on stderr (a mistyped path would go unseen)."""
    from ..memory import Memory

    if args.db and "://" not in args.db and Path(args.db).expanduser().is_dir():
        raise InvalidInput(f"{args.db} is a directory, not a database file; give a file path such as "
                           f"{Path(args.db) / 'memory.db'}", field="db")
    try:
        return Memory(args.db, namespace=args.namespace, create=create is True, **kwargs)
    except NotFoundError as exc:  # the only one opening raises: no database there
        if isinstance(create, str):
            print(f"tortoise: {str(exc).replace('(nothing was created)', 'yet')}; {create}", file=sys.stderr)
            return Memory(args.db, namespace=args.namespace, **kwargs)
        raise InvalidInput(f"{exc}: check --db or TORTOISE_DB (a capture creates the database)") from None


def run_and_print(
    args: argparse.Namespace, call: Callable[[Any], Any], text: Callable[[Any], object], *,
    empty_hint: bool | Callable[[Any], bool] = False, **options: Any,
) -> int:
    """Open the existing memory, ``call`` one (reading) method on it, print the result; returns 0.

    With ``--json`` the result is printed as one JSON document, else ``text(result)`` prints it.
    With ``empty_hint``, an empty namespace is named on stderr with the ones that hold data; a callable
    ``empty_hint`` tells from the result whether the namespace is empty (no read of the store to ask).
    """
    with open_memory(args, create=False, **options) as mem:
        result = call(mem)
        if empty_hint:
            name_other_namespaces(mem, empty=empty_hint(result) if callable(empty_hint) else None)
    if args.json:
        emit_json(result)
    else:
        text(result)
    return 0


def name_other_namespaces(mem: Any, *, empty: bool | None = None) -> bool:
    """When ``mem``'s namespace holds nothing (no session, no live memory), say so on stderr and name the
    namespaces that hold data; ``empty`` when the caller knows already (else the store is asked).

    Returns whether it did (the namespace is empty).
    """
    if empty is None:
        empty = not (mem.sessions() or mem.store.memories(mem.namespace, latest=1))
    if not empty:
        return False
    others = [n for n in mem.namespaces() if n.name != mem.namespace]
    if not others:
        print(f"tortoise: namespace {mem.namespace!r} is empty, and so is this database ({mem.store.url}): "
              "capture turns first (`tortoise capture`), or try `tortoise demo`", file=sys.stderr)
        return True
    print(f"tortoise: namespace {mem.namespace!r} is empty; {data_is_in(others)}", file=sys.stderr)
    return True


def data_is_in(others: list[Any]) -> str:
    """``data is in: NAME (counts); ... Add --namespace NAME`` for the namespaces ``others`` (not empty)."""
    held = "; ".join(f"{n.name} ({n.sessions} sessions, {n.turns} turns, {n.memories} memories)" for n in others[:5])
    more = f" and {len(others) - 5} more (`tortoise namespaces`)" if len(others) > 5 else ""
    return f"data is in: {held}{more}. Add --namespace {shlex.quote(others[0].name)}"


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


def read_json_records(path: str, text: str | None = None) -> list[Any]:
    """JSON or JSONL from a file or ``-`` (or its ``text``, already read); a top-level JSON list is its items."""
    return parse_json_records(read_input(path) if text is None else text, path)[0]


def parse_json_records(text: str, where: str) -> tuple[list[Any], list[int | None]]:
    """The records of JSON or JSONL ``text`` and the line each starts on (None inside one JSON document).

    Raises:
        InvalidInput: empty, or a line that is not JSON (named).
    """
    stripped = text.strip()
    if not stripped:
        raise InvalidInput("the input is empty", field=where)
    if stripped[0] == "[":
        try:
            data = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidInput(f"not valid JSON: {exc}", field=where) from None
        return list(data), [None] * len(data)
    records, lines = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
            lines.append(n)
        except (json.JSONDecodeError, RecursionError) as exc:
            if not records:
                try:  # a single pretty-printed JSON object
                    return [json.loads(stripped)], [n]
                except (json.JSONDecodeError, RecursionError):
                    pass
            raise InvalidInput(f"line {n} is not valid JSON: {getattr(exc, 'msg', exc)}", field=where) from None
    return records, lines


def read_input(path: str) -> str:
    """The text of a file, or of stdin for ``-``; anything that is not readable UTF-8 text is refused in one line.

    Raises:
        InvalidInput: missing or unreadable, binary (NUL bytes), or not UTF-8.
    """
    try:
        data = _stdin_bytes() if path == "-" else _regular_file_bytes(Path(path).expanduser())
    except OSError as exc:
        raise InvalidInput(f"cannot read file: {exc.strerror or exc}", field=path) from None
    if b"\x00" in data:
        raise InvalidInput(f"a binary file (NUL byte at offset {data.index(0)}), not JSON or JSONL text", field=path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                           "convert it to UTF-8 first", field=path) from None


def _regular_file_bytes(path: Path) -> bytes:
    """The bytes of a regular file; a device, a FIFO or a directory (which may never end) is refused unread."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO with no writer must not block
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput("not a regular file (a device, a FIFO or a directory); give a file of turns, "
                               "or - for stdin", field=str(path))
        return f.read()


@contextmanager
def terminal_safe() -> Iterator[None]:
    """For the run, stdout and stderr never fail on a character their encoding lacks (it is written as a
    ``\\u`` escape), and on a terminal a control, format or bidi character (U+202E turns the rest of a
    line around; a carriage return or ESC rewrites it) is written as its escape too: stored text cannot garble
    or forge what the user sees. Only tabs, line feeds and CRLF line ends pass; rich draws its tables and
    progress bars on the terminal itself (``rich_console``)."""
    saved = sys.stdout, sys.stderr
    errors = []
    for stream in saved:
        errors.append(getattr(stream, "errors", None))
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    sys.stdout, sys.stderr = (_Escaping(s) if _isatty(s) else s for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for stream, was in zip(saved, errors):
            if hasattr(stream, "reconfigure") and was:
                stream.reconfigure(errors=was)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _Escaping:
    """A text stream writing each unprintable character (but ``_TERMINAL_CONTROLS``) as its ``\\u`` escape."""

    def __init__(self, stream: Any) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        return self.raw.write(shown_on_terminal(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def shown_on_terminal(text: str) -> str:
    """``text`` as a terminal gets it: controls (a carriage return but in CRLF, ESC ...), format and bidi
    characters as ``\\u`` escapes; tabs and line ends as they are."""
    return "\r\n".join(part.translate(_UNSAFE) for part in text.split("\r\n"))


def rich_console(stream: Any) -> Any:
    """A rich ``Console`` on ``stream`` (``sys.stdout`` or ``sys.stderr``), drawing on the terminal itself: its
    own escape sequences are not escaped. Give it stored text only through ``stored_text``."""
    from rich.console import Console

    return Console(file=stream.raw if isinstance(stream, _Escaping) else stream, width=None if _isatty(stream) else 200)


def stored_text(text: str, stream: Any = None) -> Any:
    """Stored text for a rich table cell: never read as markup, and escaped as ``shown_on_terminal`` when
    ``stream`` (default ``sys.stdout``) is a terminal."""
    from rich.text import Text

    stream = sys.stdout if stream is None else stream
    return Text(shown_on_terminal(text) if isinstance(stream, _Escaping) else text)


def cell(text: str) -> str:
    """``text`` for one cell of a tab-separated listing: every control character, tabs and line ends included, as
    its escape (a session id holding a newline split its row, on a terminal and in a pipe)."""
    return "".join(f"\\u{ord(ch):04x}" if unicodedata.category(ch) == "Cc" else ch for ch in text)


class _UnsafeTable(dict):  # type: ignore[type-arg]
    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        out = ch if ch in _TERMINAL_CONTROLS or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp") \
            else f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"
        self[cp] = out
        return out


_UNSAFE = _UnsafeTable()
#: Controls the command line itself writes to a terminal through ``sys.stdout``/``sys.stderr``: line feeds and
#: tabs (a CR of a CRLF passes too). A stored CR or ESC reached it raw and could rewrite a line already shown.
_TERMINAL_CONTROLS = "\n\t"


def _stdin_bytes() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)  # a text-only stdin (a test's StringIO) has none
    return buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8", "surrogateescape")


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type``: a number from ``low`` to ``high`` (``nan`` and ``inf`` refused), else a usage error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # False for nan
            raise argparse.ArgumentTypeError(f"must be a number from {low:g} to {high:,g}, got {text!r}")
        return value

    return parse


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high``, else a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high:,}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above 0, else a one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def time_budget_ms(text: str) -> float | None:
    """An argparse ``type``: a finite number of milliseconds, 0 for no limit (None), else a one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of milliseconds, 0 for no limit, got {text!r}")
    return value or None


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar on a terminal for long imports."""
    if total < 50 or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import Progress

    with Progress(transient=True, console=rich_console(sys.stderr)) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, total: bar.update(task, completed=done)


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """``model``, ``api_base``, ``api_key``, ``request_timeout_s`` and ``categories``, those given on the
    command line (``categories`` also from ``$TORTOISE_CATEGORIES`` on the commands that extract)."""
    options = {k: v for k in ("model", "api_base", "api_key", "request_timeout_s", "embedder", "embed_api_base")
               if (v := getattr(args, k, None))}
    if hasattr(args, "categories"):
        listed = args.categories if args.categories is not None else os.environ.get("TORTOISE_CATEGORIES", "")
        if names := [c.strip() for c in listed.split(",") if c.strip()]:
            options["categories"] = names
    return options


def add_embedder_options(p: argparse.ArgumentParser) -> None:
    """``--embedder`` and ``--embed-api-base``, for the commands that compute vectors."""
    p.add_argument("--embedder", help="litellm embedding model, e.g. openai/text-embedding-3-small "
                                      "(default: $TORTOISE_EMBEDDER)")
    p.add_argument("--embed-api-base", help="embedding endpoint URL, e.g. http://localhost:11434/v1 "
                                            "(default: $TORTOISE_EMBED_API_BASE)")


def add_model_options(p: argparse.ArgumentParser, *, model_help: str | None = None, timeout: bool = True) -> None:
    """``--model``, ``--api-base``, ``--api-key`` and, for commands that call the model (``timeout``), ``--timeout``."""
    p.add_argument("--model", help=model_help or "litellm model for extraction (default: $TORTOISE_MODEL)")
    p.add_argument("--api-base", help="model endpoint URL, e.g. http://localhost:8000/v1")
    p.add_argument("--api-key", help="the model provider's key (default: $TORTOISE_API_KEY, else the provider's "
                                     "own variable, e.g. OPENAI_API_KEY); a local server that takes any key still "
                                     "needs one, e.g. --api-key x")
    if timeout:
        p.add_argument("--timeout", dest="request_timeout_s", type=seconds, metavar="S", help=TIMEOUT_HELP)
    p.add_argument("--categories", metavar="A,B", help="your memory categories, comma-separated (e.g. health,work): "
                                                         "extraction files each memory under one "
                                                         "(default: $TORTOISE_CATEGORIES)")


def extraction_failed(report: Any) -> bool:
    """The turns are stored but nothing was extracted: failed, skipped after a fatal provider failure, or partial
    with every turn of its window waiting for another run (S2 failed: `flush` and `worker` say 3 for it too)."""
    if report is None:
        return False
    every_turn_waits = (report.status == "partial" and report.waiting is not None and report.window is not None
                        and report.waiting[0] <= report.window[0])
    return report.status == "failed" or (report.status == "skipped" and bool(report.errors)) or every_turn_waits


def explain_extraction(session_id: str, report: Any) -> None:
    """On stderr: why an extraction failed or was partial (its reason, then each error not already in it)."""
    if not _explained(report):
        return
    reason = cli_terms(report.reason or "see the errors")
    print(f"tortoise: extraction of {cell(session_id)} {report.status}: {reason}", file=sys.stderr)
    shown = {reason}
    for d in report.errors:
        line = f"  {d.stage} {d.code}: {d.message}"
        # "chunk 0 (turns 0-6) failed: <the model's error>" says nothing more when the reason quotes that error.
        said = d.message in reason or d.message.split(": ", 1)[-1] in reason
        if not said and line not in shown:
            shown.add(line)
            print(line, file=sys.stderr)
    if report.waiting is not None and report.job_id is None:
        print(f"  once the cause is fixed, `tortoise extract {shlex.quote(session_id)}` (or the same capture "
              "again) extracts the turns that wait", file=sys.stderr)


def _explained(report: Any) -> bool:
    """``explain_extraction`` says why on stderr: the extraction failed or was partial."""
    return report is not None and (extraction_failed(report) or report.status == "partial")


def extract_mode(args: argparse.Namespace) -> Any:
    mode = getattr(args, "extract", None)
    return {"inline": "inline", "background": "background", "off": False}.get(mode) if mode else None


def report_line(e: Any) -> str:
    """An extraction report in one line for stdout; a reason ``explain_extraction`` puts on stderr is left to it."""
    from ..memory import NO_MODEL_REASON

    parts = [e.status]
    if e.outcomes:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(e.outcomes.items())))
    if e.reason and not _explained(e):
        parts.append(NO_MODEL_HINT if e.reason == NO_MODEL_REASON else cli_terms(e.reason))
    if e.job_id:
        parts.append(f"job {e.job_id}")
    return " - ".join(parts)
