"""The DuckDB schema: every table, as explicit DDL, in one place.

Created idempotently (``CREATE ... IF NOT EXISTS``). Each document-partitioned
write replaces its rows in one transaction (``DELETE WHERE doc_id = ? [AND
strategy = ?]`` then ``INSERT``), so a reader never sees a half-written partition.

Vectors are ``FLOAT[]`` lists with an explicit ``dim`` column rather than a
fixed-size ``FLOAT[384]``: the table must hold vectors of any configured model,
and DuckDB's ``list_cosine_similarity`` works on lists.

Each vector is stored once, in ``embedding_vectors`` (keyed by model id and the
sha256 of the chunk text: it is also the embedding cache). ``chunk_embeddings``
references it per chunk, and the view ``embeddings`` joins the two, so
``SELECT doc_id, strategy, chunk_index, model_id, text_sha256, dim, embedding
FROM embeddings`` reads as it did when vectors were copied per chunk. Vectors no
longer referenced stay: re-adding a text embeds nothing.

Rows of an earlier good parse are kept when a document later fails (or changes
and is not yet re-chunked); they are marked by the document row, not deleted.
The views ``current_chunks`` and ``current_embeddings`` hold only rows of the
document's current, successfully parsed bytes (``documents.status = 'parsed'``
and ``doc_sha256 = documents.sha256``): search and evaluation read those.

``schema_info`` holds ``schema_version`` and ``source_root``: the one documents
folder whose documents this database holds (doc ids are paths inside it).

An older file is migrated when it is first opened for writing: the steps in
``MIGRATIONS`` from its version up run in one transaction with the version bump.

Store modes (``[store] mode`` in chunkyard.toml). The statements here are written
once, for the embedded DuckDB file, and :func:`render` turns each into the form of
the store's mode: ``"duckdb"`` uses them as written; ``"ducklake"`` (DuckLake has
no PRIMARY KEY, UNIQUE or indexes) drops the key constraints. The keys stay the
tables' logical keys (:func:`primary_keys` reads them from here): every writer
keeps them by deleting a document's rows and inserting the new ones in one
transaction, and upserts are ``MERGE INTO`` (which needs no constraint) in both
modes. Two DuckLake writers never commit over each other: DuckLake checks
conflicts per table, and every write transaction increments the one row of
``write_serial``, so of two concurrent writes one fails at commit and is retried
whole (resources/store.py). ``embedding_vectors`` is therefore never written twice
for one key either.
"""

import re

SCHEMA_VERSION = 6

STORE_MODES = ("duckdb", "ducklake")

# A strategy's latest failure on a document whose parse succeeded (its chunks could not be made
# or stored), for the bytes and configuration it failed on: what decides whether the next run
# retries it (orchestration/schedules.py) and what `status` lists. Removed when that strategy's
# chunks of the document are next stored.
STRATEGY_FAILURES_DDL = """
    CREATE TABLE IF NOT EXISTS strategy_failures (
        doc_id        VARCHAR   NOT NULL,
        strategy      VARCHAR   NOT NULL,
        doc_sha256    VARCHAR   NOT NULL,  -- the data version (documents.sha256) it failed on
        config_hash   VARCHAR   NOT NULL,  -- the strategy configuration it failed under
        error         VARCHAR   NOT NULL,
        recorded_at   TIMESTAMP NOT NULL,
        PRIMARY KEY (doc_id, strategy)
    )
"""

# A strategy's latest embedding failure on a document whose chunks were stored (refused under a
# limit, e.g. embed_timeout_s), for the bytes, chunk configuration and embedder (model id and
# embedded context: the embeddings asset's code version) it failed on: like strategy_failures, what
# decides whether the next run retries it and what `status` lists. Removed when that strategy's
# vectors of the document are next stored.
EMBEDDING_FAILURES_DDL = """
    CREATE TABLE IF NOT EXISTS embedding_failures (
        doc_id        VARCHAR   NOT NULL,
        strategy      VARCHAR   NOT NULL,
        doc_sha256    VARCHAR   NOT NULL,  -- the data version (documents.sha256) it failed on
        config_hash   VARCHAR   NOT NULL,  -- the configuration of the chunks it was embedding
        embed_version VARCHAR   NOT NULL,  -- the embedder: model id and embedded context
        error         VARCHAR   NOT NULL,
        recorded_at   TIMESTAMP NOT NULL,
        PRIMARY KEY (doc_id, strategy)
    )
"""

EMBEDDING_VECTORS_DDL = """
    CREATE TABLE IF NOT EXISTS embedding_vectors (
        model_id      VARCHAR NOT NULL,
        text_sha256   VARCHAR NOT NULL,     -- of the chunk text
        dim           INTEGER NOT NULL,
        embedding     FLOAT[] NOT NULL,
        PRIMARY KEY (model_id, text_sha256)
    )
"""

