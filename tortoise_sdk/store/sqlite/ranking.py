"""SQLite ranking: BM25 over the turn index with statistics of the namespace alone.

FTS5's own ``bm25()`` counts documents and term frequencies over the whole index, so one
tenant's turns would move another's scores and results. Here the index only finds the turns
that hold a term (a walk of the term's postings through ``fts5vocab``); the ranking reads the
namespace's statistics (``rank_namespaces``, ``rank_terms``, ``rank_turns``; see migration 6),
which the capture transaction keeps exact. Scores use FTS5's formula (``search.index_idf``,
``search.saturation``), so they stay comparable with PostgreSQL's. Memories are ranked the same
way (``memory_bm25``: FTS5's ``bm25()`` with the namespace's counts, taken at query time).
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ...models import SearchHit
from ...search import (
    BM25_B,
    BM25_K1,
    INDEX_CHARS,
    NAME_INDEX_CHARS,
    NAME_WEIGHT,
    POSTINGS_BUDGET,
    TF_CAP,
    idf,
    idf_bonus,
    index_idf,
    indexed_text,
    split_by_postings,
)
from ..rows import turn_hit

__all__ = ("INDEXED_TURN_COLUMNS", "MEMORY_WEIGHTS", "NEWEST_TURNS", "SQLiteRankingMixin", "TURN_COLUMNS", "memory_bm25",
           "newest_rowid", "with_heads")

TURN_COLUMNS = "t.turn_id, t.external_id, t.session_id, s.session_date, t.idx, t.role, t.name, t.content"
#: The same with the content cut to what is indexed: what the reflex's reads return.
#: Turns whose index holds more tokens than this are probably long, and ``substr()`` would load
#: the whole value (5 MB for a pasted log, about 1 ms) to return its head: their content comes back
#: NULL and ``with_heads`` reads the head through a blob handle, only the bytes it needs. A guess
#: costs time, never correctness: both ways give the first INDEX_CHARS characters.
_LONG_TOKENS = 1_000
INDEXED_TURN_COLUMNS = TURN_COLUMNS.replace(
    "t.content",
    f"CASE WHEN (SELECT n_tokens FROM rank_turns i WHERE i.rowid = t.rowid) > {_LONG_TOKENS} THEN NULL"
    f" ELSE substr(t.content, 1, {INDEX_CHARS}) END AS content, t.rowid AS content_rowid",
)
_HEAD_BYTES = INDEX_CHARS * 4  # UTF-8 takes at most 4 bytes a character


def with_heads(c: sqlite3.Connection, rows: Sequence[Any], content_at: int) -> list[list[Any]]:
    """``rows`` selected with ``INDEXED_TURN_COLUMNS`` (at ``content_at``), each content filled in and its rowid dropped."""
    out = []
    for row in rows:
        r = list(row)
        rowid = r.pop(content_at + 1)
        if r[content_at] is None:
            r[content_at] = _head(c, rowid)
        out.append(r)
    return out


def _head(c: sqlite3.Connection, rowid: int) -> str:
    if not hasattr(c, "blobopen"):  # Python 3.10
        return c.execute(f"SELECT substr(content, 1, {INDEX_CHARS}) FROM turns WHERE rowid = ?", (rowid,)).fetchone()[0]
    with c.blobopen("turns", "content", rowid, readonly=True) as blob:
        data = blob.read(_HEAD_BYTES)
    # Only a character cut at the end of the read part can be incomplete (stored text is valid UTF-8).
    return data.decode("utf-8", errors="ignore")[:INDEX_CHARS]
#: Byte k at offset k (0 to 127): ``instr(_BYTES, b) - 1`` is the value of a one-byte varint ``b`` in SQL.
_BYTES = bytes(range(128))
_TOKENIZE = "tokenize='porter unicode61 remove_diacritics 2'"
#: How many of its newest turns stand in for a term whose postings exceed the budget: each is read
#: and tokenized again for its term frequencies (~15 us a turn), 30x what reading a posting costs.
NEWEST_TURNS = 500
# Per-connection TEMP tables: a scratch index with the turn index's tokenizer (each captured
# batch is tokenized there once, for its statistics; contentless, so emptying it is one
# 'delete-all' rather than a second tokenization, and without positions, which the counts do not
# need) and views of both indexes' terms.
_TEMP_TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_batch USING fts5"
    f"(content, name, content='', detail=column, columnsize=0, {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_batch_row USING fts5vocab(temp, tortoise_batch, 'row')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_batch_col USING fts5vocab(temp, tortoise_batch, 'col')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_turns_inst USING fts5vocab(main, turns_fts, 'instance')",
    # A bounded search's candidates, tokenized again (with positions) for their term frequencies.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_cands USING fts5(content, name, content='', {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_cands_inst USING fts5vocab(temp, tortoise_cands, 'instance')",
    # Memory search: its phrases tokenized as memories_fts does, and that index's postings.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_phrases USING fts5(x, {_TOKENIZE})",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_phrases_inst USING fts5vocab(temp, tortoise_phrases, 'instance')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_memories_inst USING fts5vocab(main, memories_fts, 'instance')",
)


class SQLiteRankingMixin:
    """Namespace-scoped statistics and BM25 search for ``SQLiteStore``."""

    read: Callable[[], AbstractContextManager[sqlite3.Connection]]
    analyze: Callable[[Sequence[str]], list[list[str]]]

    # -- keeping the statistics (inside the capture or delete transaction) ----------------------

    def index_turns(self, c: sqlite3.Connection, namespace: str, after_rowid: int) -> None:
        """Index the turns inserted after ``after_rowid`` (all of ``namespace``) and count them in its statistics."""
        c.execute(
            "INSERT INTO turns_fts (rowid, content, name)"
            " SELECT rowid, substr(content, 1, ?), substr(name, 1, ?) FROM turns WHERE rowid > ?",
            (INDEX_CHARS, NAME_INDEX_CHARS, after_rowid),
        )
        ns_id = self._count_turns(c, namespace, "rowid > ?", (after_rowid,), +1)
        if ns_id is None:
            return
        # Each turn's length in tokens is its record in the turn index's docsize table, just written
        # from the same text. Two one-byte varints (both counts below 128, nearly always) are read by
        # SQL: a byte's value is its offset in _BYTES; Python decodes the rest.
        c.execute(
            "INSERT INTO rank_turns (rowid, ns_id, n_tokens) SELECT id, ?,"
            " instr(?2, substr(sz, 1, 1)) + instr(?2, substr(sz, 2, 1)) - 2"
            " FROM turns_fts_docsize WHERE id > ?3 AND length(sz) = 2 AND sz < x'8000'",
            (ns_id, _BYTES, after_rowid),
        )
        c.executemany("INSERT INTO rank_turns (rowid, ns_id, n_tokens) VALUES (?, ?, ?)", [
            (rowid, ns_id, sum(_varints(sz))) for rowid, sz in _tuples(c).execute(
                "SELECT id, sz FROM turns_fts_docsize WHERE id > ? AND NOT (length(sz) = 2 AND sz < x'8000')",
                (after_rowid,))
        ])
        c.execute("UPDATE rank_namespaces SET n_tokens = n_tokens"
                  " + (SELECT COALESCE(SUM(n_tokens), 0) FROM rank_turns WHERE rowid > ?) WHERE ns_id = ?",
                  (after_rowid, ns_id))

    def unindex_turns(self, c: sqlite3.Connection, namespace: str, turn_ids: Sequence[str]) -> None:
        """Take turns of ``namespace`` out of its ranking statistics.

        Call it in the deleting transaction, before the ``DELETE FROM turns`` (whose trigger
        takes them out of the full-text index).
        """
        if not turn_ids:
            return
        where = "namespace = ? AND turn_id IN (SELECT value FROM json_each(?))"
        args = (namespace, json.dumps(list(turn_ids)))
        ns_id = self._count_turns(c, namespace, where, args, -1)
        if ns_id is None:
            return
        # Their lengths as they were counted in.
        c.execute("UPDATE rank_namespaces SET n_tokens = n_tokens - (SELECT COALESCE(SUM(n_tokens), 0) FROM rank_turns"
                  f" WHERE rowid IN (SELECT rowid FROM turns WHERE {where})) WHERE ns_id = ?", (*args, ns_id))
        c.execute(f"DELETE FROM rank_turns WHERE rowid IN (SELECT rowid FROM turns WHERE {where})", args)
        c.execute("DELETE FROM rank_namespaces WHERE ns_id = ? AND n_turns <= 0", (ns_id,))

    def _count_turns(self, c: sqlite3.Connection, namespace: str, where: str, args: Sequence[Any],
                     sign: int) -> int | None:
        """Add (``sign`` +1) or take off (-1) the turns ``where`` selects in the namespace's turn and term counts.

        Returns its ``ns_id`` (None when no turn is selected); the caller keeps ``rank_turns`` and the token total.
        """
        ensure_temp(c)
        _clear_batch(c)
        n = c.execute(
            "INSERT INTO temp.tortoise_batch (rowid, content, name)"
            f" SELECT rowid, substr(content, 1, ?), substr(name, 1, ?) FROM turns WHERE {where}",
            (INDEX_CHARS, NAME_INDEX_CHARS, *args),
        ).rowcount
        if n <= 0:
            return None
        c.execute("INSERT INTO rank_namespaces (namespace) VALUES (?) ON CONFLICT (namespace) DO NOTHING", (namespace,))
        ns_id: int = c.execute("SELECT ns_id FROM rank_namespaces WHERE namespace = ?", (namespace,)).fetchone()[0]
        c.execute("UPDATE rank_namespaces SET n_turns = n_turns + ? WHERE ns_id = ?", (sign * n, ns_id))
        # Per term: turns holding it, in content, in the name. One scan of each vocabulary, merged
        # here (joining them looks each term up again, ~20 us a term; a scan of the postings costs more).
        cur = _tuples(c)
        counts = {term: [n, 0, 0] for term, n in cur.execute("SELECT term, doc FROM temp.tortoise_batch_row")}
        for term, col, n in cur.execute("SELECT term, col, doc FROM temp.tortoise_batch_col"):
            counts[term][1 if col == "content" else 2] = n
        c.executemany(
            "INSERT INTO rank_terms (ns_id, term, n_turns, n_content, n_name) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (ns_id, term) DO UPDATE SET n_turns = n_turns + excluded.n_turns,"
            " n_content = n_content + excluded.n_content, n_name = n_name + excluded.n_name",
            [(ns_id, term, sign * n, sign * n_content, sign * n_name)
             for term, (n, n_content, n_name) in counts.items()],
        )
        if sign < 0:
            c.execute("DELETE FROM rank_terms WHERE ns_id = ? AND n_turns <= 0", (ns_id,))
        _clear_batch(c)
        return ns_id

    # -- reading them ---------------------------------------------------------------------------

    def term_stats(self, namespace: str, terms: Sequence[str]) -> tuple[int, dict[str, tuple[int, int]]]:
        """``(turns in the namespace, {term: (turns whose content has it, turns whose speaker name has it)})``."""
        with self.read() as c:
            totals = _totals(c, namespace)
            if totals is None:
                return 0, {}
            dfs = _dfs(c, totals[0], terms)
        return totals[1], {t: (v[1], v[2]) for t, v in dfs.items()}

    def search_terms(
        self, namespace: str, terms: Sequence[str], *, k: int, session_id: str | None = None
    ) -> list[SearchHit]:
        """BM25 over the terms with the namespace's statistics, with bounded work on large stores.

        Terms are the index's stems of the words given. They are taken rarest first (in this
        namespace) until their postings reach ``search.POSTINGS_BUDGET``; those retrieve and rank
        a candidate pool, and each remaining (common, low-IDF) term adds its IDF to the candidates
        whose indexed text mentions it, its BM25 share at tf = 1 and average length. When even the
        rarest term has more postings than the budget, only its newest ``NEWEST_TURNS`` turns
        are candidates (the index walks a MATCH backwards, so the cost does not grow with the
        store); each is scored exactly as plain BM25 would. On a small namespace every term fits
        the budget and this is plain BM25. Ties go by session id, then position.
        """
        stems = list(dict.fromkeys(s for st in self.analyze([t for t in terms if t]) for s in st))
        if not stems or k < 1:
            return []
        with self.read() as c:
            totals = _totals(c, namespace)
            if totals is None:
                return []
            ns_id, n_docs, n_tokens = totals
            dfs = {t: v[0] for t, v in _dfs(c, ns_id, stems).items()}
            found = [t for t in stems if t in dfs]
            if not found:
                return []
            budget = POSTINGS_BUDGET
            lead, rest = split_by_postings(found, dfs, budget) if session_id is None else (found, [])
            ensure_temp(c)
            avgdl = max(n_tokens / max(n_docs, 1), 1.0)
            weights = {t: index_idf(n_docs, dfs[t]) for t in lead}
            # Too many postings even for the rarest term: its newest turns, re-tokenized, stand in for the index.
            vocab = "temp.tortoise_turns_inst"
            if session_id is None and dfs[lead[0]] > budget and self._newest_candidates(
                    c, lead[0], ns_id, min(budget, NEWEST_TURNS)):
                vocab = "temp.tortoise_cands_inst"
            scores: dict[int, float] = {}
            rows = _tuples(c)
            # Each (turn, term) pair is scored by SQLite in one grouped row: the term's weighted
            # frequency (content 1, name NAME_WEIGHT), capped, saturated with the turn's length.
            # The operations are search.saturation's, in its order; terms are added in sorted order.
            for term in sorted(lead):
                part = dict(rows.execute(_TERM_SCORES.format(vocab=vocab), (
                    weights[term], BM25_K1 + 1.0, BM25_K1, 1.0 - BM25_B, BM25_B, avgdl, NAME_WEIGHT, TF_CAP,
                    term, ns_id)))
                # scores[doc] += score for each row, with a Python step only for turns an earlier term scored.
                for doc in part.keys() & scores.keys():
                    part[doc] = scores[doc] + part[doc]
                scores.update(part)
            if session_id is not None:
                own = {r[0] for r in c.execute("SELECT rowid FROM turns WHERE namespace = ? AND session_id = ?",
                                               (namespace, session_id))}
                scores = {d: v for d, v in scores.items() if d in own}
            if rest:
                pool = _best(scores, max(5 * k, 50))
                idfs = {t: idf(n_docs, dfs[t]) for t in rest}
                texts = _indexed_texts(c, pool)
                scores = {d: scores[d] + idf_bonus(texts.get(d, ""), idfs) for d in pool}
            return _top(c, scores, k)

    def _newest_candidates(self, c: sqlite3.Connection, stem: str, ns_id: int, n: int) -> bool:
        """Fill ``temp.tortoise_cands`` with the indexed text of the ``n`` newest turns of ``ns_id`` holding ``stem``.

        False (and nothing filled) when the stem does not tokenize to itself, so a MATCH on it
        would look for another term: the caller then reads the whole posting list.
        """
        if self.analyze([stem]) != [[stem]]:
            return False
        c.execute("INSERT INTO temp.tortoise_cands (tortoise_cands) VALUES ('delete-all')")
        c.execute(
            "INSERT INTO temp.tortoise_cands (rowid, content, name)"
            " SELECT t.rowid, substr(t.content, 1, ?), substr(t.name, 1, ?) FROM turns t WHERE t.rowid IN ("
            "  SELECT f.rowid FROM turns_fts f JOIN rank_turns i ON i.rowid = f.rowid"
            "  WHERE turns_fts MATCH ? AND i.ns_id = ? AND f.rowid <= ? ORDER BY f.rowid DESC LIMIT ?)",
            (INDEX_CHARS, NAME_INDEX_CHARS, '"' + stem.replace('"', '""') + '"', ns_id, newest_rowid(c, ns_id), n),
        )
        return True


# One term's BM25 share per turn of a namespace: ?1 weight, ?2 k1 + 1, ?3 k1, ?4 1 - b, ?5 b, ?6 avgdl,
# ?7 the name's weight, ?8 the frequency cap, ?9 the term, ?10 the namespace id; {vocab} the postings read.
_TERM_SCORES = """
    SELECT doc, ?1 * (f * ?2 / (f + ?3 * (?4 + ?5 * n / ?6))) FROM (
        SELECT v.doc AS doc, MIN(SUM(CASE v.col WHEN 'content' THEN 1.0 ELSE ?7 END), ?8) AS f, i.n_tokens AS n
        FROM {vocab} v JOIN rank_turns i ON i.rowid = v.doc
        WHERE v.term = ?9 AND i.ns_id = ?10 GROUP BY v.doc
    )
