"""The reflex's steps in order for one host turn, under a time budget, failing open: ``context``."""

from __future__ import annotations

import contextvars
import gc
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import InvalidInput, InvalidType, StoreError, StoreTimeout
from ..models import MemoryBlock, MemoryRecord, Pointer, SearchHit
from ..store.base import Store
from ..store.deadline import within
from ..validate import check_count, check_id, check_number
from .candidates import hop_pool, hop_terms, instance_pool, later_on_topic, memory_candidates, turn_pool, widen_pool
from .exchange import filled, with_replies
from .feedback import feedback_terms
from .instances import instance_terms, table as instance_table
from .prior import drop_prior, not_in_window
from .query import CHANGE, as_list, one_item, query_text, weigh_terms, window_messages
from .ranker import listing
from .render import render
from .scoring import distinct, fuse, latest_first, memories_first, score_turns, without_stale_turns
from .semantic import Semantic, SemanticStep
from . import gate, host, tuning
from .shapes import Message, Reading, Timeout
from .slots import asker_first, asks_now, expand, slot_words
from .tokens import TokenCounter, approx_tokens

__all__ = ("DEFAULT_BUDGET", "DEFAULT_MAX_TOKENS", "DEFAULT_TIME_BUDGET_MS", "MAX_BUDGET", "context")

log = logging.getLogger("tortoise_sdk.reflex")

DEFAULT_BUDGET = 3
MAX_BUDGET = 8
DEFAULT_MAX_TOKENS = 400
DEFAULT_TIME_BUDGET_MS = 50.0

#: Memory candidates read alongside the turn candidates, each on its own connection, when the store
#: says its reads can run at once (``Store.concurrent_reads``): the two chains are independent.
_READERS = 4
_readers: ThreadPoolExecutor | None = None
_readers_lock = threading.Lock()


