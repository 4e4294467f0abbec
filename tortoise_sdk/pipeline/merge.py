"""The S2/S4 reply contract, identity keys, and the union of the S2 list with the S4 delta. Pure.

Identity: an entity is (normalised name, normalised kind); an event, point or
retraction is its :func:`~tortoise_sdk.text.fact_key` (content up to wording: case,
punctuation, articles, number words, plural and tense endings). The union of an S2
list and an S4 delta:

- on an identity collision, S4 wins;
- an S2 item absent from S4 is kept;
- an S4-only item is added;
- several items with one identity in the same list collapse to one chosen by a
  fixed total order (quoted and anchored first), so the result does not depend
  on order or duplication. The output is sorted by (cited turn, identity);
- nothing cites less: the (quote, turn) of every item a survivor stands for is kept
  on it (``also``), so grounding keeps each as a source of the one memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..models import Diagnostic
from ..text import fact_key, norm_content, norm_name

__all__ = (
    "Entity",
    "Event",
    "Point",
    "Proposal",
    "Retraction",
    "coerce_proposal",
    "identity",
    "sources_of",
    "union",
    "with_sources",
)


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


def _names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    return tuple(str(v).strip() for v in value if isinstance(v, (str, int)) and str(v).strip())


def _turn(value: Any) -> int | None:
    """A turn index as a model wrote it (``3``, ``"3"``, ``"[#3]"``); a value that names no turn raises ValueError."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip().lstrip("[#").rstrip("]")
    if isinstance(value, float) and not value.is_integer():  # 2.9 names no turn (nor does inf: is_integer False)
        raise ValueError(f"turn {value!r} is not a turn index")
    return int(value)


class Entity(_Item):
    """A person, place, organisation, pet, object or idea the session talks about."""

    name: str = Field(description="As written in the session, e.g. 'Caroline'.")
    kind: str = Field(default="other", description="person, place, organization, pet, object, concept, other.")
    note: str | None = Field(default=None, description="A short description, if the session gives one.")

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        return (str(value).strip().lower() or "other") if value is not None else "other"


class _Grounded(_Item):
    content: str = Field(description="One self-contained statement.")
    quote: str | None = Field(default=None, description="Verbatim text of the cited turn.")
    turn: int | None = Field(default=None, description="Index of the source turn in the session.")
    supersedes: str | None = Field(default=None, description="S4 only: the prior (P-handle) this replaces.")
    category: str | None = Field(default=None, description="One of the host's categories, when it gave some.")
    #: Other (quote, turn) the same fact was stated with (set by the union and VET merges, never by a reply).
    also: tuple[tuple[str | None, int | None], ...] = ()

    @field_validator("turn", mode="before")
    @classmethod
    def _coerce_turn(cls, value: Any) -> int | None:
        return _turn(value)

    @field_validator("content", "quote", "supersedes", "category", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class Event(_Grounded):
    """Something that happened (or will), with its time when known."""

    kind: str = Field(default="event", description="A short label: trip, job_change, milestone ...")
    when: str | None = None
    about: tuple[str, ...] = ()

    @field_validator("about", mode="before")
    @classmethod
    def _coerce_about(cls, value: Any) -> tuple[str, ...]:
        return _names(value)


class Point(_Grounded):
    """A durable fact, preference, plan or relationship."""

    about: tuple[str, ...] = ()
    when: str | None = None
    search_keys: tuple[str, ...] = ()

    @field_validator("about", "search_keys", mode="before")
    @classmethod
    def _coerce_names(cls, value: Any) -> tuple[str, ...]:
        return _names(value)


class Retraction(_Grounded):
    """The speaker takes back something said before ("I'm no longer vegan")."""


class Proposal(BaseModel):
    """The reply contract of S2 (and S4's delta): entities, events, points, retractions."""

    model_config = ConfigDict(frozen=True)

    entities: tuple[Entity, ...] = ()
    events: tuple[Event, ...] = ()
    points: tuple[Point, ...] = ()
    retractions: tuple[Retraction, ...] = ()

    def size(self) -> int:
        """Items of every kind."""
        return len(self.entities) + len(self.events) + len(self.points) + len(self.retractions)


_KINDS: tuple[tuple[str, type[_Item]], ...] = (
    ("entities", Entity), ("events", Event), ("points", Point), ("retractions", Retraction),
)

I = TypeVar("I", bound=_Item)


def identity(item: _Item) -> tuple[str, ...]:
    """The identity key of an item (see the module docstring)."""
    if isinstance(item, Entity):
        return (norm_name(item.name), norm_name(item.kind))
    return (fact_key(getattr(item, "content", "")),)


def coerce_proposal(value: Any, *, stage: str) -> tuple[Proposal, list[Diagnostic]]:
    """Validate a parsed reply item by item: a malformed item is dropped alone, with a warning.

    An empty object ``{}`` is a proposal of nothing, like four empty lists.

    Raises:
        ValueError: the reply is not an object, or has keys but none of the four lists.
    """
    if isinstance(value, Mapping) and not value:
        return Proposal(), []
    if not isinstance(value, Mapping) or not any(k in value for k, _ in _KINDS):
        raise ValueError("expected an object with entities, events, points or retractions")
    warnings: list[Diagnostic] = []
    fields: dict[str, list[Any]] = {}
    for key, model in _KINDS:
        raw = value.get(key) or []
        if not isinstance(raw, list):
            raw = [raw]
        kept = []
        for i, item in enumerate(raw):
            try:
                if isinstance(item, Mapping):
                    item = {k: v for k, v in item.items() if k != "also"}  # provenance is ours to set
                parsed = model.model_validate(item)
                if not identity(parsed)[0]:
                    raise ValueError("empty name or content")
                kept.append(parsed)
            except (ValidationError, ValueError, TypeError, ArithmeticError) as exc:
                warnings.append(Diagnostic(
                    stage=stage, code="malformed_item",
                    message=f"{key}[{i}] dropped: {_first_error(exc)}",
                    detail={"item": item if isinstance(item, (dict, str)) else repr(item)},
                ))
        fields[key] = kept
    return Proposal(**fields), warnings


def union(s2: Proposal, s4: Proposal) -> Proposal:
    """S2 list ∪ S4 delta under the identity rules: S4 wins collisions, nothing of S2 is dropped."""
    return Proposal(**{key: _union(getattr(s2, key), getattr(s4, key)) for key, _ in _KINDS})


def _union(base: Iterable[I], delta: Iterable[I]) -> tuple[I, ...]:
    merged = _collapse(base)
    for key, item in _collapse(delta).items():
        merged[key] = with_sources(item, [merged[key]]) if key in merged else item
    return tuple(sorted(merged.values(), key=_position))


def _collapse(items: Iterable[I]) -> dict[tuple[str, ...], I]:
    groups: dict[tuple[str, ...], list[I]] = {}
    for item in items:
        groups.setdefault(identity(item), []).append(item)
    out: dict[tuple[str, ...], I] = {}
    for key, group in groups.items():
        best = min(group, key=_preference)
        out[key] = with_sources(best, group)
    return out


def sources_of(item: _Item) -> set[tuple[str | None, int | None]]:
    """Every (quote, turn) an item stands for: its own and those it absorbed."""
    if not isinstance(item, _Grounded):
        return set()
    return {(item.quote, item.turn), *item.also}


def with_sources(item: I, others: Iterable[_Item]) -> I:
    """``item`` also citing the (quote, turn) of ``others``, in a fixed order (order-independent results)."""
    if not isinstance(item, _Grounded):
        return item
    own = (item.quote, item.turn)
    pairs = set(item.also).union(*(sources_of(o) for o in others)) - {own}
    also = tuple(sorted(pairs, key=lambda p: (p[0] is None, p[0] or "", p[1] is None, p[1] or 0)))
    return item if also == item.also else item.model_copy(update={"also": also})  # type: ignore[return-value]


def _preference(item: _Item) -> tuple[Any, ...]:
    # A total order, so that which duplicate survives never depends on input order.
    quote = getattr(item, "quote", None)
    turn = getattr(item, "turn", None)
    return (quote is None, turn is None, json.dumps(item.model_dump(mode="json"), sort_keys=True))


def _position(item: _Item) -> tuple[Any, ...]:
    turn = getattr(item, "turn", None)
    # Within a turn, by normalised wording (as before the fact key), then identity: a stable write order.
    surface = (norm_content(item.content),) if isinstance(item, _Grounded) else identity(item)
    return (turn is None, turn if turn is not None else 0, surface, identity(item), _preference(item))


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(str(p) for p in err['loc']) or 'item'}: {err['msg']}"
    return str(exc)
