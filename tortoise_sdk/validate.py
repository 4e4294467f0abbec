"""Argument checks every entry point shares: ids, text and JSON values, each refusal naming its field.

Both engines store exactly what these let through: an id is at most ``MAX_ID_BYTES`` bytes of
UTF-8 (three ids share one PostgreSQL index row, whose limit is about 2.7 KB); text holds no NUL
(PostgreSQL cannot store it) and no lone surrogate (it is not UTF-8); JSON values are what
``json`` writes and reads back unchanged, nested at most ``MAX_JSON_DEPTH`` levels.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .errors import ConfigError, InvalidInput, InvalidType, TortoiseError

__all__ = (
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_REVISION",
    "check_callable",
    "check_count",
    "check_db",
    "check_id",
    "check_ids",
    "check_json",
    "check_lines",
    "check_number",
    "check_text",
    "not_unicode",
    "take_at_most",
)

#: The longest id (namespace, session id, turn id, idempotency key, cursor name, pointer id ...), in UTF-8 bytes.
MAX_ID_BYTES = 512
#: The deepest nesting of dicts and lists accepted in turn metadata and cursor values.
MAX_JSON_DEPTH = 100
#: The largest cursor revision (both engines keep it in a signed 64-bit integer).
MAX_REVISION = 2**63 - 1
#: The longest wait between a worker's polls, in seconds (a day; a much longer one overflows the platform's timers).
MAX_POLL_S = 86_400.0


def check_text(value: str, field: str) -> str:
    """``value`` if both engines can store it: no NUL and no lone surrogate."""
    if "\x00" in value:
        raise InvalidInput("contains a NUL character (\\x00); remove it", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"is not valid Unicode text (a lone surrogate at character {exc.start}); "
                           "decode the source as UTF-8", field=field) from None
    return value


def storable(value: Any) -> Any:
    """``value`` (text, or JSON holding text) with each character ``check_text`` refuses (NUL, a lone surrogate)
    as U+FFFD: for text the SDK keeps that no caller can be asked to fix (a host's transcript, a provider's message)."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [storable(v) for v in value]
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    return value


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_id(value: Any, field: str, *, optional: bool = False) -> Any:
    """``value`` if it is an id both engines can store and index (``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidType(f"expected a string id, got {type(value).__name__}", field=field)
    check_text(value, field)
    size = len(value.encode("utf-8"))
    if size > MAX_ID_BYTES:
        raise InvalidInput(f"is {size} bytes long; an id is at most {MAX_ID_BYTES} bytes of UTF-8 "
                           "(use a shorter id, e.g. a hash of this one)", field=field)
    return value


def check_session_id(value: Any, *, optional: bool = False) -> Any:
    """``value`` if it is a session id (``check_id``) that is not blank: capture refuses a blank one,
    so a read naming one asks for a session that cannot exist (``None`` too when ``optional``)."""
    if check_id(value, "session_id", optional=optional) is not None and not value.strip():
        raise InvalidInput("must be a non-empty string (no session has a blank id)", field="session_id")
    return value


def check_ids(values: Mapping[str, Any], *, optional: bool = True) -> None:
    """``check_id`` on each ``field: value`` of ``values`` (each may be None when ``optional``)."""
    for field, value in values.items():
        check_id(value, field, optional=optional)


def check_count(value: Any, field: str, *, low: int = 1, high: int | None = None, optional: bool = False,
                error: type[TortoiseError] | None = None) -> Any:
    """``value`` if it is a whole number (not a bool, not a float such as ``nan``) from ``low`` to ``high``.

    ``error``: the class raised (default ``InvalidType`` for a wrong type, ``InvalidInput`` for a
    wrong value); a constructor passes ``ConfigError``.
    """
    if value is None and optional:
        return None
    wanted = f"from {low} to {high:,}" if high is not None else f"of at least {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        _refuse(error or InvalidType, field, f"must be a whole number {wanted}, got {type(value).__name__} "
                                             f"{_short(value)}")
    if value < low or (high is not None and value > high):
        _refuse(error or InvalidInput, field, f"must be a whole number {wanted}, got {value}")
    return value


def check_number(value: Any, field: str, *, low: float = 0.0, above: bool = False, optional: bool = False,
                 error: type[TortoiseError] | None = None, hint: str = "") -> Any:
    """``value`` if it is a finite int or float (not a bool) at least ``low`` (above it with ``above``);
    ``hint`` ends the refusal's message (what else to pass)."""
    if value is None and optional:
        return None
    bound = f"above {low:g}" if above else f"of at least {low:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _refuse(error or InvalidType, field,
                f"must be a number {bound}, got {type(value).__name__} {_short(value)}{hint}")
    if not math.isfinite(value) or value < low or (above and value == low):
        _refuse(error or InvalidInput, field, f"must be a finite number {bound}, got {value}{hint}")
    return value


