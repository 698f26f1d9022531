"""The DuckDB schema: every table, as explicit DDL, in one place.

Created idempotently (``CREATE ... IF NOT EXISTS``). Each document-partitioned
write replaces its rows in one transaction (``DELETE WHERE doc_id = ? [AND
strategy = ?]`` then ``INSERT``), so a reader never sees a half-written partition.

Vectors are ``FLOAT[]`` lists with an explicit ``dim`` column rather than a
fixed-size ``FLOAT[384]``: the table must hold vectors of any configured model,
and DuckDB's ``list_cosine_similarity`` works on lists.
"""

SCHEMA_VERSION = 1

DDL: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS schema_info (
        key   VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS documents (
        doc_id       VARCHAR PRIMARY KEY,   -- the partition key: cleaned relative path
        source_root  VARCHAR NOT NULL,      -- absolute path of the documents folder
        source_path  VARCHAR NOT NULL,      -- relative to source_root
        sha256       VARCHAR NOT NULL,      -- of the raw bytes: the data version
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
    """
    CREATE TABLE IF NOT EXISTS embeddings (
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
    CREATE TABLE IF NOT EXISTS embedding_cache (
        model_id      VARCHAR NOT NULL,
        text_sha256   VARCHAR NOT NULL,
        dim           INTEGER NOT NULL,
        embedding     FLOAT[] NOT NULL,
        PRIMARY KEY (model_id, text_sha256)
    )
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
)
