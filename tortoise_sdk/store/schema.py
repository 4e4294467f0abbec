"""A schema migration step, ``Migration``: both engines list theirs with the same versions and meanings;
``names_our_migrations`` tells tortoise's record of them from another application's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ("Migration", "names_our_migrations")


@dataclass(frozen=True)
class Migration:
    """One schema step: a version number, a name, and its statements."""

    version: int
    name: str
    statements: tuple[str, ...]


def names_our_migrations(rows: Iterable[Sequence[Any]], migrations: Sequence[Migration]) -> bool:
    """Whether ``(version, name)`` rows of a ``schema_migrations`` table are tortoise's own: the foundation
    is recorded under its name, and every version this code knows under the name it gives it (versions
    it does not know come from a newer tortoise-sdk). Another application's table of the same shape fails."""
    known = {m.version: m.name for m in migrations}
    recorded = {version: name for version, name in rows}
    return recorded.get(migrations[0].version) == migrations[0].name and all(
        known.get(version, name) == name for version, name in recorded.items())
