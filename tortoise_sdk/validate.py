"""Argument checks every entry point shares: ids, text and JSON values, each refusal naming its field.

Both engines store exactly what these let through: an id is at most ``MAX_ID_BYTES`` bytes of
UTF-8 (three ids share one PostgreSQL index row, whose limit is about 2.7 KB); text holds no NUL
(PostgreSQL cannot store it) and no lone surrogate (it is not UTF-8); JSON values are what
``json`` writes and reads back unchanged, nested at most ``MAX_JSON_DEPTH`` levels.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import InvalidInput, InvalidType

__all__ = ("MAX_ID_BYTES", "MAX_JSON_DEPTH", "check_id", "check_json", "check_text", "not_unicode")

#: The longest id (namespace, session id, turn id, idempotency key, cursor name, pointer id ...), in UTF-8 bytes.
MAX_ID_BYTES = 512
#: The deepest nesting of dicts and lists accepted in turn metadata and cursor values.
MAX_JSON_DEPTH = 100


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
