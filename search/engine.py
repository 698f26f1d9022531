"""Search over the stored chunks: vector (cosine), keyword (BM25) and hybrid (RRF).

Where the indexes live, and why. Search never writes the store: it ATTACHes the
DuckDB file read-only, copies the searchable rows of one embedding model into an
in-memory database (one table per strategy, vectors as fixed-size ``FLOAT[dim]``
arrays) and builds the indexes there:

* keyword: the ``fts`` extension's BM25 index, one per strategy table, so a
  term's IDF comes from the chunks of that strategy alone. It indexes
  ``keyword_text(text)``, not the text: fts splits words on whitespace and, by
  default, deletes every character outside a-z, so CJK (written without spaces),
  Cyrillic or digits never became terms. ``keyword_text`` splits each CJK run
  into overlapping character bigrams (Lucene's CJK analyzer does the same), the
  index keeps every Unicode letter and digit (``FTS_IGNORE``), and the query goes
  through the same function;
* vector: exact cosine (``array_cosine_distance``) by default. ``vss``'s HNSW
  index (``vector_index="hnsw"``) is built only in memory: HNSW persistence in a
  file DB is experimental in vss. ``bench/bench_search.py --n 4000`` on the
  shared 2-core machine: HNSW build = 60x one exact filtered top-5 query, an
  unfiltered HNSW query 1.0x; vss applies a WHERE after its index scan, so
  filtered HNSW queries returned 16 of 100 rows. So exact search is the
  default and HNSW (in memory) answers unfiltered queries only.

The copy is keyed by a fingerprint of the searchable rows (an order-free hash of
every chunk's identity, offsets, text hash and document hash, and the hash of the
text its vector was made from). Each
query checks the fingerprint first (one aggregate over the store) and rebuilds
when the chunk set changed, so documents added, changed or deleted are searched
as they are now, never as they were at the first query.

Read only through ``CHUNKS_RELATION`` and the ``embeddings`` columns named in
``EMBEDDING_COLUMNS``: the store's schema changes under other hands.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Literal, Sequence

import duckdb
import numpy as np

from search.metrics import merge_intervals

# The relation chunks are read from: the store's view of each document's current good
# parse (resources/schema.py), so rows kept from an earlier parse are never found.
CHUNKS_RELATION = "current_chunks"
EMBEDDING_COLUMNS = "doc_id, strategy, chunk_index, model_id, text_sha256, dim, embedding"
DUCKDB_EXTENSION_VERSION = "v1.5.5"
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al. 2009)
# Most hits per strategy one search returns: every input is bounded (a k past the int64 range
# reached DuckDB as an internal error; a k of millions ranks and copies every chunk).
MAX_K = 10_000

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[str, ...] = ("vector", "keyword", "hybrid")
VECTOR_INDEXES = ("exact", "hnsw")
# How coarse-to-fine search orders the fine chunks found inside the coarse hits (SearchIndex.search
# ``within_rank``): "fine" by the fine chunk's own score; "rrf" by reciprocal rank fusion of the fine
# chunk's rank among the candidates with its best coarse parent's rank; "product" by the fine score
# times the parent's score.
WITHIN_RANKS: tuple[str, ...] = ("fine", "rrf", "product")

# What the fts tokenizer deletes (after lowercasing and stripping accents): anything but a
# letter of any script, a combining mark or a digit. fts's default, (\.|[^a-z])+, also deletes
# CJK, Cyrillic, Greek, ... and digits.
FTS_IGNORE = r"(\.|[^a-z0-9\p{L}\p{M}])+"
# Scripts written without spaces between words: Han (with extension A and compatibility
# ideographs), Hiragana, Katakana (with the half-width forms and the prolonged sound mark)
# and Hangul syllables, the ranges Lucene's CJKBigramFilter bigrams.
_CJK_RUN = re.compile(
    "[\u3041-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]+"
)


def keyword_text(text: str) -> str:
    """The text BM25 indexes and queries: each CJK run replaced by its overlapping character
    bigrams (a one-character run by itself), space separated; other text unchanged.

    ``"用同一把密钥"`` -> ``" 用同 同一 一把 把密 密钥 "``. A query and a chunk then share a term
    for every two adjacent CJK characters they share, which is what a space-delimited
    tokenizer needs: CJK has no spaces, and a whole run would only match itself.
    """

    def bigrams(match: re.Match) -> str:
        run = match.group(0)
        if len(run) == 1:
            return f" {run} "
        return " " + " ".join(run[i:i + 2] for i in range(len(run) - 1)) + " "

    return _CJK_RUN.sub(bigrams, text)


class SearchError(RuntimeError):
    """A search that cannot run as asked (no vectors for the model, unknown strategy, ...)."""


def extension_path(name: str) -> Path:
    """The extension file shipped by the ``duckdb-extension-<name>`` package (loaded offline)."""
    import importlib

    module = importlib.import_module(f"duckdb_extension_{name}")
    path = Path(module.__file__).parent / "extensions" / DUCKDB_EXTENSION_VERSION / f"{name}.duckdb_extension"
    if not path.is_file():
        raise SearchError(f"DuckDB extension {name!r} not found at {path}; install duckdb-extension-{name}")
    return path


def load_extensions(con: duckdb.DuckDBPyConnection, names: Iterable[str] = ("fts", "vss")) -> None:
    for name in names:
        con.execute(f"LOAD '{extension_path(name)}'")


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk, located in its document, with the text around it."""

    strategy: str
    rank: int
    score: float
    doc_id: str
    chunk_index: int
    char_start: int
    char_end: int
    page_start: int
    page_end: int
    heading_path: list[str]
    text: str
    context_before: str = ""
    context_after: str = ""
    # Coarse-to-fine search: the coarse strategy whose top hits this chunk was found inside,
    # and the rank of its best coarse hit (its "parent"); None for plain search.
    within: str | None = None
    parent_rank: int | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class _Built:
    fingerprint: str
    dim: int
    tables: dict[str, str] = field(default_factory=dict)  # strategy -> in-memory table name
    hnsw: bool = False


