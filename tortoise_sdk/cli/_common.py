"""What the subcommands share: opening the memory, printing JSON or text, reading input files, model options."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = (
    "Handler",
    "add_model_options",
    "emit_json",
    "extract_mode",
    "model_options",
    "open_memory",
    "progress",
    "read_json_records",
    "read_text",
    "report_line",
    "run_and_print",
)


Handler = Callable[[argparse.Namespace], int]


def open_memory(args: argparse.Namespace, **kwargs: Any):  # noqa: ANN201 - returns Memory, imported lazily
    from ..memory import Memory

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


def read_json_records(path: str, text: str | None = None) -> list[Any]:
    """JSON or JSONL from a file or ``-`` (or its ``text``, already read); a top-level JSON list is its items."""
    if text is None:
        text = sys.stdin.read() if path == "-" else read_text(path)
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


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read file: {exc.strerror}", field=path) from None


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar on a terminal for long imports."""
    if total < 50 or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, total: bar.update(task, completed=done)


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in (("model", getattr(args, "model", None)), ("api_base", getattr(args, "api_base", None)))
            if v}


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="litellm model for extraction (default: $TORTOISE_MODEL)")
    p.add_argument("--api-base", help="model endpoint URL, e.g. http://localhost:8000/v1")


def extract_mode(args: argparse.Namespace) -> Any:
    mode = getattr(args, "extract", None)
    return {"inline": "inline", "background": "background", "off": False}.get(mode) if mode else None


def report_line(e: Any) -> str:
    parts = [e.status]
    if e.outcomes:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(e.outcomes.items())))
    if e.reason:
        parts.append(e.reason)
    if e.job_id:
        parts.append(f"job {e.job_id}")
    return " - ".join(parts)