"""


def newest_rowid(c: sqlite3.Connection, ns_id: int) -> int:
    """The rowid of the namespace's newest turn (0 for none), one probe of ``rank_turns_namespace``.

    A walk of the shared index newest first bounded by it (``f.rowid <= ?``, which FTS5 seeks to)
    never reads the postings of other namespaces' newer turns: without it, a namespace quiet while
    others kept writing read past all of theirs that hold the word (0.3 s a term at a million turns).
    """
    row = c.execute("SELECT MAX(rowid) FROM rank_turns WHERE ns_id = ?", (ns_id,)).fetchone()
    return row[0] or 0


def ensure_temp(c: sqlite3.Connection) -> None:
    """Create this connection's TEMP ranking tables (once per connection)."""
    done: set[str] = getattr(c, "temp_ready", set())
    if "ranking" in done:
        return
    for stmt in _TEMP_TABLES:
        c.execute(stmt)
    done.add("ranking")


def _clear_batch(c: sqlite3.Connection) -> None:
    c.execute("INSERT INTO temp.tortoise_batch (tortoise_batch) VALUES ('delete-all')")


def _totals(c: sqlite3.Connection, namespace: str) -> tuple[int, int, int] | None:
    row = c.execute("SELECT ns_id, n_turns, n_tokens FROM rank_namespaces WHERE namespace = ?", (namespace,)).fetchone()
    return None if row is None or row[1] <= 0 else (row[0], row[1], row[2])