# Order-free (bit_xor) digest of the searchable rows of one model: any chunk added,
# removed, re-cut or re-embedded changes it.
FINGERPRINT_SQL = f"""
    SELECT count(*), coalesce(bit_xor(hash(c.doc_id, c.strategy, c.chunk_index, c.char_start, c.char_end,
                                          c.text_sha256, c.doc_sha256, e.text_sha256, e.dim)), 0)
    FROM store.{CHUNKS_RELATION} c
    JOIN (SELECT {EMBEDDING_COLUMNS} FROM store.embeddings) e USING (doc_id, strategy, chunk_index)
    WHERE e.model_id = ?
"""


class SearchIndex:
    """In-memory search indexes over one store file and one embedding model."""

    def __init__(
        self,
        db_path: str | Path,
        model_id: str,
        *,
        embed: Callable[[Sequence[str]], np.ndarray] | None = None,
        vector_index: str = "exact",
        context_chars: int = 200,
        lock_timeout_s: float = 30.0,
        lake=None,
        configured: Sequence[str] | None = None,
    ) -> None:
        """``lake``: a ``resources.store.LakeConfig`` to read instead of the file at ``db_path``.
        ``configured``: the strategies of the configuration; a search of every strategy leaves out
        one stored from an earlier configuration (named explicitly, it is searched)."""
        if vector_index not in VECTOR_INDEXES:
            raise SearchError(f"vector_index must be one of {VECTOR_INDEXES}, not {vector_index!r}")
        self.configured = None if configured is None else frozenset(configured)
        self.db_path = Path(db_path)
        self.model_id = model_id
        self.embed = embed
        self.vector_index = vector_index
        self.context_chars = context_chars
        self.lock_timeout_s = lock_timeout_s
        self.builds = 0  # how many times the copy was (re)built: tests and metadata read it
        self._con = duckdb.connect(":memory:")
        load_extensions(self._con)
        self._con.create_function("keyword_text", keyword_text, ["VARCHAR"], "VARCHAR", side_effects=False)
        self.lake = lake
        if lake is not None:
            from resources.store import prepare_lake_connection  # resources.store imports this module

            prepare_lake_connection(self._con, lake)  # extensions, and an object store's secret
        self._built: _Built | None = None

    def close(self) -> None:
        self._con.close()

    # -- the in-memory copy ---------------------------------------------------------

    def _attach(self) -> None:
        if self.lake is not None:  # a lake never locks out its readers: one read-only attach
            target, data_path = (t.replace("'", "''") for t in (self.lake.attach_target(), self.lake.data_path))
            self._con.execute(f"ATTACH '{target}' AS store (DATA_PATH '{data_path}', READ_ONLY)")
            return
        if not self.db_path.is_file():
            raise SearchError(f"no chunkyard database at {self.db_path}: run `chunkyard run` first")
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                self._con.execute(f"ATTACH '{self.db_path}' AS store (READ_ONLY)")
                return
            except duckdb.IOException as exc:  # another process is writing: wait for its lock
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise SearchError(f"cannot read {self.db_path}: {exc}") from exc
                time.sleep(0.2)

    def _detach(self) -> None:
        self._con.execute("DETACH store")

    def refresh(self) -> bool:
        """Rebuild the copy if the store's searchable rows changed; True when it rebuilt."""
        self._attach()
        try:
            if not self._has_store_tables():
                raise SearchError(f"{self.db_path} has no chunks or embeddings yet: run `chunkyard run` first")
            count, digest = self._con.execute(FINGERPRINT_SQL, [self.model_id]).fetchone()
            fingerprint = f"{count}:{digest}"
            if self._built is not None and self._built.fingerprint == fingerprint:
                return False
            self._rebuild(fingerprint)
            return True
        finally:
            self._detach()

    def _has_store_tables(self) -> bool:
        names = {
            r[0] for r in self._con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'store' "
                "UNION SELECT view_name FROM duckdb_views() WHERE database_name = 'store'"
            ).fetchall()
        }
        return {CHUNKS_RELATION, "embeddings", "pages"} <= names

    def _rebuild(self, fingerprint: str) -> None:
        con = self._con
        dims = [d for (d,) in con.execute(
            "SELECT DISTINCT dim FROM store.embeddings WHERE model_id = ?", [self.model_id]
        ).fetchall()]
        if len(dims) > 1:
            raise SearchError(f"model {self.model_id!r} has vectors of several dimensions {dims} in the store")
        for old in (self._built.tables.values() if self._built else ()):
            con.execute(f"DROP TABLE IF EXISTS {old}")
        con.execute("DROP TABLE IF EXISTS parsed")
        con.execute(
            "CREATE TABLE parsed AS SELECT doc_id, string_agg(text, '' ORDER BY page_num) AS text "
            "FROM store.pages GROUP BY doc_id"
        )
        dim = dims[0] if dims else 0
        strategies = [s for (s,) in con.execute(
            f"SELECT DISTINCT c.strategy FROM store.{CHUNKS_RELATION} c JOIN store.embeddings e "
            "USING (doc_id, strategy, chunk_index) WHERE e.model_id = ? ORDER BY 1", [self.model_id]
        ).fetchall()]
        built = _Built(fingerprint=fingerprint, dim=dim, hnsw=self.vector_index == "hnsw")
        for i, strategy in enumerate(strategies):
            table = f"search_{i}"
            con.execute(
                f"""
                CREATE TABLE {table} AS
                SELECT row_number() OVER (ORDER BY c.doc_id, c.chunk_index)::INTEGER AS row_id,
                       c.doc_id, c.chunk_index, c.text, c.token_count, c.char_start, c.char_end, c.page_start,
                       c.page_end, c.heading_path, keyword_text(c.text) AS keyword_text,
                       e.embedding::FLOAT[{dim}] AS vec
                FROM store.{CHUNKS_RELATION} c
                JOIN (SELECT {EMBEDDING_COLUMNS} FROM store.embeddings) e USING (doc_id, strategy, chunk_index)
                WHERE c.strategy = ? AND e.model_id = ?
                """,
                [strategy, self.model_id],
            )
            con.execute(
                f"PRAGMA create_fts_index('{table}', 'row_id', 'keyword_text', stemmer = 'porter', "
                f"stopwords = 'english', ignore = '{FTS_IGNORE}', strip_accents = 1, lower = 1, overwrite = 1)"
            )
            if built.hnsw:
                con.execute(f"CREATE INDEX {table}_hnsw ON {table} USING HNSW (vec) WITH (metric = 'cosine')")
            built.tables[strategy] = table
        self._built = built
        self.builds += 1

    # -- what the evaluation reads (from the copy as last refreshed) ---------------

    def _ensure_built(self) -> None:
        if self._built is None:
            self.refresh()

    def parsed_text(self, doc_id: str) -> str | None:
        """The document's parsed text (pages joined), or None if the store has none."""
        self._ensure_built()
        row = self._con.execute("SELECT text FROM parsed WHERE doc_id = ?", [doc_id]).fetchone()
        return row[0] if row else None

    def chunk_spans(self, strategy: str) -> list[tuple[str, int, int]]:
        """(doc_id, char_start, char_end) of every searchable chunk of a strategy."""
        self._ensure_built()
        table = self._tables_for(strategy)[strategy]
        return self._con.execute(f"SELECT doc_id, char_start, char_end FROM {table}").fetchall()

    def cost(self, strategy: str) -> tuple[int, int]:
        """(chunks, tokens) of a strategy: what it stores and embeds."""
        self._ensure_built()
        table = self._tables_for(strategy)[strategy]
        n, tokens = self._con.execute(f"SELECT count(*), coalesce(sum(token_count), 0) FROM {table}").fetchone()
        return int(n), int(tokens)

    # -- queries --------------------------------------------------------------------

    def strategies(self, *, refresh: bool = True) -> list[str]:
        """The strategies with embedded chunks for this model (of the configured ones, when given)."""
        self.refresh() if refresh else self._ensure_built()
        return list(self._configured_tables())

    def search(
        self,
        query: str,
        *,
        mode: str = "hybrid",
        k: int = 5,
        strategy: str | None = None,
        doc_ids: Sequence[str] | None = None,
        folder: str | None = None,
        query_vector: np.ndarray | None = None,
        refresh: bool = True,
        skip_covered: float | None = None,
        keyword_weight: float = 1.0,
        within: str | None = None,
        within_depth: int = 10,
        within_rank: str = "fine",
    ) -> list[Hit]:
        """Top ``k`` chunks per strategy (one strategy, or every one), best first.

        Scores: cosine similarity (vector), BM25 (keyword), RRF sum (hybrid).
        ``doc_ids`` keeps only those documents; ``folder`` only documents under it.
        ``refresh=False`` skips the fingerprint check, for a batch of queries right
        after one ``refresh()`` (the evaluation). ``skip_covered`` (overlap-aware top k,
        in (0, 1]): a chunk is skipped when at least that fraction of its characters is
        in better-ranked hits of the same document already returned, and the next one
        is taken, so overlapping windows give k distinct regions (``not_covered``).
        ``keyword_weight``: hybrid only, the BM25 ranking's weight in the fusion against
        the vector ranking's 1 (1: plain RRF).

        Coarse-to-fine (``within``, a strategy name): rank that coarse strategy's chunks
        first (same mode and filters) and keep its top ``within_depth``; the hits are then
        the searched strategy's own stored chunks that share at least one character with
        one of those coarse hits, ordered by ``within_rank`` (``WITHIN_RANKS``). Each hit
        keeps its own offsets, pages and heading path, and names its coarse parent
        (``Hit.within``, ``Hit.parent_rank``). When the top ``within_depth`` hold fewer than
        ``k`` fine chunks the mode ranks (keyword: that the query matches), the coarse
        ranking is taken deeper (doubling) until they do or it runs out, so a search still
        returns ``k`` hits where the strategy has them.
        """
        if mode not in MODES:
            raise SearchError(f"mode must be one of {MODES}, not {mode!r}")
        if not query.strip():
            raise SearchError("the query is empty (or only whitespace): there is nothing to search for")
        if not 1 <= k <= MAX_K:
            raise SearchError(f"k must be between 1 and {MAX_K} (hits per strategy), not {k}")
        if keyword_weight < 0:
            raise SearchError(f"keyword_weight must be >= 0, not {keyword_weight!r}")
        if skip_covered is not None and not 0 < skip_covered <= 1:
            raise SearchError(f"skip_covered must be in (0, 1], not {skip_covered!r}")
        if within_rank not in WITHIN_RANKS:
            raise SearchError(f"within_rank must be one of {WITHIN_RANKS}, not {within_rank!r}")
        if within_depth < 1:
            raise SearchError(f"within_depth must be at least 1, not {within_depth!r}")
        if refresh or self._built is None:
            self.refresh()
        self._check_filters(doc_ids, folder)
        tables = self._tables_for(strategy)
        coarse_table = self._tables_for(within)[within] if within is not None else None
        if mode != "keyword":
            query_vector = self._embed_query(query) if query_vector is None else query_vector
        fusion_depth = max(50, 5 * k)
        hits: list[Hit] = []
        for name, table in tables.items():
            fetch = k if skip_covered is None else 4 * k
            parents: dict[int, int] = {}
            while True:
                if coarse_table is None:
                    ranked = self._ranked(table, mode, query, query_vector, fetch, doc_ids, folder, keyword_weight,
                                          fusion_depth=fusion_depth)
                    exhausted = len(ranked) < fetch
                else:
                    ranked, parents, exhausted = self._ranked_within(
                        table, coarse_table, mode, query, query_vector, fetch, doc_ids, folder, keyword_weight,
                        fusion_depth, within_depth, within_rank)
                if skip_covered is None:
                    break
                kept = [ranked[i] for i in not_covered(self._spans(table, ranked), skip_covered)]
                if len(kept) >= k or exhausted:  # enough distinct hits, or no more candidates
                    ranked = kept[:k]
                    break
                fetch *= 4
            hits.extend(self._hits(name, table, ranked, within=within, parents=parents))
        return hits

    def _ranked_within(self, table, coarse_table, mode, query, query_vector, k, doc_ids, folder, keyword_weight,
                       fusion_depth, depth, rank_by) -> tuple[list[tuple[int, float]], dict[int, int], bool]:
        """Coarse-to-fine: the top ``k`` (row_id, score) of ``table`` among its chunks that overlap
        the top ``depth`` hits of ``coarse_table``, ordered by ``rank_by``; with each kept row's
        parent rank (its best overlapping coarse hit), and whether no more candidates exist.

        Invariants: every returned row overlaps a coarse hit of the same document; the coarse
        ranking uses the same mode, filters and fusion depth as plain search; it is taken deeper
        (doubling ``depth``) only while fewer than ``k`` candidates are ranked (keyword: matched)."""
        while True:
            coarse = self._ranked(coarse_table, mode, query, query_vector, depth, doc_ids, folder, keyword_weight,
                                  fusion_depth=fusion_depth)
            parents = self._overlapping(table, self._spans(coarse_table, coarse))  # row_id -> parent rank
            # The candidates ranked whole (they are few: the fine chunks of ``depth`` coarse hits); in
            # keyword mode only those the query's terms match.
            fine = self._ranked(table, mode, query, query_vector, len(parents), doc_ids, folder, keyword_weight,
                                fusion_depth=len(parents), rows=list(parents)) if parents else []
            if len(fine) >= k or len(coarse) < depth:
                break
            depth *= 2
        ranked = combine_with_parents(fine, parents, [score for _, score in coarse], rank_by)
        # Fewer than asked for only when the coarse ranking ran out: none exist deeper.
        return ranked[:k], {row_id: parents[row_id] for row_id, _ in ranked[:k]}, len(ranked) < k

    def _overlapping(self, table: str, regions: list[tuple[str, int, int]]) -> dict[int, int]:
        """row_id -> the 1-based rank of the first (best) region each row shares a character with."""
        if not regions:
            return {}
        docs, starts, ends = (list(col) for col in zip(*regions))
        return dict(self._con.execute(
            f"""SELECT t.row_id, min(w.rank)::INTEGER FROM {table} t
                JOIN (SELECT unnest(?::VARCHAR[]) AS doc_id, unnest(?::INTEGER[]) AS s, unnest(?::INTEGER[]) AS e,
                             unnest(range(1, ?::INTEGER + 1)) AS rank) w
                  ON t.doc_id = w.doc_id AND t.char_start < w.e AND t.char_end > w.s
                GROUP BY t.row_id""",
            [docs, starts, ends, len(regions)],
        ).fetchall())

    def _ranked(self, table, mode, query, query_vector, k, doc_ids, folder, keyword_weight=1.0,
                fusion_depth=50, rows: list[int] | None = None) -> list[tuple[int, float]]:
        """The top ``k`` (row_id, score) of one strategy table, best first. Hybrid fuses the top
        ``fusion_depth`` of each ranking (at least ``k``): it follows the k asked for, not how
        deep overlap-aware top k looks, so skipping never changes the fused order.
        ``rows``: rank only these row_ids (coarse-to-fine candidates)."""
        only = () if rows is None else (rows,)
        if mode == "vector":
            return self._vector(table, query_vector, k, doc_ids, folder, *only)
        if mode == "keyword":
            return self._keyword(table, query, k, doc_ids, folder, *only)
        depth = max(fusion_depth, k)
        return reciprocal_rank_fusion(
            [self._vector(table, query_vector, depth, doc_ids, folder, *only),
             self._keyword(table, query, depth, doc_ids, folder, *only)],
            k, weights=(1.0, keyword_weight),
        )

    def _spans(self, table: str, ranked: list[tuple[int, float]]) -> list[tuple[str, int, int]]:
        """(doc_id, char_start, char_end) of each ranked row, in rank order."""
        spans = {r[0]: r[1:] for r in self._con.execute(
            f"SELECT row_id, doc_id, char_start, char_end FROM {table} WHERE row_id IN (SELECT unnest(?::INTEGER[]))",
            [[row_id for row_id, _ in ranked]],
        ).fetchall()} if ranked else {}
        return [spans[row_id] for row_id, _ in ranked]

    def _tables_for(self, strategy: str | None) -> dict[str, str]:
        tables = self._built.tables
        if not tables:
            raise SearchError(f"no embedded chunks for model {self.model_id!r} in {self.db_path}")
        if strategy is None:
            current = self._configured_tables()
            if not current:
                raise SearchError(f"no embedded chunks of a configured strategy for model {self.model_id!r}; stored "
                                  f"from an earlier configuration: {sorted(tables)} (name one with --strategy)")
            return current
        if strategy not in tables:
            raise SearchError(f"no embedded chunks of strategy {strategy!r}; searchable: {sorted(tables)}")
        return {strategy: tables[strategy]}

    def keyword_terms(self, query: str) -> list[str]:
        """The words of ``query`` keyword search matches on: the fts index's own tokens of
        ``keyword_text(query)``, its English stop words and empty tokens left out (before stemming).
        Empty for a query of stop words and punctuation only, which keyword search cannot match
        however the store is filled, so a caller can say that instead of "no hits"."""
        self._ensure_built()
        if not self._built.tables:
            return []
        schema = f"fts_main_{next(iter(self._built.tables.values()))}"
        return [w for (w,) in self._con.execute(
            f"SELECT w FROM (SELECT unnest({schema}.tokenize(?)) AS w) "
            f"WHERE w <> '' AND w NOT IN (SELECT sw FROM {schema}.stopwords)",
            [keyword_text(query)],
        ).fetchall()]

    def _configured_tables(self) -> dict[str, str]:
        """strategy -> search table of the built copy, of the configured strategies when given."""
        return {name: table for name, table in self._built.tables.items()
                if self.configured is None or name in self.configured}

    def _embed_query(self, query: str) -> np.ndarray:
        if self.embed is None:
            raise SearchError("vector and hybrid search need an embedding model (embed=...)")
        vector = np.asarray(self.embed([query]), dtype=np.float32)[0]
        if vector.shape[0] != self._built.dim:
            raise SearchError(f"query vector has dimension {vector.shape[0]}, the store's is {self._built.dim}")
        return vector

    def _check_filters(self, doc_ids: Sequence[str] | None, folder: str | None) -> None:
        """A document or folder filter that names nothing stored is a mistake (a typo, an id without
        its folder), not a search without hits: said, naming what is missing."""
        if doc_ids is not None:
            known = {d for (d,) in self._con.execute(
                "SELECT doc_id FROM parsed WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))", [list(doc_ids)]
            ).fetchall()}
            missing = [d for d in doc_ids if d not in known]
            if missing:
                raise SearchError(f"no document {', '.join(map(repr, missing))} in {self.db_path} "
                                  "(`chunkyard status --documents` lists the ids: paths inside the documents folder)")
        if folder and not self._con.execute(
            "SELECT count(*) FROM parsed WHERE starts_with(doc_id, ?)", [folder.strip("/") + "/"]
        ).fetchone()[0]:
            raise SearchError(f"no stored document under the folder {folder!r} of the documents folder")

    @staticmethod
    def _filter(doc_ids: Sequence[str] | None, folder: str | None,
                rows: Sequence[int] | None = None) -> tuple[str, list]:
        clauses, params = [], []
        if rows is not None:
            clauses.append("row_id IN (SELECT unnest(?::INTEGER[]))")
            params.append(list(rows))
        if doc_ids is not None:
            clauses.append("doc_id IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(doc_ids))
        if folder:
            clauses.append("starts_with(doc_id, ?)")
            params.append(folder.strip("/") + "/")
        return (" AND ".join(clauses) or "TRUE"), params

    def _vector(self, table, vector, k, doc_ids, folder, rows=None) -> list[tuple[int, float]]:
        where, params = self._filter(doc_ids, folder, rows)
        dim = self._built.dim
        if self._built.hnsw and not params:
            # The shape vss rewrites into an HNSW index scan: ORDER BY distance LIMIT k, nothing else.
            return self._con.execute(
                f"""SELECT row_id, 1 - array_cosine_distance(vec, ?::FLOAT[{dim}]) AS score FROM {table}
                    ORDER BY array_cosine_distance(vec, ?::FLOAT[{dim}]) LIMIT {int(k)}""",
                [vector.tolist(), vector.tolist()],
            ).fetchall()
        # Exact: ordering by the score (not the bare distance) keeps the optimizer off the
        # index, whose scan would drop rows the WHERE rejects after it (fewer than k hits).
        return self._con.execute(
            f"""SELECT row_id, 1 - array_cosine_distance(vec, ?::FLOAT[{dim}]) AS score FROM {table}
                WHERE {where} ORDER BY score DESC, row_id LIMIT {int(k)}""",
            [vector.tolist(), *params],
        ).fetchall()

    def _keyword(self, table, query, k, doc_ids, folder, rows=None) -> list[tuple[int, float]]:
        where, params = self._filter(doc_ids, folder, rows)
        return self._con.execute(
            f"""SELECT row_id, score FROM (
                    SELECT row_id, doc_id, fts_main_{table}.match_bm25(row_id, ?) AS score FROM {table})
                WHERE score IS NOT NULL AND {where} ORDER BY score DESC, row_id LIMIT {int(k)}""",
            [keyword_text(query), *params],
        ).fetchall()

    def _hits(self, strategy: str, table: str, ranked: list[tuple[int, float]], *, within: str | None = None,
              parents: dict[int, int] | None = None) -> list[Hit]:
        if not ranked:
            return []
        ctx = int(self.context_chars)
        rows = {
            r[0]: r[1:]
            for r in self._con.execute(
                f"""SELECT t.row_id, t.doc_id, t.chunk_index, t.char_start, t.char_end, t.page_start, t.page_end,
                           t.heading_path, t.text,
                           coalesce(substr(p.text, greatest(t.char_start - {ctx}, 0) + 1,
                                           t.char_start - greatest(t.char_start - {ctx}, 0)), ''),
                           coalesce(substr(p.text, t.char_end + 1, {ctx}), '')
                    FROM {table} t LEFT JOIN parsed p USING (doc_id)
                    WHERE t.row_id IN (SELECT unnest(?::INTEGER[]))""",
                [[row_id for row_id, _ in ranked]],
            ).fetchall()
        }
        hits = []
        for rank, (row_id, score) in enumerate(ranked, start=1):
            doc_id, chunk_index, start, end, p0, p1, heading, text, before, after = rows[row_id]
            hits.append(Hit(strategy, rank, float(score), doc_id, chunk_index, start, end, p0, p1,
                            list(heading), text, before, after, within=within,
                            parent_rank=(parents or {}).get(row_id)))
        return hits


def combine_with_parents(
    fine: Sequence[tuple[int, float]], parents: dict[int, int], coarse_scores: Sequence[float], rank_by: str
) -> list[tuple[int, float]]:
    """Order fine candidates (``fine``: (row_id, score), best first) for coarse-to-fine search.

    ``parents``: row_id -> 1-based rank of its best overlapping coarse hit; ``coarse_scores``:
    the coarse hits' scores in rank order. ``fine`` keeps the fine order and scores; ``rrf``
    scores 1/(RRF_K + fine rank) + 1/(RRF_K + parent rank); ``product`` the fine score times
    the parent's score. Ties keep the fine order (a stable sort).
    """
    if rank_by == "fine":
        return list(fine)
    if rank_by == "rrf":
        scored = [(row_id, 1 / (RRF_K + rank) + 1 / (RRF_K + parents[row_id]))
                  for rank, (row_id, _) in enumerate(fine, start=1)]
    elif rank_by == "product":
        scored = [(row_id, score * coarse_scores[parents[row_id] - 1]) for row_id, score in fine]
    else:
        raise SearchError(f"within_rank must be one of {WITHIN_RANKS}, not {rank_by!r}")
    return sorted(scored, key=lambda item: -item[1])


def not_covered(ranked: Sequence[tuple[str, int, int]], skip_covered: float) -> list[int]:
    """Indices of ``ranked`` spans (doc_id, start, end; best first) that are kept when a span
    with at least ``skip_covered`` of its characters inside spans kept before it (same
    document) is skipped.

    Invariants: the first span is always kept; a span sharing no character with a kept
    span is always kept; an empty span is kept (it has no characters to be covered);
    order is preserved, so keeping the first k of a longer ranking equals ranking deeper.
    """
    kept: list[int] = []
    taken: dict[str, list[tuple[int, int]]] = {}
    for i, (doc_id, start, end) in enumerate(ranked):
        length = end - start
        inside = 0
        if length > 0:
            inside = sum(max(0, min(end, e) - max(start, s)) for s, e in taken.get(doc_id, ()))
        if length > 0 and inside >= skip_covered * length:
            continue
        kept.append(i)
        taken[doc_id] = merge_intervals([*taken.get(doc_id, []), (start, end)])
    return kept


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[tuple[int, float]]], k: int, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Fuse ranked lists of (id, score): each id scores sum(weight / (RRF_K + rank)); ties by id.
    ``weights``: one per ranking (default 1 each: plain RRF)."""
    fused: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings)):
        for rank, (row_id, _) in enumerate(ranking, start=1):
            fused[row_id] = fused.get(row_id, 0.0) + weight / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]


# -- grounding (seeds/sentence-chunking-adr.md) ---------------------------------------

DEFAULT_GROUNDING_THRESHOLD = 0.7  # the seed's, written for nomic-embed-text
# A model's own threshold, where one was measured (bench/bench_grounding.py; README "Search"):
# cosine similarities are not comparable across models. all-MiniLM-L6-v2: 0.6, the F1-best (0.596)
# rounded, over the 164 reference passages of eval/corpus.jsonl against their store with and
# without their document (at 0.6: precision 0.75, recall 0.86, F1 0.81, all strategies pooled; the
# seed's 0.7: 0.91, 0.59, 0.71: four passages in ten copied from a stored document "unsupported").
MODEL_GROUNDING_THRESHOLDS: dict[str, float] = {"all-MiniLM-L6-v2": 0.6}


def grounding_threshold_for(model_id: str) -> float:
    """The default threshold for vectors of ``model_id`` (``<model>[:<precision>]``): the model's
    measured one, else the seed's."""
    return MODEL_GROUNDING_THRESHOLDS.get(model_id.split(":", 1)[0], DEFAULT_GROUNDING_THRESHOLD)