CHUNK_EMBEDDINGS_DDL = """
    CREATE TABLE IF NOT EXISTS chunk_embeddings (
        doc_id        VARCHAR NOT NULL,
        strategy      VARCHAR NOT NULL,
        chunk_index   INTEGER NOT NULL,
        model_id      VARCHAR NOT NULL,     -- with text_sha256: the row of embedding_vectors
        text_sha256   VARCHAR NOT NULL,
        -- The embedder that made it, as configured (EmbeddingModelResource.embedder_identity and the
        -- embedded context): a run re-embeds a document whose vectors another embedder made.
        embed_version VARCHAR,
        PRIMARY KEY (doc_id, strategy, chunk_index)
    )
"""

SCHEMA_INFO_DDL = """
    CREATE TABLE IF NOT EXISTS schema_info (
        key   VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    )
"""

# One row: every write transaction increments it (see the module docstring: in lake
# mode this makes two concurrent writes conflict, so commits are serial and whole).
WRITE_SERIAL_DDL = """
    CREATE TABLE IF NOT EXISTS write_serial (
        writes BIGINT NOT NULL              -- write transactions committed so far
    )
"""

DDL: tuple[str, ...] = (
    SCHEMA_INFO_DDL,
    WRITE_SERIAL_DDL,
    """
    CREATE TABLE IF NOT EXISTS documents (
        doc_id       VARCHAR PRIMARY KEY,   -- the partition key: cleaned relative path
        source_root  VARCHAR NOT NULL,      -- absolute path of the documents folder
        source_path  VARCHAR NOT NULL,      -- relative to source_root
        sha256       VARCHAR NOT NULL,      -- the data version: of the raw bytes (+sidecars:<digest> when it has sidecars)
        size_bytes   BIGINT  NOT NULL,
        format       VARCHAR,
        encoding     VARCHAR,
        n_pages      INTEGER,
        n_chars      BIGINT,
        status       VARCHAR NOT NULL,      -- 'read' | 'parsed' | 'error'
        error        VARCHAR,               -- the cause, naming the file, when status = 'error'
        updated_at   TIMESTAMP NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS pages (
        doc_id       VARCHAR NOT NULL,
        page_num     INTEGER NOT NULL,      -- 0-based
        char_offset  BIGINT  NOT NULL,      -- into the parsed text (pages concatenated)
        text         VARCHAR NOT NULL,
        PRIMARY KEY (doc_id, page_num)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS blocks (
        doc_id          VARCHAR NOT NULL,
        block_index     INTEGER NOT NULL,
        block_id        VARCHAR,            -- LightRAG blockid (md5), stable across re-parses
        heading         VARCHAR NOT NULL,
        level           INTEGER NOT NULL,
        parent_headings VARCHAR[] NOT NULL,
        content         VARCHAR NOT NULL,   -- '# heading' line + paragraphs, single-line tags
        session_type    VARCHAR NOT NULL,
        char_start      BIGINT,
        char_end        BIGINT,
        positions       JSON,
        -- the document title's block (sidecar is_title_block): P keeps its level 0.
        -- Nullable with a default, as migration 2 -> 3 can add it (DuckDB adds no
        -- column with a constraint); the writer always writes true or false.
        is_title_block  BOOLEAN DEFAULT false,
        PRIMARY KEY (doc_id, block_index)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS doc_tables (
        doc_id        VARCHAR NOT NULL,
        table_id      VARCHAR NOT NULL,
        table_format  VARCHAR,              -- 'json' | 'html'
        table_header  VARCHAR,              -- in the table's own format; NULL = no header
        entry         JSON NOT NULL,        -- the .tables.json entry
        PRIMARY KEY (doc_id, table_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS chunks (
        doc_id        VARCHAR NOT NULL,
        strategy      VARCHAR NOT NULL,
        chunk_index   INTEGER NOT NULL,
        text          VARCHAR NOT NULL,
        text_sha256   VARCHAR NOT NULL,
        token_count   INTEGER NOT NULL,
        char_start    BIGINT  NOT NULL,     -- into the parsed text
        char_end      BIGINT  NOT NULL,
        page_start    INTEGER NOT NULL,
        page_end      INTEGER NOT NULL,
        heading_path  VARCHAR[] NOT NULL,
        block_ids     VARCHAR[] NOT NULL,
        verbatim      BOOLEAN NOT NULL,     -- text == parsed_text[char_start:char_end]
        metadata      JSON,
        config_hash   VARCHAR NOT NULL,
        doc_sha256    VARCHAR NOT NULL,
        PRIMARY KEY (doc_id, strategy, chunk_index)
    )
    """,
    EMBEDDING_VECTORS_DDL,
    CHUNK_EMBEDDINGS_DDL,
    """
    CREATE VIEW IF NOT EXISTS embeddings AS
    SELECT r.doc_id, r.strategy, r.chunk_index, r.model_id, r.text_sha256, v.dim, v.embedding
    FROM chunk_embeddings r
    JOIN embedding_vectors v USING (model_id, text_sha256)
    """,
    """
    CREATE VIEW IF NOT EXISTS current_chunks AS
    SELECT c.*
    FROM chunks c
    JOIN documents d ON d.doc_id = c.doc_id AND d.status = 'parsed' AND d.sha256 = c.doc_sha256
    """,
    """
    CREATE VIEW IF NOT EXISTS current_embeddings AS
    -- By position, not by text hash: a strategy embedded with its context (title and
    -- heading path prepended) stores the hash of the text the model read.
    SELECT e.*
    FROM embeddings e
    JOIN current_chunks c USING (doc_id, strategy, chunk_index)
    """,
    # Retrieval evaluation history (search/evaluation.py, assets/evaluation.py): one row per
    # evaluation run, strategy and k; never updated, so earlier runs stay comparable.
    """
    CREATE TABLE IF NOT EXISTS retrieval_eval (
        run_id           VARCHAR   NOT NULL,  -- the Dagster run (or the CLI's own id)
        evaluated_at     TIMESTAMP NOT NULL,
        eval_set         VARCHAR   NOT NULL,  -- path as configured
        eval_set_sha256  VARCHAR   NOT NULL,
        mode             VARCHAR   NOT NULL,  -- vector | keyword | hybrid
        model_id         VARCHAR   NOT NULL,
        strategy         VARCHAR   NOT NULL,
        k                INTEGER   NOT NULL,
        questions        INTEGER   NOT NULL,  -- questions scored (unresolvable references left out)
        recall           DOUBLE    NOT NULL,  -- character-level, mean over questions
        precision        DOUBLE    NOT NULL,
        iou              DOUBLE    NOT NULL,
        mrr              DOUBLE    NOT NULL,
        ndcg             DOUBLE    NOT NULL,
        chunks           BIGINT    NOT NULL,  -- the strategy's searchable chunks
        tokens           BIGINT    NOT NULL,  -- their summed token_count (the embedding cost)
        PRIMARY KEY (run_id, strategy, k)
    )
    """,
    # Whole-pipeline cost (assets/costs.py): seconds per document per stage, one row per
    # Dagster run, document, stage and strategy; never updated, so runs stay comparable.
    """
    CREATE TABLE IF NOT EXISTS stage_costs (
        ingest_id       VARCHAR   NOT NULL,  -- one `chunkyard run` (tag on each of its runs), else the run id
        run_id          VARCHAR   NOT NULL,  -- the Dagster run
        doc_id          VARCHAR   NOT NULL,
        stage           VARCHAR   NOT NULL,  -- read | parse | chunk | embed
        strategy        VARCHAR   NOT NULL,  -- '' for read and parse
        seconds         DOUBLE    NOT NULL,  -- wall time of this document in this stage, store writes included
        store_seconds   DOUBLE    NOT NULL,  -- of which writing its rows to the store
        model_seconds   DOUBLE,              -- embed only: its share of the step's embedding-model call
        new_embeddings  INTEGER,             -- embed only: texts the model embedded for it
        cache_hits      INTEGER,             -- embed only: vectors found in the cache
        recorded_at     TIMESTAMP NOT NULL,
        PRIMARY KEY (run_id, doc_id, stage, strategy)
    )
    """,
    STRATEGY_FAILURES_DDL,
    EMBEDDING_FAILURES_DDL,
)

