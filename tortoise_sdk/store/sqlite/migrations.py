"""Versioned schema migrations for the SQLite store.

Each migration is applied once, inside one transaction, and recorded in
``schema_migrations``; opening an older database applies only what it lacks.
Later features add migrations at the end of ``SQLITE_MIGRATIONS``; a shipped
migration is never edited.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...errors import MigrationError, SchemaTooNew
from ...search import INDEX_CHARS, NAME_INDEX_CHARS
from ..rows import subagent_id_for, tombstone_id_for
from ..schema import M016_NOTE_PROVENANCE, M017_ENTITY_PROVENANCE, Migration

__all__ = ("APPLICATION_ID", "SQLITE_MIGRATIONS", "applied_versions", "migrate_sqlite")

#: ``PRAGMA application_id`` of a tortoise memory (b"Tort"): set in every migration's transaction, and on
#: the first writable open of a memory written before the mark, so no other file is taken for one.
APPLICATION_ID = 0x546F7274


M001_FOUNDATION = Migration(
    1,
    "foundation: sessions, turns, turn FTS, capture receipts",
    (
        """CREATE TABLE sessions (
            namespace    TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            session_date TEXT,
            created_at   TEXT NOT NULL,
            updated_at   TEXT NOT NULL,
            PRIMARY KEY (namespace, session_id)
        )""",
        """CREATE TABLE turns (
            rowid        INTEGER PRIMARY KEY,
            turn_id      TEXT NOT NULL UNIQUE,
            namespace    TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            idx          INTEGER NOT NULL,
            role         TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            name         TEXT,
            content      TEXT NOT NULL,
            external_id  TEXT,
            timestamp    TEXT,
            metadata     TEXT,
            content_hash TEXT NOT NULL,
            receipt_id   TEXT,
            created_at   TEXT NOT NULL,
            UNIQUE (namespace, session_id, idx),
            FOREIGN KEY (namespace, session_id) REFERENCES sessions (namespace, session_id)
        )""",
        """CREATE UNIQUE INDEX turns_external_id ON turns (namespace, session_id, external_id)
            WHERE external_id IS NOT NULL""",
        """CREATE VIRTUAL TABLE turns_fts USING fts5 (
            content, name, content='turns', content_rowid='rowid',
            tokenize='porter unicode61 remove_diacritics 2'
        )""",
        # New turns are indexed by the store in the inserting transaction with one
        # INSERT ... SELECT (3x faster than a per-row AFTER INSERT trigger on imports);
        # deletes and edits, which are rare, are kept in sync by triggers.
        """CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid, old.content, old.name);
        END""",
        """CREATE TRIGGER turns_au AFTER UPDATE OF content, name ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid, old.content, old.name);
            INSERT INTO turns_fts (rowid, content, name) VALUES (new.rowid, new.content, new.name);
        END""",
        """CREATE TABLE receipts (
            receipt_id      TEXT PRIMARY KEY,
            namespace       TEXT NOT NULL,
            session_id      TEXT NOT NULL,
            idempotency_key TEXT,
            request_hash    TEXT,
            body            TEXT NOT NULL,
            created_at      TEXT NOT NULL
        )""",
        """CREATE UNIQUE INDEX receipts_idempotency ON receipts (namespace, idempotency_key)
            WHERE idempotency_key IS NOT NULL""",
        "CREATE INDEX receipts_session ON receipts (namespace, session_id, created_at)",
    ),
)

M002_EXTRACTION = Migration(
    2,
    "extraction: entities, memories, memory FTS, edges, provenance, extraction runs, jobs",
    (
        """CREATE TABLE entities (
            entity_id  TEXT PRIMARY KEY,
            namespace  TEXT NOT NULL,
            name       TEXT NOT NULL,
            norm_name  TEXT NOT NULL,
            kind       TEXT NOT NULL,
            note       TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (namespace, norm_name, kind)
        )""",
        "CREATE INDEX entities_name ON entities (namespace, norm_name)",
        """CREATE TABLE memories (
            rowid         INTEGER PRIMARY KEY,
            memory_id     TEXT NOT NULL UNIQUE,
            namespace     TEXT NOT NULL,
            session_id    TEXT NOT NULL,
            kind          TEXT NOT NULL CHECK (kind IN ('event', 'point')),
            content       TEXT NOT NULL,
            norm_content  TEXT NOT NULL,
            status        TEXT NOT NULL CHECK (status IN ('live', 'superseded', 'deleted')),
            when_text     TEXT,
            search_keys   TEXT NOT NULL,
            valid_at      TEXT,
            invalid_at    TEXT,
            superseded_by TEXT,
            supersedes    TEXT,
            extraction_id TEXT,
            created_at    TEXT NOT NULL
        )""",
        "CREATE INDEX memories_session ON memories (namespace, session_id)",
        "CREATE INDEX memories_norm ON memories (namespace, norm_content)",
        """CREATE VIRTUAL TABLE memories_fts USING fts5 (
            content, search_keys, entities,
            tokenize='porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TABLE memory_entities (
            namespace TEXT NOT NULL,
            memory_id TEXT NOT NULL REFERENCES memories (memory_id),
            entity_id TEXT NOT NULL REFERENCES entities (entity_id),
            relation  TEXT NOT NULL CHECK (relation IN ('about', 'mentions')),
            PRIMARY KEY (memory_id, entity_id)
        )""",
        "CREATE INDEX memory_entities_entity ON memory_entities (entity_id)",
        """CREATE TABLE provenance (
            namespace TEXT NOT NULL,
            memory_id TEXT NOT NULL REFERENCES memories (memory_id),
            turn_id   TEXT NOT NULL REFERENCES turns (turn_id),
            quote     TEXT,
            extraction_id TEXT,
            PRIMARY KEY (memory_id, turn_id)
        )""",
        "CREATE INDEX provenance_turn ON provenance (turn_id)",
        """CREATE TABLE extractions (
            extraction_id TEXT PRIMARY KEY,
            namespace     TEXT NOT NULL,
            session_id    TEXT NOT NULL,
            receipt_id    TEXT,
            job_id        TEXT,
            status        TEXT NOT NULL,
            report        TEXT NOT NULL,
            created_at    TEXT NOT NULL
        )""",
        "CREATE INDEX extractions_session ON extractions (namespace, session_id, created_at)",
        """CREATE TABLE jobs (
            job_id      TEXT PRIMARY KEY,
            namespace   TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            receipt_id  TEXT,
            status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
            attempts    INTEGER NOT NULL DEFAULT 0,
            revision    INTEGER NOT NULL DEFAULT 0,
            lease_until TEXT,
            errors      TEXT NOT NULL DEFAULT '[]',
            created_at  TEXT NOT NULL,
            updated_at  TEXT NOT NULL
        )""",
        "CREATE INDEX jobs_ready ON jobs (status, lease_until)",
    ),
)

# No metric column has a default: an unreported metric is NULL, never 0 (an async launch
# reports no usage; a DEFAULT 0 would skew every per-subagent average). The CHECKs hold the
# recorder's normalization: 0 tokens or 0 ms mean "not reported" and are stored as NULL.
M003_SUBAGENTS = Migration(
    3,
    "subagents: subagent_contexts, subagent_counters",
    (
        """CREATE TABLE subagent_contexts (
            id                  INTEGER PRIMARY KEY,
            namespace           TEXT NOT NULL,
            session_id          TEXT NOT NULL,
            turn_id             TEXT,
            agent_execution_id  TEXT NOT NULL DEFAULT 'unknown',
            tool_call_id        TEXT NOT NULL,
            parent_tool_call_id TEXT,
            subagent_type       TEXT,
            description         TEXT,
            agent_id            TEXT,
            child_session_id    TEXT,
            model               TEXT,
            agent_status        TEXT,
            tool_status         TEXT,
            is_async            INTEGER NOT NULL DEFAULT 0 CHECK (is_async IN (0, 1)),
            total_tokens        INTEGER CHECK (total_tokens IS NULL OR total_tokens > 0),
            tool_use_count      INTEGER CHECK (tool_use_count IS NULL OR tool_use_count >= 0),
            duration_ms         INTEGER CHECK (duration_ms IS NULL OR duration_ms > 0),
            source              TEXT NOT NULL CHECK (source IN ('live', 'backfill')),
            observed_at         TEXT NOT NULL,
            settled_at          TEXT,
            updated_at          TEXT NOT NULL,
            UNIQUE (namespace, session_id, agent_execution_id, tool_call_id)
        )""",
        """CREATE INDEX subagent_contexts_read
            ON subagent_contexts (namespace, session_id, observed_at, tool_call_id, agent_execution_id)""",
        "CREATE INDEX subagent_contexts_turn ON subagent_contexts (namespace, turn_id) WHERE turn_id IS NOT NULL",
        """CREATE TABLE subagent_counters (
            namespace TEXT NOT NULL,
            name      TEXT NOT NULL,
            value     INTEGER NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
    ),
)