def _alongside(store: Store, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` started now in a worker thread (with this thread's deadline scope) when the store reads
    concurrently; returns what waits for its result. A call the workers have not started by then runs
    here instead, so a busy process is never slower than reading in turn."""
    global _readers
    if not getattr(store, "concurrent_reads", False):
        return fn
    with _readers_lock:
        if _readers is None:
            _readers = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="tortoise-reflex")
        running: Future[Any] = _readers.submit(contextvars.copy_context().run, fn)

    def result() -> Any:
        return fn() if running.cancel() else running.result()

    return result


_warmed = False


def _warm_process(store: Store) -> None:
    """Once per process, outside any block's budget: build the block's data shapes' validators (they
    are deferred until first use, ~5 ms) and start the reader threads (``_alongside``). A new
    process (a hook, a CLI call) otherwise paid both inside its first block."""
    global _warmed
    if _warmed:
        return
    for shape in (MemoryBlock, Pointer, SearchHit, MemoryRecord):
        shape.model_rebuild()
    _alongside(store, lambda: None)()
    _warmed = True


_collector_lock = threading.Lock()
_collector_held = False  # a context() call has paused the collector and will resume it


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector waits while a block is built, and runs after it as it would have.

    A block allocates thousands of short-lived objects, and a collection of the oldest generation
    that falls inside one stops every thread for tens of milliseconds in a large process: enough to
    miss the time budget and return nothing. Reference counting still frees what a block drops.
    The call that paused the collector resumes it when its block is done, whatever other blocks
    are being built then, so the collector is never off for longer than one block; what it would
    have collected is collected then. A host that turned the collector off keeps it off.
    """
    global _collector_held
    with _collector_lock:
        mine = not _collector_held and gc.isenabled()
        if mine:
            _collector_held = True
            gc.disable()
    try:
        yield
    finally:
        if mine:
            with _collector_lock:
                _collector_held = False
                gc.enable()


def context(
    store: Store,
    namespace: str,
    window: Sequence[Any],
    prior_context: Any = None,
    *,
    budget: int = DEFAULT_BUDGET,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    session_id: str | None = None,
    token_counter: TokenCounter | None = None,
    time_budget_ms: float | None = DEFAULT_TIME_BUDGET_MS,
    held_from: int | None = None,
    specific_only: bool = False,
    semantic: Semantic | None = None,
    categories: Sequence[str] | None = None,
    held_sessions: Mapping[str, int] | None = None,
) -> MemoryBlock:
    """The memory block for the next host turn; never raises (see the ``tortoise_sdk.reflex`` docstring).

    Args:
        window: the recent conversation: ``Turn``s, OpenAI-style dicts, LangChain messages, ``(role, text)``
            pairs or strings.
        prior_context: what the host already showed: earlier ``MemoryBlock``s, strings or messages.
        budget: at most this many pointers (capped at 8).
        max_tokens: at most this many tokens for the whole block, counted with ``token_counter``.
        session_id: the host's session; its turns the window already shows are never surfaced.
        time_budget_ms: past this, the block is empty with ``degraded_reason="timeout"``; None disables.
        held_from: the host holds ``session_id``'s turns from this index on: never surfaced (``host``).
        held_sessions: other sessions the host holds, each from the index given (a resumed session's
            predecessors): never surfaced either.
        specific_only: a pointer only on evidence specific to the prompt (``gate``).
        semantic: neighbours by meaning join the candidates (``reflex.semantic``); its wait counts in the budget.
        categories: only memories filed under one of these (the host's spelling) are shown; turns,
            which carry no category, are not.
    """
    started = time.perf_counter()
    deadline = None
    try:  # a bad argument is the caller's bug, yet the host turn must go on: an empty block says so
        check_number(time_budget_ms, "time_budget_ms", above=True, optional=True,
                     hint="; pass time_budget_ms=None for no limit (the command line's --time-budget-ms 0)")
        check_id(session_id, "session_id", optional=True)
        check_count(budget, "budget", low=0)
        check_count(max_tokens, "max_tokens", low=0)
        if categories is not None and (isinstance(categories, str)
                                       or not all(isinstance(x, str) for x in categories)):
            raise InvalidInput("must be a list of category names, e.g. categories=['health']", field="categories")
        if held_sessions is not None and not (isinstance(held_sessions, Mapping) and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for k, v in held_sessions.items())):
            raise InvalidInput("must map session ids to the index of their first turn the host holds, e.g. "
                               "{'s1': 0}", field="held_sessions")
        msgs = window_messages(window)
        prior_context = _check_prior(prior_context)
        _check_counter(token_counter)
    except InvalidInput as exc:
        log.warning("reflex: %s, returning an empty block", exc)
        return MemoryBlock(degraded_reason=f"invalid_input: {exc}")
    budget_s = None if time_budget_ms is None else time_budget_ms / 1000
    try:
        # One-time per-connection setup (TEMP tables), kept out of the per-turn time budget, yet bounded by one.
        prepare = getattr(store, "prepare_reflex", None)
        if prepare is not None:
            with within(budget_s):
                prepare()
        _warm_process(store)
        started = time.perf_counter()
        asked = query_text(msgs)
        if tuning.INSTANCE_WEIGHT and listing(asked[0]):
            # Read once per process (about 20 ms), kept out of the per-turn budget too; only a question that
            # asks for several things of a kind uses it, so a hook's fresh process seldom pays for it.
            loading = time.perf_counter()
            instance_table()
            started += time.perf_counter() - loading
        deadline = None if budget_s is None else started + budget_s
        # Every store call below ends by the budget too, whatever the database does (a lock, a frozen server).
        with within(budget_s), _collector_paused():
            block = _steps(Reading(store, namespace, token_counter or approx_tokens, deadline),
                           msgs, asked, prior_context, budget, max_tokens, session_id, held_from, specific_only,
                           semantic, None if categories is None else frozenset(categories), held_sessions)
    except (Timeout, StoreTimeout):
        block = MemoryBlock(degraded_reason="timeout")
    except (StoreError, sqlite3.Error) as exc:
        log.warning("reflex: store error, returning an empty block: %s", exc)
        block = MemoryBlock(degraded_reason="store_error")
    except Exception as exc:  # fail open: the host turn must go on
        log.warning("reflex: %s, returning an empty block", exc, exc_info=True)
        block = MemoryBlock(degraded_reason=f"internal_error: {type(exc).__name__}")
    block.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
    if deadline is not None and block.degraded_reason is None and time.perf_counter() > deadline:
        return MemoryBlock(degraded_reason="timeout", elapsed_ms=block.elapsed_ms)
    return block


def _check_prior(prior: Any) -> list[Any]:
    """``prior_context`` as a list: None, a block, a string or a message, or a list of them (else ``InvalidType``,
    naming the item)."""
    if prior is not None and not one_item(prior) and (isinstance(prior, (bytes, bytearray))
                                                      or not isinstance(prior, Iterable)):
        raise InvalidType("must be what the host already showed: earlier MemoryBlocks, strings or messages, or a "
                          f"list of them; got {type(prior).__name__}", field="prior_context")
    items = as_list(prior)
    for i, x in enumerate(items):
        if x is not None and not one_item(x):
            raise InvalidType(f"must be an earlier MemoryBlock, a string or a message, got {type(x).__name__}",
                              field=f"prior_context[{i}]")
    return [x for x in items if x is not None]


def _check_counter(counter: Any) -> None:
    """``token_counter`` is None or a callable that gives a text's tokens as a non-negative int (tried once)."""
    if counter is None:
        return
    if not callable(counter):
        raise InvalidType(f"must be a callable from a text to its token count, got {type(counter).__name__}",
                          field="token_counter")
    try:
        n = counter("tortoise memory")
    except Exception as exc:  # the host's counter: say so, not "internal_error"
        raise InvalidInput(f"raised {type(exc).__name__} counting a text ({exc}); it must return an int",
                           field="token_counter") from None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidType(f"must return a non-negative int for a text, returned {n!r}", field="token_counter")


def _steps(r: Reading, msgs: list[Message], asked: tuple[str, str, bool], prior: Any, budget: int,
           max_tokens: int, session_id: str | None, held_from: int | None = None, specific_only: bool = False,
           semantic: Semantic | None = None, categories: frozenset[str] | None = None,
           held_sessions: Mapping[str, int] | None = None) -> MemoryBlock:
    """The block for the window's messages that say something (``msgs``) and what they ask (``query_text``)."""
    budget = min(int(budget), MAX_BUDGET)
    max_tokens = int(max_tokens)
    if budget < 1 or max_tokens < 1:
        return MemoryBlock()
    query, earlier, ask = asked
    if not query:
        return MemoryBlock()
    meaning = SemanticStep(semantic, query)  # embedded while the words are searched
    present = bool(tuning.PRESENT_TENSE and asks_now(query))
    # A present-tense question's kind-of-fact words (expand, below) are counted with the question's own.
    terms = r.terms = weigh_terms(r, query, earlier, also=slot_words(query) if present else ())
    r.tick()
    if not terms:
        return MemoryBlock()
    # How things stand now, whatever words the latest statement uses (issue 25): the kind of fact's words.
    terms, slot_terms = expand(r, terms, query) if present else (terms, [])
    r.terms = terms
    wants_change = bool(CHANGE.search(query))
    # The memories need only the terms: they are read while the turns are.
    mem_terms = terms + slot_terms
    memories = _alongside(r.store, lambda: memory_candidates(r, mem_terms, query, wants_change))
    content_terms, pool = turn_pool(r, terms, slot_terms)  # with the kind's words, in the same read
    if slot_terms:
        terms = r.terms = mem_terms
        content_terms = content_terms + slot_terms
    # A category the question names ("activities") reaches the turns that name its instances ("hiking").
    instances = instance_terms(r, terms, query) if tuning.INSTANCE_WEIGHT else []
    if instances:
        pool = instance_pool(r, instances, pool)
        terms = r.terms = terms + instances
        content_terms = content_terms + instances
    # issue 23: what the host holds is no memory
    pool = host.pool_outside_host(pool, session_id, held_from, held_sessions)
    turns = score_turns(r, terms, content_terms, query, pool)
    r.tick()
    # A second hop (issue 25): what the top turns name that the question did not, read once more.
    if tuning.SECOND_HOP and turns:
        extra = hop_terms(r, turns, terms)
        if extra:
            r.terms = terms = terms + extra
            content_terms = content_terms + extra
            pool = host.pool_outside_host(hop_pool(r, extra, pool), session_id, held_from, held_sessions)
            turns = score_turns(r, terms, content_terms, query, pool)
            r.tick()
    if tuning.PRF_TERMS and turns:
        extra = feedback_terms(r, turns, terms)
        if extra:
            r.terms = terms + extra
            content_terms = content_terms + extra
            pool = host.pool_outside_host(widen_pool(r, content_terms, extra, pool), session_id, held_from,
                                          held_sessions)
            turns = score_turns(r, terms, content_terms, query, pool)
            r.tick()
    # A question the host's window already shows brings no reply: the window is dropped first.
    turns = filled(r, with_replies(r, not_in_window(turns, msgs, session_id), pool, budget), pool, budget)
    ranked = distinct(fuse([turns, *memories(), *meaning.lists(r)]))
    # What the window already shows goes before the present-tense step reads the top turns: this
    # session's own question and reply must not take the places of the turns whose follow-ups it seeks.
    ranked = not_in_window(ranked, msgs, session_id)
    r.tick()
    if present:
        ranked = asker_first(latest_first(ranked, later_on_topic(r, ranked, terms, pool, query)), query)
    ranked = ranked[: budget * 4 + len(msgs)]
    # A present-tense question also flags a turn whose fact (or whose asking turn's) a ranked memory replaced.
    replied_to = {c.key: before.turn_id for c in ranked if c.kind == "turn" and c.hit is not None
                  and (before := pool.get((c.hit.session_id, c.hit.index - 1))) is not None} if present else None
    ranked = without_stale_turns(r, ranked, wants_change, replied_to)
    ranked = memories_first(ranked)  # issue 23: a memory before (and instead of) the turns it cites
    if present:
        # Only the follow-ups just added can be in the window again (the rest was filtered above,
        # and without_stale_turns only removes); a second pass otherwise costs about 1 ms a block.
        ranked = not_in_window(ranked, msgs, session_id)
    if not ask:
        ranked = drop_prior(ranked, prior)
    # issue 23: the host's own turns out, and (for a coding host) only evidence specific to the prompt
    ranked = host.outside_host(ranked, session_id, held_from, held_sessions)
    if specific_only:
        ranked = gate.specific(r, ranked, query)
    if categories is not None:  # the host asked for some kinds of memory only: turns carry no category
        ranked = [c for c in ranked if c.memory is not None and c.memory.category in categories]
    return meaning.note(render(r, ranked[: budget * 2], budget, max_tokens, host.header(ranked[:budget], session_id, held_from)))
