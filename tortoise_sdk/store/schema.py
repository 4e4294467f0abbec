"""A schema migration step, ``Migration``: both engines list theirs with the same versions and meanings (the steps
both run as written are here); ``names_our_migrations`` tells tortoise's record of them from another application's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ("M016_NOTE_PROVENANCE", "M017_ENTITY_PROVENANCE", "Migration", "names_our_migrations")


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


# Steps whose statements both engines run as they are (the others each engine spells its own way).
#
# An entity's note (its description, written by an extraction) names the session whose extraction wrote
# it, as a memory names its turns: forgetting that session takes the note back (it stayed, carrying no
# provenance). A note written before this migration names none and stays as it was.
M016_NOTE_PROVENANCE = Migration(
    16,
    "an entity's note names the session whose extraction wrote it",
    ("ALTER TABLE entities ADD COLUMN note_session_id TEXT",),
)

# The session whose extraction created an entity: forgetting it removes the entity when no memory names it (an
# extraction keeps every entity a session named, even when none of its items survived grounding). An entity created
# before this migration names none: it goes only with the memories that name it.
M017_ENTITY_PROVENANCE = Migration(
    17,
    "an entity names the session whose extraction created it",
    ("ALTER TABLE entities ADD COLUMN created_session_id TEXT",),
)