def _dfs(c: sqlite3.Connection, ns_id: int, terms: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    unique = [t for t in dict.fromkeys(terms) if t]
    out: dict[str, tuple[int, int, int]] = {}
    for i in range(0, len(unique), 500):
        part = unique[i:i + 500]
        for term, n, n_content, n_name in c.execute(
            "SELECT term, n_turns, n_content, n_name FROM rank_terms"
            f" WHERE ns_id = ? AND term IN ({', '.join('?' * len(part))})", (ns_id, *part)
        ):
            out[term] = (n, n_content, n_name)
    return out


def _tuples(c: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor of ``c`` whose rows are plain tuples (cheaper than ``sqlite3.Row`` for thousands of rows)."""
    cur = c.cursor()
    cur.row_factory = None
    return cur


def _indexed_texts(c: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
    if not rowids:
        return {}
    return {r[0]: indexed_text(r[1]) for r in _tuples(c).execute(
        f"SELECT rowid, substr(content, 1, ?) FROM turns WHERE rowid IN ({', '.join('?' * len(rowids))})",
        (INDEX_CHARS, *rowids))}


def _best(scores: Mapping[int, float], n: int) -> list[int]:
    """The ``n`` best ids, ties by smaller id: ``sorted(scores, key=(-score, id))[:n]`` with only the best sorted."""
    if len(scores) > n:
        floor = heapq.nlargest(n, scores.values())[-1]
        scores = {d: v for d, v in scores.items() if v >= floor}
    return sorted(scores, key=lambda d: (-scores[d], d))[:n]


def _top(c: sqlite3.Connection, scores: Mapping[int, float], k: int) -> list[SearchHit]:
    """The k best turns, ties by session id then position.

    Only turns scoring at least the k-th score are read; when a run of ties makes them many (a
    common term in a large store), their tie-break keys are read first and whole rows only for
    the k kept.
    """
    if not scores:
        return []
    floor = heapq.nlargest(k, scores.values())[-1]
    wanted = [d for d, s in scores.items() if s >= floor]
    if len(wanted) > k:
        keys = _rows(c, "SELECT rowid, session_id, idx FROM turns WHERE rowid IN ({})", wanted)
        keys.sort(key=lambda r: (-scores[r[0]], r[1], r[2]))
        wanted = [r[0] for r in keys[:k]]
    rows = _rows(c, f"SELECT t.rowid AS rid, {TURN_COLUMNS} FROM turns t JOIN sessions s"
                    " ON s.namespace = t.namespace AND s.session_id = t.session_id WHERE t.rowid IN ({})", wanted)
    rows.sort(key=lambda r: (-scores[r["rid"]], r["session_id"], r["idx"]))
    return [turn_hit(tuple(r)[1:], scores[r["rid"]]) for r in rows[:k]]


def _rows(c: sqlite3.Connection, sql: str, rowids: Sequence[int]) -> list[Any]:
    """``sql``'s rows for ``rowids`` (its ``{}`` takes their placeholders), 500 a statement."""
    out: list[Any] = []
    for i in range(0, len(rowids), 500):
        part = rowids[i:i + 500]
        out += c.execute(sql.format(", ".join("?" * len(part))), part).fetchall()
    return out


# -- memories: FTS5's bm25() with the namespace's statistics -----------------------------------------

#: Column weights of ``memories_fts`` (content, search keys, entity names) in ``search_memories``.
MEMORY_WEIGHTS = (1.0, 0.8, 0.6)
_MARK = "\ue000"  # opens each phrase instance highlight() marks; counted net of the stored text's own


def memory_bm25(
    c: sqlite3.Connection, namespace: str, phrases: Sequence[str], statuses: Sequence[str], *, k: int,
    weights: Sequence[float] = MEMORY_WEIGHTS,
) -> list[tuple[int, float]]:
    """``(rowid, score)`` of the ``k`` best memories of ``namespace`` matching any phrase, best first (ties oldest first).

    The score is FTS5's ``bm25()`` for the OR of the quoted phrases, with ``N``, the average row
    length and each phrase's row count taken from the namespace's indexed memories (one read of
    its rows' sizes in ``memories_fts_docsize``) instead of the whole index, so another
    namespace's memories never change it. A one-token phrase's hits per row and column are its
    postings (``fts5vocab``); a longer phrase is matched by the index and ``highlight()`` counts
    its hits per column (overlapping hits, ``"ha ha"`` in "ha ha ha", count once there, twice
    in ``bm25()``).
    """
    if k < 1 or not phrases:
        return []
    rows: dict[int, tuple[bool, int]] = {}  # rowid -> (status wanted, length in tokens)
    wanted = set(statuses)
    n_tokens = 0
    for rid, status, sz in c.execute("SELECT m.rowid, m.status, d.sz FROM memories m"
                                     " JOIN memories_fts_docsize d ON d.id = m.rowid WHERE m.namespace = ?",
                                     (namespace,)):
        length = sum(_varints(sz))
        rows[rid] = (status in wanted, length)
        n_tokens += length
    if not rows:
        return []
    avgdl = max(n_tokens, 1) / len(rows)
    tokens = _phrase_tokens(c, list(dict.fromkeys(phrases)))
    column = dict(zip(("content", "search_keys", "entities"), weights))
    per_phrase: dict[str, tuple[int, dict[int, float]]] = {}
    for phrase, toks in tokens.items():
        hits: set[int] = set()
        freqs: dict[int, float] = {}
        if len(toks) == 1:
            for rid, col in c.execute("SELECT doc, col FROM temp.tortoise_memories_inst WHERE term = ?", (toks[0],)):
                row = rows.get(rid)
                if row is not None:
                    hits.add(rid)
                    if row[0]:
                        freqs[rid] = freqs.get(rid, 0.0) + column[col]
        elif toks:
            for rid, h0, h1, h2, t0, t1, t2 in c.execute(
                "SELECT f.rowid, highlight(memories_fts, 0, ?1, ''), highlight(memories_fts, 1, ?1, ''),"
                " highlight(memories_fts, 2, ?1, ''), f.content, f.search_keys, f.entities"
                " FROM memories_fts f JOIN memories m ON m.rowid = f.rowid WHERE memories_fts MATCH ?2 AND m.namespace = ?3",
                (_MARK, '"' + phrase.replace('"', '""') + '"', namespace),
            ):
                hits.add(rid)
                if rows[rid][0]:
                    freqs[rid] = sum(w * ((h or "").count(_MARK) - (t or "").count(_MARK))
                                     for w, h, t in zip(weights, (h0, h1, h2), (t0, t1, t2)))
        per_phrase[phrase] = (len(hits), freqs)
    scores: dict[int, float] = {}
    for phrase in phrases:
        n_hits, freqs = per_phrase[phrase]
        weight = index_idf(len(rows), n_hits)
        for rid, f in freqs.items():
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * rows[rid][1] / avgdl)
            scores[rid] = scores.get(rid, 0.0) + weight * f * (BM25_K1 + 1.0) / (f + norm)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]


