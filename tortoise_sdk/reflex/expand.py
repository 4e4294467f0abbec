"""The full turn or memory behind a pointer of a memory block: ``expand``."""

from __future__ import annotations

from ..errors import InvalidInput, NotFoundError
from ..models import ExpandResult, MemoryRecord, SearchHit
from ..store.base import Store

__all__ = ("REF", "expand")

#: What a block prints before each pointer's id (``ref:t_…``); ``expand`` takes the id with or without it.
REF = "ref:"


def expand(store: Store, namespace: str, pointer_id: str, *, radius: int = 2) -> ExpandResult:
    """The full turn or memory behind a pointer (its id, or ``ref:`` and its id as a block prints it), with its
    surrounding turns.

    Raises:
        InvalidInput: ``pointer_id`` is blank.
        NotFoundError: no turn or memory with that id in this namespace.
    """
    if not isinstance(pointer_id, str) or not pointer_id.strip():
        raise InvalidInput("must be a non-empty id such as 't_…' or 'm_…' from a memory block's pointers (its ref:)",
                           field="pointer_id")
    pointer_id = pointer_id.strip().removeprefix(REF)  # as a block prints it ("ref:t_…"), copied whole
    if not pointer_id.startswith(("t_", "m_")):
        raise NotFoundError(f"no turn or memory {pointer_id!r}: a pointer id starts with 't_' (a turn) or 'm_' (a "
                            "memory); take one from MemoryBlock.pointers, search() or memories()")
    turn = None
    if pointer_id.startswith("t_"):
        turn = store.get_turn(namespace, pointer_id)
    elif hasattr(store, "get_memory"):
        mem: MemoryRecord = store.get_memory(namespace, pointer_id)
        chain = store.supersession_chain(namespace, pointer_id) if hasattr(store, "supersession_chain") else []
        surrounding: list[SearchHit] = []
        session_date = None
        if mem.sources:
            src = mem.sources[0]
            anchor = store.get_turn(namespace, src.turn_id)
            session_date = anchor.session_date
            surrounding = store.turns(namespace, anchor.session_id, start=max(0, anchor.index - radius),
                                      stop=anchor.index + radius + 1)
        return ExpandResult(id=mem.id, kind="memory", content=mem.content, status=mem.status,
                            session_id=mem.session_id, session_date=session_date, supersession=chain,
                            sources=mem.sources, surrounding=surrounding)
    if turn is None:
        raise NotFoundError(f"no turn or memory {pointer_id!r} in namespace {namespace!r}; "
                            "pass an id from MemoryBlock.pointers")
    around = store.turns(namespace, turn.session_id, start=max(0, turn.index - radius), stop=turn.index + radius + 1)
    return ExpandResult(id=turn.turn_id, kind="turn", content=turn.content, status="verbatim",
                        session_id=turn.session_id, session_date=turn.session_date, surrounding=around)