# The frame's raw turn reference, kept so that a turn captured after its frame fills
# ``turn_id`` forward (the capture transaction resolves the pending rows). Rows written
# before this migration keep a NULL ``turn_ref``.
M004_SUBAGENT_TURN_REF = Migration(
    4,
    "subagents: turn_ref",
    (
        "ALTER TABLE subagent_contexts ADD COLUMN turn_ref TEXT",
        """CREATE INDEX subagent_contexts_pending ON subagent_contexts (namespace, session_id)
            WHERE turn_id IS NULL AND turn_ref IS NOT NULL""",
    ),
)

M005_CURSORS = Migration(
    5,
    "cursors: named host state (transcript read offsets, session views)",
    (
        """CREATE TABLE cursors (
            namespace  TEXT NOT NULL,
            name       TEXT NOT NULL,
            value      TEXT NOT NULL,
            revision   INTEGER NOT NULL CHECK (revision > 0),
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
    ),
)

# Ranking statistics per namespace, and a bounded index. Derived data, kept exact by the capture
# transaction (``ranking.SQLiteRankingMixin.index_turns``); a delete of turns must call
# ``unindex_turns`` first, in the same transaction, or the namespace's statistics drift:
#   rank_namespaces  one row per namespace that has turns: its id, turn count, indexed tokens
#   rank_turns       one row per turn (rowid = turns.rowid): its namespace id and indexed tokens
#   rank_terms       per namespace and index term: turns holding it anywhere / in content / in the name
# The full-text index now holds the first INDEX_CHARS characters of each turn (and NAME_INDEX_CHARS
# of its speaker name): long turns are re-indexed so, and the triggers index the same bounded text.
# Never run FTS5 'rebuild' on turns_fts: it would index whole turns again.
M006_RANKING = Migration(
    6,
    "ranking: per-namespace statistics, bounded turn index",
    (
        """CREATE TABLE rank_namespaces (
            ns_id     INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL UNIQUE,
            n_turns   INTEGER NOT NULL DEFAULT 0,
            n_tokens  INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE rank_turns (
            rowid    INTEGER PRIMARY KEY,
            ns_id    INTEGER NOT NULL,
            n_tokens INTEGER NOT NULL
        )""",
        """CREATE TABLE rank_terms (
            ns_id     INTEGER NOT NULL,
            term      TEXT NOT NULL,
            n_turns   INTEGER NOT NULL,
            n_content INTEGER NOT NULL,
            n_name    INTEGER NOT NULL,
            PRIMARY KEY (ns_id, term)
        ) WITHOUT ROWID""",
        f"""INSERT INTO turns_fts (turns_fts, rowid, content, name)
            SELECT 'delete', rowid, content, name FROM turns
            WHERE length(content) > {INDEX_CHARS} OR length(name) > {NAME_INDEX_CHARS}""",
        f"""INSERT INTO turns_fts (rowid, content, name)
            SELECT rowid, substr(content, 1, {INDEX_CHARS}), substr(name, 1, {NAME_INDEX_CHARS}) FROM turns
            WHERE length(content) > {INDEX_CHARS} OR length(name) > {NAME_INDEX_CHARS}""",
        "DROP TRIGGER turns_ad",
        "DROP TRIGGER turns_au",
        f"""CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid,
                substr(old.content, 1, {INDEX_CHARS}), substr(old.name, 1, {NAME_INDEX_CHARS}));
        END""",
        f"""CREATE TRIGGER turns_au AFTER UPDATE OF content, name ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid,
                substr(old.content, 1, {INDEX_CHARS}), substr(old.name, 1, {NAME_INDEX_CHARS}));
            INSERT INTO turns_fts (rowid, content, name) VALUES (new.rowid,
                substr(new.content, 1, {INDEX_CHARS}), substr(new.name, 1, {NAME_INDEX_CHARS}));
        END""",
        "INSERT INTO rank_namespaces (namespace) SELECT DISTINCT namespace FROM turns ORDER BY namespace",
        "CREATE VIRTUAL TABLE temp.m6_instance USING fts5vocab(main, turns_fts, 'instance')",
        """INSERT INTO rank_turns (rowid, ns_id, n_tokens)
            SELECT t.rowid, n.ns_id, COALESCE(g.n, 0) FROM turns t
            JOIN rank_namespaces n ON n.namespace = t.namespace
            LEFT JOIN (SELECT doc, COUNT(*) AS n FROM temp.m6_instance GROUP BY doc) g ON g.doc = t.rowid""",
        """INSERT INTO rank_terms (ns_id, term, n_turns, n_content, n_name)
            SELECT i.ns_id, v.term, COUNT(DISTINCT v.doc),
                   COUNT(DISTINCT CASE WHEN v.col = 'content' THEN v.doc END),
                   COUNT(DISTINCT CASE WHEN v.col = 'name' THEN v.doc END)
            FROM temp.m6_instance v JOIN rank_turns i ON i.rowid = v.doc GROUP BY i.ns_id, v.term""",
        """UPDATE rank_namespaces SET
            n_turns = (SELECT COUNT(*) FROM rank_turns i WHERE i.ns_id = rank_namespaces.ns_id),
            n_tokens = (SELECT COALESCE(SUM(n_tokens), 0) FROM rank_turns i WHERE i.ns_id = rank_namespaces.ns_id)""",
        "DROP TABLE temp.m6_instance",
    ),
)

# Extraction in a running loop. A session's watermark is the last turn a committed extraction
# covered (written by the S5 transaction, so a crash can neither skip nor double a window); a
# session extracted before this migration gets the last turn stored before its latest extraction,
# with no prompt hash (unknown: a prompt change does not force its re-extraction). Jobs coalesce:
# at most one pending job per session (older duplicates are folded into the oldest), due at
# ``due_at`` (NULL: now), counting the evidence turns captured while it waits.
M007_LOOP = Migration(
    7,
    "loop: extraction watermark per session, one pending job per session with a due time",
    (
        "ALTER TABLE jobs ADD COLUMN due_at TEXT",
        "ALTER TABLE jobs ADD COLUMN waiting_turns INTEGER NOT NULL DEFAULT 0",
        """UPDATE jobs SET status = 'done', lease_until = NULL,
            errors = json_insert(errors, '$[#]', 'coalesced into the oldest pending job of the session (migration 7)')
            WHERE status = 'pending' AND EXISTS (
                SELECT 1 FROM jobs older WHERE older.namespace = jobs.namespace AND older.session_id = jobs.session_id
                AND older.status = 'pending' AND (older.created_at, older.job_id) < (jobs.created_at, jobs.job_id))""",
        "CREATE UNIQUE INDEX jobs_one_pending ON jobs (namespace, session_id) WHERE status = 'pending'",
        """CREATE TABLE extraction_state (
            namespace     TEXT NOT NULL,
            session_id    TEXT NOT NULL,
            watermark     INTEGER NOT NULL,
            window_start  INTEGER NOT NULL,
            prompts_sha   TEXT,
            extraction_id TEXT,
            updated_at    TEXT NOT NULL,
            PRIMARY KEY (namespace, session_id)
        )""",
        """INSERT INTO extraction_state (namespace, session_id, watermark, window_start, prompts_sha, extraction_id,
                                         updated_at)
            SELECT e.namespace, e.session_id,
                   COALESCE((SELECT MAX(t.idx) FROM turns t WHERE t.namespace = e.namespace
                             AND t.session_id = e.session_id AND t.created_at <= e.created_at), -1),
                   0, NULL, e.extraction_id, e.created_at
            FROM extractions e
            WHERE e.rowid = (SELECT e2.rowid FROM extractions e2 WHERE e2.namespace = e.namespace
                             AND e2.session_id = e.session_id ORDER BY e2.created_at DESC, e2.rowid DESC LIMIT 1)""",
    ),
)

# What ``forget_session``/``forget_memory`` removed, when, by which call: counts only, and the
# subject's id as a hash (sha256 of namespace, kind and id), so no row holds the forgotten id.
M008_TOMBSTONES = Migration(
    8,
    "tombstones: an audit row per forgetting, without content",
    (
        """CREATE TABLE tombstones (
            id           INTEGER PRIMARY KEY,
            namespace    TEXT NOT NULL,
            subject      TEXT NOT NULL CHECK (subject IN ('session', 'memory')),
            subject_hash TEXT NOT NULL,
            call         TEXT NOT NULL,
            removed      TEXT NOT NULL,
            forgotten_at TEXT NOT NULL
        )""",
        "CREATE INDEX tombstones_subject ON tombstones (namespace, subject_hash)",
    ),
)

# Embeddings (``Memory(embedder=...)``): one vector per turn and per memory, float32 little-endian, with
# the model that made it; a row of another model is stale and embedded again. A vector goes with its
# row (forgetting, any delete) and with a change of the row's text, by trigger.
M009_VECTORS = Migration(
    9,
    "vectors: one embedding per turn and memory, with its model and dimension",
    (
        """CREATE TABLE vectors (
            namespace  TEXT NOT NULL,
            kind       TEXT NOT NULL CHECK (kind IN ('turn', 'memory')),
            item_id    TEXT NOT NULL,
            model      TEXT NOT NULL,
            dim        INTEGER NOT NULL,
            vector     BLOB NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, kind, item_id)
        )""",
        "CREATE INDEX vectors_model ON vectors (namespace, model, created_at)",  # vector_version reads only it
        """CREATE TRIGGER vectors_turn_ad AFTER DELETE ON turns BEGIN
            DELETE FROM vectors WHERE namespace = old.namespace AND kind = 'turn' AND item_id = old.turn_id;
        END""",
        """CREATE TRIGGER vectors_turn_au AFTER UPDATE OF content ON turns BEGIN
            DELETE FROM vectors WHERE namespace = old.namespace AND kind = 'turn' AND item_id = old.turn_id;
        END""",
        """CREATE TRIGGER vectors_memory_ad AFTER DELETE ON memories BEGIN
            DELETE FROM vectors WHERE namespace = old.namespace AND kind = 'memory' AND item_id = old.memory_id;
        END""",
        """CREATE TRIGGER vectors_memory_au AFTER UPDATE OF content ON memories BEGIN
            DELETE FROM vectors WHERE namespace = old.namespace AND kind = 'memory' AND item_id = old.memory_id;
        END""",
    ),
)

# The host's own category of a memory (``Memory(categories=[...])``), NULL when none was given or fitted.
M010_CATEGORIES = Migration(
    10,
    "categories: the host's category of each memory",
    (
        "ALTER TABLE memories ADD COLUMN category TEXT",
        "CREATE INDEX memories_category ON memories (namespace, category) WHERE category IS NOT NULL",
    ),
)

#: The sub-agent columns migration 11 copies as they are (all but ``id`` and the new ``public_id``).
_SUBAGENT_COLUMNS = ("namespace, session_id, turn_id, agent_execution_id, tool_call_id, parent_tool_call_id,"
                     " subagent_type, description, agent_id, child_session_id, model, agent_status, tool_status,"
                     " is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, settled_at,"
                     " updated_at, turn_ref")


# Ids that tell nothing of other namespaces. The integer ``id`` of a sub-agent row or a tombstone was
# a counter shared by every namespace, and the gap between two of a tenant's ids told how many such
# rows other tenants wrote meanwhile. It stays, internal (it orders rows by insertion); what callers
# see is ``public_id``: a hash of the row's namespace and key (``rows.subagent_id_for``), and for a
# tombstone of its namespace, subject hash and how many tombstones that subject had before it
# (``rows.tombstone_id_for``). Rows already stored get theirs here, with the same formulas (SQL
# functions registered by ``migrate_sqlite``), so nothing else changes: no other table holds these
# ids. SQLite cannot add a NOT NULL column to a table, so both tables are rebuilt with their indexes.
M011_OPAQUE_IDS = Migration(
    11,
    "ids: sub-agent rows and tombstones get ids derived from their own namespace",
    (
        """CREATE TABLE subagent_contexts_m11 (
            id                  INTEGER PRIMARY KEY,
            public_id           TEXT NOT NULL UNIQUE,
            namespace           TEXT NOT NULL,
            session_id          TEXT NOT NULL,
            turn_id             TEXT,
            agent_execution_id  TEXT NOT NULL DEFAULT 'unknown',
            tool_call_id        TEXT NOT NULL,
            parent_tool_call_id TEXT,
            subagent_type       TEXT,
            description         TEXT,
            agent_id            TEXT,
            child_session_id    TEXT,
            model               TEXT,
            agent_status        TEXT,
            tool_status         TEXT,
            is_async            INTEGER NOT NULL DEFAULT 0 CHECK (is_async IN (0, 1)),
            total_tokens        INTEGER CHECK (total_tokens IS NULL OR total_tokens > 0),
            tool_use_count      INTEGER CHECK (tool_use_count IS NULL OR tool_use_count >= 0),
            duration_ms         INTEGER CHECK (duration_ms IS NULL OR duration_ms > 0),
            source              TEXT NOT NULL CHECK (source IN ('live', 'backfill')),
            observed_at         TEXT NOT NULL,
            settled_at          TEXT,
            updated_at          TEXT NOT NULL,
            turn_ref            TEXT,
            UNIQUE (namespace, session_id, agent_execution_id, tool_call_id)
        )""",
        f"""INSERT INTO subagent_contexts_m11 (id, public_id, {_SUBAGENT_COLUMNS})
            SELECT id, tortoise_subagent_id(namespace, session_id, agent_execution_id, tool_call_id),
                   {_SUBAGENT_COLUMNS}
            FROM subagent_contexts ORDER BY id""",
        "DROP TABLE subagent_contexts",
        "ALTER TABLE subagent_contexts_m11 RENAME TO subagent_contexts",
        """CREATE INDEX subagent_contexts_read
            ON subagent_contexts (namespace, session_id, observed_at, tool_call_id, agent_execution_id)""",
        "CREATE INDEX subagent_contexts_turn ON subagent_contexts (namespace, turn_id) WHERE turn_id IS NOT NULL",
        """CREATE INDEX subagent_contexts_pending ON subagent_contexts (namespace, session_id)
            WHERE turn_id IS NULL AND turn_ref IS NOT NULL""",
        """CREATE TABLE tombstones_m11 (
            id           INTEGER PRIMARY KEY,
            public_id    TEXT NOT NULL UNIQUE,
            namespace    TEXT NOT NULL,
            subject      TEXT NOT NULL CHECK (subject IN ('session', 'memory')),
            subject_hash TEXT NOT NULL,
            call         TEXT NOT NULL,
            removed      TEXT NOT NULL,
            forgotten_at TEXT NOT NULL
        )""",
        """INSERT INTO tombstones_m11 (id, public_id, namespace, subject, subject_hash, call, removed, forgotten_at)
            SELECT id, tortoise_tombstone_id(namespace, subject_hash,
                       row_number() OVER (PARTITION BY namespace, subject_hash ORDER BY id) - 1),
                   namespace, subject, subject_hash, call, removed, forgotten_at
            FROM tombstones ORDER BY id""",
        "DROP TABLE tombstones",
        "ALTER TABLE tombstones_m11 RENAME TO tombstones",
        "CREATE INDEX tombstones_subject ON tombstones (namespace, subject_hash)",
    ),
)

# Entity resolution: the other names an entity is known by (a first name, a nickname, a role such as
# "my wife", a name merged in), each with how and on what evidence it was resolved, or ``how = 'not'``
# for a name a split keeps apart; the merges and splits themselves; and the name each memory used.
M012_ENTITY_ALIASES = Migration(
    12,
    "entity aliases, merges and splits; the name a memory used for an entity",
    (
        """CREATE TABLE entity_aliases (
            namespace  TEXT NOT NULL,
            entity_id  TEXT NOT NULL,
            alias      TEXT NOT NULL,
            norm_alias TEXT NOT NULL,
            how        TEXT NOT NULL,
            evidence   TEXT,
            session_id TEXT,
            memory_id  TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (namespace, norm_alias, entity_id)
        )""",
        "CREATE INDEX entity_aliases_entity ON entity_aliases (entity_id)",
        """CREATE TABLE entity_events (
            id         INTEGER PRIMARY KEY,
            namespace  TEXT NOT NULL,
            kind       TEXT NOT NULL CHECK (kind IN ('merge', 'split')),
            entity_id  TEXT NOT NULL,
            other_id   TEXT NOT NULL,
            detail     TEXT NOT NULL,
            reason     TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX entity_events_entity ON entity_events (namespace, entity_id)",
        "ALTER TABLE memory_entities ADD COLUMN mention TEXT",
        # the fact key with each entity named by its id ("Mel"/"my wife" -> Melanie's), beside ``norm_content``
        "ALTER TABLE memories ADD COLUMN entity_key TEXT",
        "CREATE INDEX memories_entity_key ON memories (namespace, entity_key) WHERE entity_key IS NOT NULL",
    ),
)