def _phrase_tokens(c: sqlite3.Connection, phrases: Sequence[str]) -> dict[str, list[str]]:
    """Each phrase's tokens as ``memories_fts`` indexes them (the same tokenizer, in a TEMP table)."""
    ensure_temp(c)
    c.execute("DELETE FROM temp.tortoise_phrases")
    c.executemany("INSERT INTO temp.tortoise_phrases (rowid, x) VALUES (?, ?)",
                  [(i + 1, p) for i, p in enumerate(phrases)])
    out: dict[str, list[str]] = {p: [] for p in phrases}
    for doc, term in c.execute("SELECT doc, term FROM temp.tortoise_phrases_inst ORDER BY doc, offset"):
        out[phrases[doc - 1]].append(term)
    c.execute("DELETE FROM temp.tortoise_phrases")
    return out


def _varints(blob: bytes) -> list[int]:
    """The integers of an FTS5 ``docsize`` record (SQLite varints: 7 bits a byte, high bit = more; a 9th byte is whole)."""
    if not blob or max(blob) < 0x80:  # every count below 128: one byte each
        return list(blob)
    out = []
    i = 0
    while i < len(blob):
        v = 0
        for j in range(9):
            b = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | b
                break
            v = (v << 7) | (b & 0x7F)
            if b < 0x80:
                break
        out.append(v)
    return out
