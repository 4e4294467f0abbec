"""A schema migration step, ``Migration``: both engines list theirs with the same versions and meanings."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("Migration",)


@dataclass(frozen=True)
class Migration:
    """One schema step: a version number, a name, and its statements."""

    version: int
    name: str
    statements: tuple[str, ...]
