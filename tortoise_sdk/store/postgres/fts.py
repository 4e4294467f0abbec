"""BM25 in PostgreSQL, computed exactly as SQLite FTS5's ``bm25()`` does, over tsvector columns.

FTS5 scores a row for an OR of phrases as ``sum_i idf_i * f_i (k1 + 1) / (f_i + k1 (1 - b + b D / avgdl))``
with ``k1 = 1.2``, ``b = 0.75``; ``f_i`` is the phrase's hits in the row, each weighted by its
column's weight; ``D`` is the row's length in tokens; ``idf_i = ln((N - n_i + 0.5) / (n_i + 0.5))``
(at least 1e-6) over the whole index. Here the columns are tsvector weight labels (A, B, C),
``D`` is the row's ``fts_len``, ``N`` and the total tokens come from the sharded ``fts_stats``
counters, and ``n_i`` is counted with the GIN index. Scores therefore match SQLite's to
within tokenizer differences, and so do rankings and any code that mixes scores with
other signals.

Each term is a phrase, as a quoted FTS5 string is, and always a bound parameter
through ``phraseto_tsquery``: user text never reaches tsquery syntax.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ...errors import InvalidInput
__all__ = ("FTS_CONFIG", "STAT_SHARDS", "bm25_search_sql", "index_memories_sql", "newest_matches_sql",
           "rebuild_stats_sql", "terms_from_fts5", "turn_stats_sql", "usable_terms")

FTS_CONFIG = "tortoise_english"
STAT_SHARDS = 16
_K1 = 1.2
_B = 0.75
_TERM = re.compile(r'"((?:[^"]|"")*)"')


def usable_terms(terms: Sequence[str]) -> list[str]:
    """Terms worth sending: non-blank, without NUL (which PostgreSQL text cannot hold)."""
    return [t for t in terms if t and t.strip() and "\x00" not in t]


def bm25_search_sql(
    *,
    table: str,
    alias: str,
    select: str,
    from_: str,
    where: str,
    output: str,
    order_tail: str,
    weights: Mapping[str, float],
) -> str:
    """A query returning the ``output`` columns of ``select`` and a ``score``, for rows matching any term.

    ``select`` is evaluated over ``from_`` (where ``alias`` is ``table``); ``output`` and
    ``order_tail`` name its result columns. Parameters, in order: the terms (``text[]``),
    then ``where``'s own, then the limit.
    """
    case = " ".join(f"WHEN '{label}' THEN {float(w)!r}" for label, w in weights.items())
    weight = f"CASE w {case} ELSE 0.0 END"
    return f"""
        WITH terms AS (
            SELECT t.ord, q.query, tsvector_to_array(to_tsvector('{FTS_CONFIG}'::regconfig, t.term)) AS lexemes
            FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
            CROSS JOIN LATERAL (SELECT phraseto_tsquery('{FTS_CONFIG}'::regconfig, t.term) AS query) AS q
            WHERE numnode(q.query) > 0
        ),
        stats AS (
            SELECT GREATEST(COALESCE(SUM(n_rows), 0), 1)::float8 AS n,
                   GREATEST(COALESCE(SUM(n_tokens), 0), 1)::float8
                       / GREATEST(COALESCE(SUM(n_rows), 0), 1)::float8 AS avgdl
            FROM fts_stats WHERE tbl = '{table}'
        ),
        idf AS MATERIALIZED (
            SELECT terms.ord, terms.query, terms.lexemes,
                   GREATEST(ln((stats.n - h.hits + 0.5) / (h.hits + 0.5)), 1e-6) AS idf
            FROM terms CROSS JOIN stats
            CROSS JOIN LATERAL (SELECT COUNT(*)::float8 AS hits FROM {table} x WHERE x.fts @@ terms.query) AS h
        ),
        matched AS (
            SELECT {select}, {alias}.fts AS _fts, COALESCE({alias}.fts_len, 0) AS _len
            FROM {from_}
            WHERE {alias}.fts @@ (SELECT tortoise_tsquery_or(query) FROM terms) AND {where}
        )
        SELECT {output}, COALESCE((
            SELECT SUM(f.idf * (f.f * {_K1 + 1.0!r})
                       / (f.f + {_K1!r} * (1.0 - {_B!r} + {_B!r} * matched._len / stats.avgdl)))
            FROM (
                SELECT idf.ord, MAX(idf.idf) AS idf, SUM({weight})::float8 AS f
                FROM unnest(matched._fts) AS u
                JOIN idf ON u.lexeme = ANY(idf.lexemes)
                CROSS JOIN LATERAL unnest(u.weights) AS w
                GROUP BY idf.ord
            ) AS f
        ), 0.0) AS score
        FROM matched CROSS JOIN stats
        ORDER BY score DESC, {order_tail}
        LIMIT %s
    """


def newest_matches_sql(*, table: str, alias: str, where: str, content_only: bool) -> str:
    """Ids of the newest ``%s`` rows matching each term (the bounded walk of ``candidate_turns``).

    Parameters, in order: the terms (``text[]``), ``where``'s own, the per-term limit.
    Returns ``(ord, id)`` rows; ``ord`` is the term's 1-based position.
    """
    label = f" AND ts_filter({alias}.fts, '{{a}}') @@ x.query" if content_only else ""
    return f"""
        SELECT x.ord, hit.id FROM (
            SELECT t.ord, phraseto_tsquery('{FTS_CONFIG}'::regconfig, t.term) AS query
            FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
        ) AS x
        CROSS JOIN LATERAL (
            SELECT {alias}.id FROM {table} {alias}
            WHERE numnode(x.query) > 0 AND {alias}.fts @@ x.query{label} AND {where}
            ORDER BY {alias}.id DESC LIMIT %s
        ) AS hit
    """


def index_memories_sql(where: str) -> str:
    """Recompute memories' vectors and lengths (content A, search keys B, entity names C) and add the
    change to the totals; ``where`` filters ``memories m`` (may hold parameters)."""
    return f"""
        WITH v AS (
            SELECT m.memory_id, m.fts_len AS old_len,
                   to_tsvector('{FTS_CONFIG}'::regconfig, m.content) AS c,
                   to_tsvector('{FTS_CONFIG}'::regconfig, COALESCE((
                       SELECT string_agg(k, ' ') FROM jsonb_array_elements_text(m.search_keys::jsonb) AS k), '')) AS k,
                   to_tsvector('{FTS_CONFIG}'::regconfig, COALESCE((
                       SELECT string_agg(e.name, ' ') FROM memory_entities me JOIN entities e
                       ON e.entity_id = me.entity_id WHERE me.memory_id = m.memory_id), '')) AS e
            FROM memories m WHERE {where}
        ),
        upd AS (
            UPDATE memories m
            SET fts = setweight(v.c, 'A') || setweight(v.k, 'B') || setweight(v.e, 'C'),
                fts_len = tortoise_ntokens(v.c) + tortoise_ntokens(v.k) + tortoise_ntokens(v.e)
            FROM v WHERE m.memory_id = v.memory_id
            RETURNING m.fts_len AS new_len, v.old_len
        )
        INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)
        SELECT 'memories', mod(pg_backend_pid(), {STAT_SHARDS}), COUNT(*) FILTER (WHERE old_len IS NULL),
               COALESCE(SUM(new_len - COALESCE(old_len, 0)), 0)
        FROM upd
        ON CONFLICT (tbl, shard) DO UPDATE
        SET n_rows = fts_stats.n_rows + excluded.n_rows, n_tokens = fts_stats.n_tokens + excluded.n_tokens
    """


def turn_stats_sql() -> str:
    """Add the turns with the given ids (one ``text[]`` parameter) to the totals."""
    return (
        "INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)"
        f" SELECT 'turns', mod(pg_backend_pid(), {STAT_SHARDS}), COUNT(*), COALESCE(SUM(fts_len), 0)"
        " FROM turns WHERE turn_id = ANY(%s)"
        " ON CONFLICT (tbl, shard) DO UPDATE"
        " SET n_rows = fts_stats.n_rows + excluded.n_rows, n_tokens = fts_stats.n_tokens + excluded.n_tokens"
    )


def rebuild_stats_sql() -> tuple[str, ...]:
    """Statements that recompute every total from the tables (after a bulk copy)."""
    return (
        "DELETE FROM fts_stats",
        "INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)"
        " SELECT 'turns', 0, COUNT(*), COALESCE(SUM(fts_len), 0) FROM turns",
        "INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)"
        " SELECT 'memories', 0, COUNT(*), COALESCE(SUM(fts_len), 0) FROM memories WHERE fts_len IS NOT NULL",
    )


def terms_from_fts5(match: str) -> list[str]:
    """The terms of an expression made by ``fts5_query``: ``"acme" OR "job"`` -> ``['acme', 'job']``.

    Only that shape is accepted; PostgreSQL never sees FTS5 syntax.

    Raises:
        InvalidInput: ``match`` is not a quoted-OR expression.
    """
    terms: list[str] = []
    pos = 0
    text = match.strip()
    while True:
        m = _TERM.match(text, pos)
        if m is None:
            break
        terms.append(m.group(1).replace('""', '"'))
        pos = m.end()
        if pos == len(text):
            return terms
        sep = re.compile(r"\s+OR\s+").match(text, pos)
        if sep is None:
            break
        pos = sep.end()
    raise InvalidInput(
        "the PostgreSQL store accepts only expressions made by tortoise_sdk.search.fts5_query "
        '(quoted terms joined by OR); pass plain terms to Store.search_terms instead',
        field="match",
    )