# Confidence: how many pipeline stages agreed on a memory (``agreement``, tortoise_sdk.confidence: 0 S4
# only .. 3 vetted) and the confidence that and its distinct sources give. A memory written before has no
# record of its stages: it counts as agreed (2, base 0.6), promoted by 0.1 per further source turn and per
# further source session, capped at 0.9 (the rule of tortoise_sdk.confidence as shipped with this migration).
M013_CONFIDENCE = Migration(
    13,
    "memory confidence: stage agreement and repeated evidence",
    (
        "ALTER TABLE memories ADD COLUMN agreement INTEGER NOT NULL DEFAULT 2",
        "ALTER TABLE memories ADD COLUMN confidence REAL",
        """UPDATE memories SET confidence = (
            SELECT round(min(0.9, 0.6 + 0.1 * (max(1, count(DISTINCT p.turn_id)) - 1
                                           + max(1, count(DISTINCT t.session_id)) - 1)), 2)
            FROM provenance p JOIN turns t ON t.turn_id = p.turn_id WHERE p.memory_id = memories.memory_id)""",
    ),
)

# A namespace's newest turn, found without reading other namespaces': the index's walks newest
# first (``SQLiteRankingMixin.newest_rowid``) start at it, so a namespace that has been quiet while
# others kept writing is not made to read past every newer turn of theirs that holds the word.
M014_NAMESPACE_WALKS = Migration(
    14,
    "newest-first walks start at the namespace's own newest turn",
    ("CREATE INDEX rank_turns_namespace ON rank_turns (ns_id)",),
)