# version -> the statements that turn a database of that version into the next one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 1 -> 2: vectors were copied into every embeddings row and into embedding_cache.
    1: (
        EMBEDDING_VECTORS_DDL,
        """
        INSERT INTO embedding_vectors
        SELECT model_id, text_sha256, any_value(dim), any_value(embedding)
        FROM (SELECT model_id, text_sha256, dim, embedding FROM embedding_cache
              UNION ALL
              SELECT model_id, text_sha256, dim, embedding FROM embeddings)
        GROUP BY model_id, text_sha256
        """,
        CHUNK_EMBEDDINGS_DDL,
        """
        INSERT INTO chunk_embeddings (doc_id, strategy, chunk_index, model_id, text_sha256)
        SELECT doc_id, strategy, chunk_index, model_id, text_sha256 FROM embeddings
        """,
        "DROP TABLE embeddings",
        "DROP TABLE embedding_cache",
    ),
    # 2 -> 3: blocks gain is_title_block; blocks stored before it was kept are not titles.
    2: ("ALTER TABLE blocks ADD COLUMN IF NOT EXISTS is_title_block BOOLEAN DEFAULT false",),
    # 3 -> 4: strategy failures are recorded (before, only the Dagster partition's metadata had them).
    3: (STRATEGY_FAILURES_DDL,),
    # 4 -> 5: embedding failures are recorded (before, a refused document was never embedded again).
    4: (EMBEDDING_FAILURES_DDL,),
    # 5 -> 6: vector references name their embedder (before, a change of model precision or embedded
    # context left the old vectors in place). Those stored before are taken as of their model id:
    # the embedder as configured where precision is "auto" on a float32 CPU; elsewhere (an explicit
    # precision, auto resolving to bfloat16, an embedded context) each document is embedded once
    # more after the upgrade, its vectors mostly from the cache.
    5: (
        "ALTER TABLE chunk_embeddings ADD COLUMN IF NOT EXISTS embed_version VARCHAR",
        "UPDATE chunk_embeddings SET embed_version = model_id WHERE embed_version IS NULL",
    ),
}

