"""BM25 in PostgreSQL, computed exactly as SQLite FTS5's ``bm25()`` does, over tsvector columns.

FTS5 scores a row for an OR of phrases as ``sum_i idf_i * f_i (k1 + 1) / (f_i + k1 (1 - b + b D / avgdl))``
with ``k1 = 1.2``, ``b = 0.75``; ``f_i`` is the phrase's hits in the row, each weighted by its
column's weight; ``D`` is the row's length in tokens; ``idf_i = ln((N - n_i + 0.5) / (n_i + 0.5))``
(at least 1e-6). Here the columns are tsvector weight labels (A, B, C) and ``D`` is the row's
``fts_len``. ``N``, the total tokens and ``n_i`` are always the namespace's own, so another
namespace never changes a score. For turns they are kept counters (``rank_namespaces``,
``rank_terms``, as SQLite's ``ranking`` keeps them) and ``f_i`` counts at most ``search.TF_CAP``; for
memories (thousands in a namespace, not millions) they are counted at query time over the
namespace's indexed memories (the ``namespace`` index, and the GIN index for ``n_i``), as SQLite's
``ranking.memory_bm25`` counts them. Scores therefore match SQLite's to within tokenizer
differences, and so do rankings and any code that mixes scores with other signals.

Each term is a phrase, as a quoted FTS5 string is, and always a bound parameter
through ``phraseto_tsquery``: user text never reaches tsquery syntax.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...search import BM25_B, BM25_K1, NAME_WEIGHT, TF_CAP, terms_from_fts5

__all__ = ("FTS_CONFIG", "STAT_SHARDS", "WALK_FACTOR", "WALK_MIN", "WALK_SPAN", "bm25_search_sql", "content_query", "count_turns_sql", "index_memories_sql",
           "newest_memory_matches_sql", "newest_turn_matches_sql", "rebuild_stats_sql", "term_dfs_sql", "terms_from_fts5", "top_matches_each_sql", "top_matches_sql",
           "turn_bm25_sql", "usable_terms", "walk_rule")

FTS_CONFIG = "tortoise_english"
STAT_SHARDS = 16
#: A one-lexeme term in ``n`` of a namespace's ``N`` turns is walked newest first when
#: ``n * n > WALK_FACTOR * per_term * N``, in its newest ``WALK_SPAN * per_term * N / n`` turns before
#: the index finds older ones (see ``newest_turn_matches_sql``). A walked row costs about a quarter
#: of a row the index finds (EXPLAIN ANALYZE on the 100,000-item benchmark store).
WALK_FACTOR = 0.25
WALK_SPAN = 4.0
#: Fewer matches than this are read from the index whatever their share: a few milliseconds at most.
WALK_MIN = 2000


def walk_rule() -> tuple[float, float, float]:
    """``(WALK_MIN, WALK_FACTOR, WALK_SPAN)`` as they are now: the statements that embed them are cached by it,
    so a statement built before the rule changed (a test, a benchmark's sweep) is never served after."""
    return (WALK_MIN, WALK_FACTOR, WALK_SPAN)


def own_newest(alias: str, table: str, *, columns: str) -> str:
    """A walk down the rows of namespace ``x.ns``, newest first, through the ``<table>_namespace_id``
    index, whatever the planner knows of the pages or of the namespace.

    Asked with ``namespace = x.ns``, the planner drops the namespace from the order (it is fixed) and
    may take the primary key backwards, passing every newer row of every other namespace: it did so
    when the newest pages were not yet marked all-visible by a vacuum (a live store's usual state),
    and a merge join with the primary key did so even when they were (``test_namespace_walks``: 12,105
    and 6,105 rows read to walk 50). Written as a range, the namespace stays in the order, which only
    that index gives without sorting the namespace's rows. Nothing is read when the term is not
    walked (``x.span`` NULL). The caller appends its own ``LIMIT`` or ``OFFSET``; ``columns`` are of
    ``alias``.
    """
    return (f"SELECT {columns} FROM {table} {alias} WHERE x.span IS NOT NULL"
            f" AND {alias}.namespace >= x.ns AND {alias}.namespace <= x.ns"
            f" ORDER BY {alias}.namespace DESC, {alias}.id DESC")


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
    ``order_tail`` name its result columns. ``N``, the average length and each ``n_i`` are
    counted at query time over the namespace's rows of ``table`` (its index on ``namespace`` and
    the GIN index): ``where`` must keep to that namespace. Parameters, in order: the terms
    (``text[]``), the namespace, then ``where``'s own, then the limit.
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
            SELECT s.ns, GREATEST(COUNT(x.*), 1)::float8 AS n,
                   GREATEST(COALESCE(SUM(x.fts_len), 0), 1)::float8 / GREATEST(COUNT(x.*), 1)::float8 AS avgdl
            FROM (SELECT %s::text AS ns) AS s
            LEFT JOIN {table} x ON x.namespace = s.ns AND x.fts_len IS NOT NULL
            GROUP BY s.ns
        ),
        idf AS MATERIALIZED (
            SELECT terms.ord, terms.query, terms.lexemes,
                   GREATEST(ln((stats.n - h.hits + 0.5) / (h.hits + 0.5)), 1e-6) AS idf
            FROM terms CROSS JOIN stats
            CROSS JOIN LATERAL (
                SELECT COUNT(*)::float8 AS hits FROM {table} x WHERE x.namespace = stats.ns AND x.fts @@ terms.query
            ) AS h
        ),
        matched AS (
            SELECT {select}, {alias}.fts AS _fts, COALESCE({alias}.fts_len, 0) AS _len
            FROM {from_}
            WHERE {alias}.fts @@ (SELECT tortoise_tsquery_or(query) FROM terms) AND {where}
        )
        SELECT {output}, COALESCE((
            SELECT SUM(f.idf * (f.f * {BM25_K1 + 1.0!r})
                       / (f.f + {BM25_K1!r} * (1.0 - {BM25_B!r} + {BM25_B!r} * matched._len / stats.avgdl)))
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


def content_query(query: str) -> str:
    """SQL for the tsquery ``query`` (SQL of a ``phraseto_tsquery``) with each lexeme matched in the content
    only (weight A, as ``setweight(..., 'A')`` labels a turn's content): ``'red' <-> 'boat'`` becomes
    ``'red':A <-> 'boat':A``, which matches exactly the vectors whose ``ts_filter(fts, '{a}')`` matches
    ``query``. The filter copied each matched turn's vector (7 us a row, most of a candidate read of a
    word in a few hundred turns); the weighted query is tested in place, and the GIN index takes it."""
    return f"regexp_replace(({query})::text, $q$'(?:[^']|'')*'$q$, '\\&:A', 'g')::tsquery"


def newest_memory_matches_sql(*, walk: bool = False) -> str:
    """Ids of the newest ``per_term`` memories matching each term (the bounded walk of ``candidate_memories``).

    Memories keep no per-word counts, so the GIN index reads and sorts every match of a term to
    keep its newest. With ``walk`` (the caller's terms are common among the memories: the
    names of the entities a hop follows), a one-lexeme term that is common among the namespace's
    turns by ``newest_turn_matches_sql``'s rule (its share there standing for its share here) is
    first looked for in the namespace's newest ``WALK_SPAN * per_term * N / n`` memories, walked
    newest first through the ``memories_namespace_id`` index (``own_newest``: other namespaces'
    newer memories are never passed), stopping at ``per_term`` matches
    (``ts_match_vq``, the function of ``@@``, keeps the planner off the GIN index there). Only when
    those hold fewer than ``per_term`` of its matches does the index find the older ones. Both ways
    return the same rows. Without ``walk`` the statement is the index's way alone (cheaper to plan).
    Parameters, in order: the terms (``text[]``), the namespace, the statuses (``text[]``), the
    per-term limit. Returns ``(ord, id)`` rows; ``ord`` is the term's 1-based position. (``OFFSET 0``
    keeps the terms a subquery, so each tsquery is parsed once, not once per row tested.)
    """
    if not walk:
        return f"""
        SELECT x.ord, hit.id FROM (
            SELECT t.ord, phraseto_tsquery('{FTS_CONFIG}'::regconfig, t.term) AS query
            FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
            OFFSET 0
        ) AS x
        CROSS JOIN LATERAL (
            SELECT m.id FROM memories m
            WHERE numnode(x.query) > 0 AND m.fts @@ x.query AND m.namespace = %s AND m.status = ANY(%s)
            ORDER BY m.id DESC LIMIT %s
        ) AS hit
    """
    return _newest_matches_sql(table="memories", count="n_turns", query="q.query", statuses=True, found=f"""
                SELECT w.id FROM ({own_newest("n", "memories", columns="n.namespace, n.id, n.fts, n.status")} LIMIT x.span
                ) AS w
                WHERE ts_match_vq(w.fts, x.query) AND w.status = ANY(x.statuses)
                ORDER BY w.namespace DESC, w.id DESC LIMIT x.per_term""")


def newest_turn_matches_sql(*, content_only: bool = True) -> str:
    """The newest ``per_term`` turns matching each term, over the namespace's turns' content, choosing per term how to find its newest matches.

    A GIN index cannot give a word's matches newest first: for a word in a large share of the turns,
    the bitmap scan reads every match to keep the newest ``per_term``. A one-lexeme term in ``n`` of
    the namespace's ``N`` turns' content (``rank_terms``), with ``n * n > WALK_FACTOR * per_term * N``
    and ``n >= WALK_MIN``,
    is instead looked for in the namespace's newest ``WALK_SPAN * per_term * N / n`` turns, walked
    newest first (about ``per_term * N / n`` would do if the word were spread evenly); only when
    that window holds fewer than ``per_term`` of its matches does the index find the older ones.
    The walk reads the namespace's newest turns through ``turns_namespace_id`` (``own_newest``): taking
    the primary key backwards, the planner passed every newer turn of every other namespace (1.3 s a
    block for a namespace quiet while nine others of its size were written); there ``ts_match_vq`` (the function of
    ``@@``) tests each row, as the planner cannot take it to the index. The index's way sits behind ``OFFSET 0``: the
    planner cannot see how rare a word is, and with the ``LIMIT`` above it would walk the newest turns
    testing each one, a scan of most of the store for a rare word. Both ways return the same rows, those
    the index alone would find. Parameters, in order: the terms (``text[]``), the namespace, the per-term limit.
    With ``content_only`` a term matches the turn's content alone (``content_query``); without, a
    match anywhere in the turn's vector counts (content or speaker name), and ``n`` is the word's
    turns of either (``rank_terms.n_turns``).
    """
    return _newest_matches_sql(
        table="turns", count="n_content" if content_only else "n_turns",
        query=content_query("q.query") if content_only else "q.query", statuses=False, found=f"""
                SELECT w.id FROM ({own_newest("n", "turns", columns="n.namespace, n.id, n.fts")} LIMIT x.span
                ) AS w
                WHERE ts_match_vq(w.fts, x.query)
                ORDER BY w.namespace DESC, w.id DESC LIMIT x.per_term""")


def _newest_matches_sql(*, table: str, count: str, query: str, statuses: bool, found: str) -> str:
    """The newest ``per_term`` rows of ``table`` matching each term: a term with a ``span`` (by the turns'
    counts, ``rank_terms.<count>``) is first looked for in the namespace's newest ``span`` rows
    (``found``, walked newest first), and the GIN index finds the older ones only when those hold
    fewer than ``per_term``; a term without one is read through the index alone. ``query`` is the SQL
    of the tsquery a row must match, from ``q.query`` (the term's ``phraseto_tsquery``). Parameters,
    in order: the terms (``text[]``), the namespace, the statuses (``text[]``, with ``statuses``),
    the per-term limit."""
    params = "%s::text AS ns, " + ("%s::text[] AS statuses, " if statuses else "") + "%s::bigint AS per_term"
    status = " AND t.status = ANY(x.statuses)" if statuses else ""
    return f"""
        SELECT x.ord, hit.id FROM (
            SELECT t.ord, {query} AS query, p.*,
                   CASE WHEN numnode(q.query) = 1 AND d.n >= {WALK_MIN!r}
                             AND d.n * d.n > {WALK_FACTOR!r} * p.per_term * s.n_turns
                        THEN ceil({WALK_SPAN!r} * p.per_term * s.n_turns / d.n)::bigint END AS span
            FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
            CROSS JOIN (SELECT {params}) AS p
            CROSS JOIN LATERAL (SELECT COALESCE((SELECT n_turns FROM rank_namespaces WHERE namespace = p.ns), 0)::float8
                                AS n_turns) AS s
            CROSS JOIN LATERAL (SELECT phraseto_tsquery('{FTS_CONFIG}'::regconfig, t.term) AS query) AS q
            CROSS JOIN LATERAL (
                SELECT COALESCE(MIN(COALESCE(r.{count}, 0)), 0)::float8 AS n
                FROM unnest(tsvector_to_array(to_tsvector('{FTS_CONFIG}'::regconfig, t.term))) AS l(lexeme)
                LEFT JOIN rank_terms r ON r.namespace = p.ns AND r.term = l.lexeme
            ) AS d
            WHERE numnode(q.query) > 0
            OFFSET 0
        ) AS x
        CROSS JOIN LATERAL (
            WITH found AS MATERIALIZED ({found}
            ),
            low AS MATERIALIZED (  -- the oldest row the walk reads: none when the namespace holds fewer
                SELECT l.id FROM ({own_newest("t", table, columns="t.id")} OFFSET x.span - 1 LIMIT 1) AS l
            )
            SELECT u.id FROM (
                SELECT found.id FROM found
                UNION ALL
                (SELECT i.id FROM (
                    SELECT t.id FROM {table} t
                    WHERE (x.span IS NULL OR ((SELECT COUNT(*) FROM found) < x.per_term AND EXISTS (SELECT 1 FROM low)))
                      AND t.namespace = x.ns AND t.fts @@ x.query{status}
                      AND (x.span IS NULL OR t.id < (SELECT low.id FROM low))
                    OFFSET 0
                 ) AS i
                 ORDER BY i.id DESC LIMIT x.per_term)
            ) AS u
            ORDER BY u.id DESC LIMIT x.per_term
        ) AS hit
    """


def top_matches_sql(matches: str, *, alias: str, select: str, from_: str, where: str) -> str:
    """The ``%s`` best rows of ``matches`` (a ``newest_*_matches_sql``), scored and fetched in one statement.

    A row's score is the sum of its terms' weights, added in term order (as a Python loop over the
    matches adds them, so scores and ties are the same to the bit); the best come first, the newest
    first among equals. ``select`` is evaluated over ``from_`` joined on ``id``; the result is
    ``(score, *select)`` in no particular order; ``alias`` names the table of ``from_`` whose ``id`` the
    matches are. Parameters, in order: ``matches``' own, the terms'
    weights (``float8[]``, in term order), the limit, then ``where``'s own.
    """
    return f"""
        WITH hits AS ({matches}),
        scored AS (
            SELECT hits.id, SUM(w.weight ORDER BY hits.ord) AS score
            FROM hits JOIN unnest(%s::float8[]) WITH ORDINALITY AS w(weight, ord) ON w.ord = hits.ord
            GROUP BY hits.id
            ORDER BY score DESC, hits.id DESC
            LIMIT %s
        )
        SELECT scored.score, {select} FROM scored JOIN {from_} ON {alias}.id = scored.id WHERE {where}
    """


def top_matches_each_sql(matches: str, *, alias: str, select: str, from_: str, where: str) -> str:
    """``top_matches_sql`` for several weightings of the terms at once, each term's matches found once.

    The weightings come as four parallel arrays, one element a (weighting, term) pair: the
    weighting's number, the term's 1-based position in ``matches``' terms, its position in the
    weighting (the order its weights are added in, as ``top_matches_sql`` adds them) and its
    weight. The result is ``(weighting, score, *select)``: each weighting's ``%s`` best rows, a row
    once for each weighting that keeps it. Parameters, in order: ``matches``' own, the four
    arrays (``int[]``, ``int[]``, ``int[]``, ``float8[]``), the limit, then ``where``'s own.
    """
    return f"""
        WITH hits AS MATERIALIZED ({matches}),  -- each term walked once, whatever weightings hold it
        scored AS (
            SELECT ranked.weighting, ranked.id, ranked.score FROM (
                SELECT w.weighting, hits.id, SUM(w.weight ORDER BY w.pos) AS score,
                       row_number() OVER (PARTITION BY w.weighting
                                          ORDER BY SUM(w.weight ORDER BY w.pos) DESC, hits.id DESC) AS place
                FROM hits JOIN unnest(%s::int[], %s::int[], %s::int[], %s::float8[]) AS w(weighting, ord, pos, weight)
                  ON w.ord = hits.ord
                GROUP BY w.weighting, hits.id
            ) AS ranked
            WHERE ranked.place <= %s
        )
        SELECT scored.weighting, scored.score, {select} FROM scored JOIN {from_} ON {alias}.id = scored.id WHERE {where}
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
                       SELECT string_agg(n, ' ') FROM (
                           SELECT e.name AS n FROM memory_entities me JOIN entities e
                           ON e.entity_id = me.entity_id WHERE me.memory_id = m.memory_id
                           UNION ALL SELECT a.alias FROM memory_entities me JOIN entity_aliases a
                           ON a.entity_id = me.entity_id WHERE me.memory_id = m.memory_id
                           AND a.how NOT IN ('not', 'role')) AS names), '')) AS e
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


def count_turns_sql() -> tuple[str, str]:
    """Statements that add (``sign`` 1) or take away (-1) turns in the namespace's ranking statistics.

    Parameters of both: ``ns``, ``ids`` (turn ids, ``text[]``), ``sign``. Terms are upserted in
    lexeme order, so concurrent captures of a namespace wait for each other instead of deadlocking.
    """
    totals = """
        INSERT INTO rank_namespaces (namespace, n_turns, n_tokens)
        SELECT %(ns)s, %(sign)s * COUNT(*), %(sign)s * COALESCE(SUM(t.fts_len), 0)
        FROM turns t WHERE t.namespace = %(ns)s AND t.turn_id = ANY(%(ids)s) HAVING COUNT(*) > 0
        ON CONFLICT (namespace) DO UPDATE SET n_turns = rank_namespaces.n_turns + excluded.n_turns,
            n_tokens = rank_namespaces.n_tokens + excluded.n_tokens
    """
    terms = """
        INSERT INTO rank_terms (namespace, term, n_turns, n_content, n_name)
        SELECT %(ns)s, u.lexeme, %(sign)s * COUNT(*), %(sign)s * COUNT(*) FILTER (WHERE 'A' = ANY(u.weights)),
               %(sign)s * COUNT(*) FILTER (WHERE 'B' = ANY(u.weights))
        FROM turns t CROSS JOIN LATERAL unnest(t.fts) AS u
        WHERE t.namespace = %(ns)s AND t.turn_id = ANY(%(ids)s)
        GROUP BY u.lexeme ORDER BY u.lexeme
        ON CONFLICT (namespace, term) DO UPDATE SET n_turns = rank_terms.n_turns + excluded.n_turns,
            n_content = rank_terms.n_content + excluded.n_content, n_name = rank_terms.n_name + excluded.n_name
    """
    return totals, terms


def turn_bm25_sql(*, select: str, from_: str, output: str, order_tail: str, session: bool,
                  among: bool = False) -> str:
    """BM25 over turns with the namespace's statistics (``rank_namespaces``, ``rank_terms``).

    ``select`` is evaluated over ``from_`` (where ``t`` is ``turns``). Named parameters:
    ``terms`` (``text[]``), ``ns``, ``k``, ``sid`` when ``session``, and ``ids`` (turn ids,
    ``bigint[]``) when ``among``: only those turns are scored. A term's frequency in a turn counts
    at most ``search.TF_CAP``, as on SQLite.
    """
    f = f"LEAST(f.f, {TF_CAP!r})"
    where = ("t.namespace = %(ns)s" + (" AND t.session_id = %(sid)s" if session else "")
             + (" AND t.id = ANY(%(ids)s::bigint[])" if among else ""))
    return f"""
        WITH terms AS (
            SELECT t.ord, q.query, tsvector_to_array(to_tsvector('{FTS_CONFIG}'::regconfig, t.term)) AS lexemes
            FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(term, ord)
            CROSS JOIN LATERAL (SELECT phraseto_tsquery('{FTS_CONFIG}'::regconfig, t.term) AS query) AS q
            WHERE numnode(q.query) > 0
        ),
        stats AS (
            SELECT GREATEST(n_turns, 1)::float8 AS n,
                   GREATEST(n_tokens, 1)::float8 / GREATEST(n_turns, 1)::float8 AS avgdl
            FROM rank_namespaces WHERE namespace = %(ns)s
        ),
        idf AS MATERIALIZED (
            SELECT terms.ord, terms.query, terms.lexemes,
                   GREATEST(ln((stats.n - h.hits + 0.5) / (h.hits + 0.5)), 1e-6) AS idf
            FROM terms CROSS JOIN stats
            CROSS JOIN LATERAL (
                SELECT COALESCE(MIN(COALESCE(r.n_turns, 0)), 0)::float8 AS hits
                FROM unnest(terms.lexemes) AS l(lexeme)
                LEFT JOIN rank_terms r ON r.namespace = %(ns)s AND r.term = l.lexeme
            ) AS h
        ),
        matched AS (
            SELECT {select}, t.fts AS _fts, COALESCE(t.fts_len, 0) AS _len
            FROM {from_}
            WHERE t.fts @@ (SELECT tortoise_tsquery_or(query) FROM terms) AND {where}
        )
        SELECT {output}, COALESCE((
            SELECT SUM(f.idf * ({f} * {BM25_K1 + 1.0!r})
                       / ({f} + {BM25_K1!r} * (1.0 - {BM25_B!r} + {BM25_B!r} * matched._len / stats.avgdl)))
            FROM (
                SELECT idf.ord, MAX(idf.idf) AS idf,
                       SUM(CASE w WHEN 'A' THEN 1.0 WHEN 'B' THEN {NAME_WEIGHT!r} ELSE 0.0 END)::float8 AS f
                FROM unnest(matched._fts) AS u
                JOIN idf ON u.lexeme = ANY(idf.lexemes)
                CROSS JOIN LATERAL unnest(u.weights) AS w
                GROUP BY idf.ord
            ) AS f
        ), 0.0) AS score
        FROM matched CROSS JOIN stats
        ORDER BY score DESC, {order_tail}
        LIMIT %(k)s
    """


def term_dfs_sql() -> str:
    """``(term, turns of the namespace holding it)`` for each term (a phrase counts as its rarest lexeme).

    Named parameters: ``terms`` (``text[]``), ``ns``. Terms without a lexeme are absent.
    """
    return f"""
        SELECT x.term, MIN(COALESCE(r.n_turns, 0))
        FROM unnest(%(terms)s::text[]) AS x(term)
        CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('{FTS_CONFIG}'::regconfig, x.term))) AS l(lexeme)
        LEFT JOIN rank_terms r ON r.namespace = %(ns)s AND r.term = l.lexeme
        GROUP BY x.term
    """


def rebuild_stats_sql() -> tuple[str, ...]:
    """Statements that recompute every total and statistic from the tables (after a bulk copy)."""
    from .migrations import REBUILD_TURN_RANKING

    return (
        *REBUILD_TURN_RANKING,
        "DELETE FROM fts_stats",
        "INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)"
        " SELECT 'memories', 0, COUNT(*), COALESCE(SUM(fts_len), 0) FROM memories WHERE fts_len IS NOT NULL",
    )