# Mirrors PostgreSQL's M015: a namespace's newest memory, one probe (every index ends in the rowid,
# so an index of the namespace alone gives its greatest rowid first). ``candidate_memories`` bounds
# its walks newest first by it, as ``candidate_turns`` bounds its own by the newest turn.
M015_MEMORY_WALKS = Migration(
    15,
    "newest-first walks of memories start at the namespace's own newest memory",
    ("CREATE INDEX memories_namespace ON memories (namespace)",),
)

SQLITE_MIGRATIONS: list[Migration] = [M001_FOUNDATION, M002_EXTRACTION, M003_SUBAGENTS, M004_SUBAGENT_TURN_REF,
                                      M005_CURSORS, M006_RANKING, M007_LOOP, M008_TOMBSTONES, M009_VECTORS,
                                      M010_CATEGORIES, M011_OPAQUE_IDS, M012_ENTITY_ALIASES, M013_CONFIDENCE,
                                      M014_NAMESPACE_WALKS, M015_MEMORY_WALKS,
                                      M016_NOTE_PROVENANCE, M017_ENTITY_PROVENANCE]


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    """Versions already recorded in the database."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def migrate_sqlite(conn: sqlite3.Connection, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Apply the migrations the database lacks; return the versions applied now.

    The connection must be in autocommit mode (``isolation_level=None``). Each
    migration runs under ``BEGIN IMMEDIATE`` and re-checks what is applied, so
    two processes opening the same new database do not both apply it. The database
    gets tortoise's ``APPLICATION_ID`` (in the first migration's transaction, or alone).
    """
    migrations = SQLITE_MIGRATIONS if migrations is None else migrations
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise MigrationError(f"migration versions must be unique and ascending, got {versions}")
    newest = max(applied_versions(conn), default=0)
    if newest > versions[-1]:
        raise SchemaTooNew(f"the database has schema version {newest}, newer than this tortoise-sdk knows "
                           f"({versions[-1]}): upgrade tortoise-sdk (pip install -U tortoise-sdk); nothing was written")
    # Ids migration 11 computes for stored rows, with the formulas the stores use for new ones.
    conn.create_function("tortoise_subagent_id", 4, subagent_id_for, deterministic=True)
    conn.create_function("tortoise_tombstone_id", 3, tombstone_id_for, deterministic=True)
    done: list[int] = []
    for m in migrations:
        if m.version in applied_versions(conn):
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")
            if m.version not in applied_versions(conn):
                for stmt in m.statements:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, datetime('now'))",
                    (m.version, m.name),
                )
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                done.append(m.version)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(
                f"migration {m.version} ({m.name}) failed: {exc}; the database was left at the previous version"
            ) from exc
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(f"marking the database as a tortoise memory failed: {exc}; "
                                 "it is otherwise up to date, open it again") from exc
    return done