@dataclass(frozen=True)
class Grounding:
    """The ADR's verdict for one strategy: grounded when the best evidence's cosine
    similarity to the claim reaches the threshold."""

    strategy: str
    grounded: bool
    score: float
    threshold: float
    evidence: list[Hit]

    def to_json(self) -> dict:
        return {"strategy": self.strategy, "verdict": "grounded" if self.grounded else "unsupported",
                "score": self.score, "threshold": self.threshold, "evidence": [h.to_json() for h in self.evidence]}


def grounding_verdict(scores: Sequence[float], threshold: float) -> tuple[bool, float]:
    """(grounded, best score): grounded iff the best similarity is >= threshold."""
    best = max(scores, default=0.0)
    return best >= threshold, best


def ground(
    index: SearchIndex, claim: str, *, threshold: float | None = None, k: int = 3,
    strategy: str | None = None,
) -> list[Grounding]:
    """Per strategy: the top-k evidence for ``claim`` by cosine similarity, and the verdict.
    ``threshold`` None: the index's model's (:func:`grounding_threshold_for`)."""
    if threshold is None:
        threshold = grounding_threshold_for(index.model_id)
    if not claim.strip():
        raise SearchError("the claim is empty (or only whitespace): there is nothing to ground")
    if not -1.0 <= threshold <= 1.0:
        raise SearchError(f"the grounding threshold is a cosine similarity, in [-1, 1]; not {threshold:g}")
    hits = index.search(claim, mode="vector", k=k, strategy=strategy)
    by_strategy: dict[str, list[Hit]] = {}
    for hit in hits:
        by_strategy.setdefault(hit.strategy, []).append(hit)
    results = []
    for name, evidence in by_strategy.items():
        grounded, best = grounding_verdict([h.score for h in evidence], threshold)
        results.append(Grounding(name, grounded, best, threshold, evidence))
    return results


def open_index(settings, *, vector_index: str = "exact") -> SearchIndex:
    """A SearchIndex over the settings' database, embedding queries with the settings' model."""
    from resources.embedding import EmbeddingModelResource

    resource = EmbeddingModelResource(
        model=settings.embedding_model, device=settings.embedding_device,
        batch_size=settings.embedding_batch_size, precision=settings.embedding_precision,
        batch_tokens=settings.embedding_batch_tokens, workers=settings.embedding_workers,
        max_workers=settings.embedding_max_workers,
    )
    return SearchIndex(
        settings.db_path, resource.model_id, embed=lambda texts: resource.get_embedder().embed(texts),
        vector_index=vector_index, lake=settings.store.lake(), configured=settings.configured_names(),
    )