def _refuse(error: type[TortoiseError], field: str, message: str) -> None:
    """Raise ``error``; a ``ConfigError`` (a constructor argument) names its field in the message too."""
    raise error(f"{field} {message}" if issubclass(error, ConfigError) else message, field=field)  # type: ignore[call-arg]


def check_callable(value: Any, field: str) -> Any:
    """``value`` if it is None or callable."""
    if value is not None and not callable(value):
        raise InvalidType(f"must be a function or None, got {type(value).__name__} {_short(value)}", field=field)
    return value


def check_db(value: Any) -> str | None:
    """``value`` as text if it is None, a path (``str`` or ``os.PathLike``) or a database URL."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"db must be a path or a postgresql:// URL (a str), got {type(value).__name__} "
                          f"{_short(value)}", field="db")
    if value is None:
        return None
    text = os.fsdecode(value)
    if not text.strip():
        raise ConfigError("db is blank: give a file path such as 'memory.db' or a postgresql:// URL, or leave it out "
                          "(None) to use $TORTOISE_DB or ~/.tortoise/memory.db", field="db")
    return text


def check_lines(value: Any, field: str) -> Any:
    """A path (``str``/``os.PathLike``), or the lines of a transcript checked one by one as they are read."""
    if isinstance(value, (str, os.PathLike)):
        return value
    if value is None or isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise InvalidType(f"must be a file path or an iterable of lines (str or bytes), got {type(value).__name__}",
                          field=field)

    def lines() -> Iterator[str | bytes]:
        for i, line in enumerate(value):
            if not isinstance(line, (str, bytes)):
                raise InvalidType(f"a line must be str or bytes, got {type(line).__name__}", field=f"{field}[{i}]")
            yield line

    return lines()


def take_at_most(items: Iterable[Any], limit: int, field: str, hint: str) -> list[Any]:
    """The items of ``items``, read no further than one past ``limit`` (an endless iterator stops there).

    Raises:
        InvalidInput: more than ``limit`` items (``hint`` says what to do).
    """
    taken = list(itertools.islice(items, limit + 1))
    if len(taken) > limit:
        raise InvalidInput(f"exceeds the limit of {limit} in one call; {hint}", field=field)
    return taken


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_json(value: Any, field: str) -> None:
    """Raise unless ``value`` round-trips through JSON unchanged (as a Python value) and stores on both engines.

    Dicts with string keys, lists (tuples come back as lists), strings, finite numbers, booleans
    and None; nothing nested deeper than ``MAX_JSON_DEPTH``. A datetime is refused rather than
    turned into text, so what ``turn_metadata()`` returns is what was captured.
    """
    top = field
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, where)
        elif item is None or isinstance(item, (bool, int)):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"{item} is not a JSON number; store it as a string or None", field=where)
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidInput(f"is nested more than {MAX_JSON_DEPTH} levels deep; flatten it", field=top)
            if isinstance(item, dict):
                for key, sub in item.items():
                    if not isinstance(key, str):
                        raise InvalidType(f"a JSON object's keys are strings, got {type(key).__name__} {key!r}",
                                          field=where)
                    check_text(key, f"{where}.{key}")
                    stack.append((sub, f"{where}.{key}", depth + 1))
            else:
                stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))
        else:
            hint = " (pass value.isoformat())" if hasattr(item, "isoformat") else ""
            raise InvalidType(f"{type(item).__name__} is not a JSON value{hint}; use a string, number, "
                              "boolean, None, list or dict", field=where)


def not_unicode(exc: UnicodeEncodeError) -> InvalidInput:
    """The refusal of an argument a database driver could not encode (a lone surrogate reached the store)."""
    return InvalidInput(f"text is not valid Unicode ({exc.reason} at character {exc.start}); "
                        "remove lone surrogates (decode the source as UTF-8)")