# The version-1 layout of the two tables migration 1 replaces, as shipped in schema
# version 1: kept so tests can build a version-1 file and migrate it.
V1_EMBEDDING_TABLES_DDL: tuple[str, ...] = (
    """
    CREATE TABLE embeddings (
        doc_id        VARCHAR NOT NULL,
        strategy      VARCHAR NOT NULL,
        chunk_index   INTEGER NOT NULL,
        model_id      VARCHAR NOT NULL,
        text_sha256   VARCHAR NOT NULL,
        dim           INTEGER NOT NULL,
        embedding     FLOAT[] NOT NULL,
        PRIMARY KEY (doc_id, strategy, chunk_index)
    )
    """,
    """
    CREATE TABLE embedding_cache (
        model_id      VARCHAR NOT NULL,
        text_sha256   VARCHAR NOT NULL,
        dim           INTEGER NOT NULL,
        embedding     FLOAT[] NOT NULL,
        PRIMARY KEY (model_id, text_sha256)
    )
    """,
)

# The blocks table as shipped in schema versions 1 and 2 (before is_title_block):
# kept so tests can build a version-2 file and migrate it.
V2_BLOCKS_DDL = """
    CREATE TABLE blocks (
        doc_id          VARCHAR NOT NULL,
        block_index     INTEGER NOT NULL,
        block_id        VARCHAR,
        heading         VARCHAR NOT NULL,
        level           INTEGER NOT NULL,
        parent_headings VARCHAR[] NOT NULL,
        content         VARCHAR NOT NULL,
        session_type    VARCHAR NOT NULL,
        char_start      BIGINT,
        char_end        BIGINT,
        positions       JSON,
        PRIMARY KEY (doc_id, block_index)
    )
"""

# A table-level key, possibly after a comment on the previous column's line.
_TABLE_KEY = re.compile(r",(?P<comment>[ \t]*--[^\n]*)?\s*PRIMARY KEY\s*\((?P<columns>[^)]*)\)")
_COLUMN_KEY = re.compile(r"[ \t]+PRIMARY KEY\b")
_CREATE_TABLE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)")
_KEY_COLUMN = re.compile(r"^\s*(\w+)\s+\w+[^,\n]*PRIMARY KEY", re.MULTILINE)


def render(statement: str, mode: str) -> str:
    """``statement`` as the store of ``mode`` runs it.

    Invariant: for ``"duckdb"`` the statement is unchanged; for ``"ducklake"`` only
    the PRIMARY KEY constraints are gone (columns, types, NOT NULL, views unchanged).
    """
    if mode not in STORE_MODES:
        raise ValueError(f"unknown store mode {mode!r}; one of {STORE_MODES}")
    if mode == "duckdb":
        return statement
    without_table_keys = _TABLE_KEY.sub(lambda m: m.group("comment") or "", statement)
    return _COLUMN_KEY.sub("", without_table_keys)


def rendered_ddl(mode: str) -> tuple[str, ...]:
    return tuple(render(statement, mode) for statement in DDL)


def primary_keys() -> dict[str, tuple[str, ...]]:
    """Table -> its key columns, as declared in ``DDL`` (lake mode keeps them without constraints)."""
    keys: dict[str, tuple[str, ...]] = {}
    for statement in DDL:
        table = _CREATE_TABLE.search(statement)
        if table is None:
            continue
        table_key = _TABLE_KEY.search(statement)
        column_key = _KEY_COLUMN.search(statement)
        if table_key:
            keys[table.group(1)] = tuple(c.strip() for c in table_key.group("columns").split(","))
        elif column_key:
            keys[table.group(1)] = (column_key.group(1),)
    return keys
