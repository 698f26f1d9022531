"""Read-only views of the store for ``chunkyard status`` and ``chunkyard sql``.

Nothing here writes or runs anything: every query goes through a read-only
connection, and a database that does not exist yet is reported, not created.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

from orchestration.run_report import bare_cause

MAX_CELL = 60


@dataclass(frozen=True)
class FolderStatus:
    source_root: str
    documents: dict[str, int]  # status -> count
    # strategy -> (documents with chunks, chunks, embeddings, max tokens)
    strategies: dict[str, tuple[int, int, int, int]]
    failed: list[tuple[str, str]]  # (doc_id, cause without the file name)
    # Stored chunks that are not current (the current_* views, search and the checks leave them
    # out): a good parse's rows kept while the document's current bytes failed or are not parsed
    # yet, or a strategy's rows of older bytes. The documents holding them, and those chunks.
    kept_documents: int = 0
    kept_chunks: int = 0


def stored_status(con) -> list[FolderStatus]:
    """What is stored now (each document's current good parse), per documents folder and strategy,
    and which documents failed with what cause."""
    folders: dict[str, dict[str, Any]] = {}

    def folder(root: str) -> dict[str, Any]:
        return folders.setdefault(
            root, {"documents": {}, "strategies": {}, "failed": [], "kept_documents": 0, "kept_chunks": 0})

    # Per folder, from the per-document rows: documents by status, the failed ones, the kept chunks.
    for row in document_rows(con):
        entry = folder(row.source_root)
        entry["documents"][row.status] = entry["documents"].get(row.status, 0) + 1
        if row.status == "error":
            entry["failed"].append((row.doc_id, row.cause))
        if row.kept_chunks:
            entry["kept_documents"] += 1
            entry["kept_chunks"] += row.kept_chunks
    # Parsed documents a strategy's chunking or embedding failed on, for the bytes they still have
    # (none recorded in a file of an older schema not yet opened for writing).
    from resources.store import has_table  # here: this module stays light for the CLI's import

    for table, stage in (("strategy_failures", "chunk"), ("embedding_failures", "embed")):
        if not has_table(con, table):
            continue
        for root, doc_id, strategy, error in con.execute(
            f"""
            SELECT coalesce(d.source_root, ''), f.doc_id, f.strategy, f.error
            FROM {table} f JOIN documents d ON d.doc_id = f.doc_id AND d.sha256 = f.doc_sha256
            WHERE d.status = 'parsed' ORDER BY ALL
            """
        ).fetchall():
            folder(root)["failed"].append((doc_id, f"[{stage} {strategy}] {bare_cause(doc_id, error)}"))
    for root, strategy, docs, chunks, embeddings, max_tokens in con.execute(
        """
        WITH c AS (SELECT doc_id, strategy, count(*) AS chunks, max(token_count) AS max_tokens
                   FROM current_chunks GROUP BY ALL),
             e AS (SELECT doc_id, strategy, count(*) AS embeddings FROM current_embeddings GROUP BY ALL)
        SELECT coalesce(d.source_root, ''), c.strategy, count(*), sum(c.chunks),
               coalesce(sum(e.embeddings), 0), max(c.max_tokens)
        FROM c JOIN documents d USING (doc_id) LEFT JOIN e USING (doc_id, strategy)
        GROUP BY ALL ORDER BY ALL
        """
    ).fetchall():
        folder(root)["strategies"][strategy] = (int(docs), int(chunks), int(embeddings), int(max_tokens or 0))
    return [FolderStatus(root, **values) for root, values in sorted(folders.items())]


@dataclass(frozen=True)
class DocumentRow:
    source_root: str
    doc_id: str
    status: str
    strategies_with_chunks: int
    chunks: int  # current chunks, all strategies
    kept_chunks: int  # stored chunks that are not current (kept from an earlier parse)
    cause: str  # why it failed ("" unless its status is 'error')


def document_rows(con) -> list[DocumentRow]:
    """Every stored document: its status, its current chunks, and the chunks kept from an earlier parse."""
    rows = con.execute(
        """
        WITH everything AS (SELECT doc_id, count(*) AS n FROM chunks GROUP BY ALL),
             current AS (SELECT doc_id, count(*) AS n, count(DISTINCT strategy) AS strategies
                         FROM current_chunks GROUP BY ALL)
        SELECT coalesce(d.source_root, ''), d.doc_id, d.status, coalesce(c.strategies, 0), coalesce(c.n, 0),
               coalesce(e.n, 0) - coalesce(c.n, 0), coalesce(d.error, '')
        FROM documents d LEFT JOIN everything e USING (doc_id) LEFT JOIN current c USING (doc_id)
        ORDER BY ALL
        """
    ).fetchall()
    return [DocumentRow(root, doc_id, status, int(strategies), int(chunks), int(kept),
                        bare_cause(doc_id, error) if status == "error" else "")
            for root, doc_id, status, strategies, chunks, kept, error in rows]


def format_documents(rows: Sequence[DocumentRow], location: str) -> str:
    """One line per stored document (the ids ``chunkyard show`` and ``search --doc`` take)."""
    if not rows:
        return f"{location}\nnothing stored yet (chunkyard run --docs FOLDER)"
    table = format_table(
        ["document", "status", "strategies", "chunks", "kept, not current", "cause"],
        [(r.doc_id, r.status, r.strategies_with_chunks, r.chunks, r.kept_chunks, r.cause) for r in rows], max_cell=None)
    return f"{location}\n{table}"


def format_status(folders: Sequence[FolderStatus], location: str, configured: Sequence[str] | None = None) -> str:
    """``location``: the store's line (``ChunkStore.location()``: the database file, or the lake).
    ``configured``: the strategies and variants of the configuration; a stored one not among them
    is marked (its rows stay until ``chunkyard run --prune``)."""
    if not folders:
        return f"{location}\nnothing stored yet (chunkyard run --docs FOLDER)"
    lines = [location]
    for folder in folders:
        docs = ", ".join(f"{n} {status}" for status, n in sorted(folder.documents.items())) or "none"
        lines.append(f"\nfolder {folder.source_root or '(unknown)'}: {sum(folder.documents.values())} documents ({docs})")
        if folder.strategies:
            unconfigured = sorted(set(folder.strategies) - set(configured)) if configured is not None else []
            rows = [(name + (" (not configured)" if name in unconfigured else ""), *figures)
                    for name, figures in sorted(folder.strategies.items())]
            table = format_table(["strategy", "documents", "chunks", "embeddings", "max tokens"], rows)
            lines += ["  " + line for line in table.splitlines()]
            if unconfigured:
                lines.append(f"  not in the configuration, kept from an earlier one: {', '.join(unconfigured)} "
                             f"(search names them only with --strategy; `chunkyard run --prune` removes them)")
        if folder.failed:
            lines.append(f"  failed documents ({len({doc_id for doc_id, _ in folder.failed})}; one line per failure):")
            lines += [f"    {doc_id}  {cause}" for doc_id, cause in folder.failed]
        if folder.kept_documents:
            lines.append(f"  kept from an earlier good parse, not current (not counted above, not searched): "
                         f"{folder.kept_chunks} chunks of {folder.kept_documents} document(s) "
                         f"(chunkyard status --documents)")
    return "\n".join(lines)


def cell(value: Any, max_cell: int | None = MAX_CELL, null: str = "NULL") -> str:
    """One table cell on one line: control characters shown escaped, cut at ``max_cell`` characters."""
    text = null if value is None else str(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")
    return text if max_cell is None or len(text) <= max_cell else text[: max_cell - 1] + "…"


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and fullwidth characters two, combining marks none
    (a CJK document id padded by ``len`` pushed the next columns out of line)."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_cell: int | None = MAX_CELL,
                 null: str = "NULL") -> str:
    """A plain text table: a header, a rule, one line per row; numbers right-aligned, cells cut at ``max_cell``,
    None shown as ``null``."""
    cells = [[cell(v, max_cell, null) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows if row[i] is not None) and bool(rows)
               for i in range(len(columns))]
    widths = [max([display_width(c)] + [display_width(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def pad(value: str, width: int, right: bool) -> str:
        fill = " " * (width - display_width(value))
        return fill + value if right else value + fill

    def line(values: Sequence[str]) -> str:
        return "  ".join(pad(v, w, num) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(list(columns)), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def run_sql(con, query: str, max_rows: int, max_cell: int | None = MAX_CELL) -> str:
    """Run one read-only query; the result as a table (at most ``max_rows`` rows, and says so;
    cells cut at ``max_cell`` characters, None: whole)."""
    relation = con.sql(query)
    if relation is None:  # a statement without a result (SET, PRAGMA ...)
        return "ok"
    columns = list(relation.columns)
    rows = relation.fetchmany(max_rows + 1)
    text = format_table(columns, rows[:max_rows], max_cell)
    shown = min(len(rows), max_rows)
    more = " (more not shown; --max-rows N)" if len(rows) > max_rows else ""
    cut = any(len(cell(v, None)) > max_cell for row in rows[:max_rows] for v in row) if max_cell else False
    return f"{text}\n({shown} row{'s' if shown != 1 else ''}{more}{'; long cells cut: --full' if cut else ''})"


# --- whole-pipeline cost (the stage_costs table, written by the assets: assets/costs.py) ----------

COST_COLUMNS = ["stage", "documents", "total s", "s/doc median", "s/doc max", "store s", "model s"]
SLOWER = 1.5  # a stage whose s/doc median is at least this times the previous runs' is marked


@dataclass(frozen=True)
class StageSummary:
    stage: str  # stage_label: 'parse', 'chunk recursive', ...
    documents: int
    total: float
    median: float  # of the documents' seconds
    max: float
    store: float
    model: float | None  # embed stages only

    def row(self) -> tuple:
        return (self.stage, self.documents, round(self.total, 2), round(self.median, 3), round(self.max, 3),
                round(self.store, 2), None if self.model is None else round(self.model, 2))


def _stage_order(stage: str, strategy: str) -> tuple[int, str]:
    from assets.costs import STAGES

    return (STAGES.index(stage) if stage in STAGES else len(STAGES), strategy)


def ingest_costs(con, ingest_id: str) -> list[StageSummary]:
    """Per stage, over the documents of one ingest (a document run twice in it, e.g. re-run alone
    after failing in a batch, counts once with both runs' seconds), in pipeline order."""
    from assets.costs import stage_label

    rows = con.execute(
        """
        WITH per_doc AS (
            SELECT stage, strategy, doc_id, sum(seconds) AS seconds, sum(store_seconds) AS store_seconds,
                   sum(model_seconds) AS model_seconds
            FROM stage_costs WHERE ingest_id = ? GROUP BY ALL)
        SELECT stage, strategy, count(*), sum(seconds), median(seconds), max(seconds), sum(store_seconds),
               sum(model_seconds)
        FROM per_doc GROUP BY stage, strategy
        """,
        [ingest_id],
    ).fetchall()
    rows.sort(key=lambda r: _stage_order(r[0], r[1]))
    return [StageSummary(stage_label(stage, strategy), int(n), total, median, high, store, model)
            for stage, strategy, n, total, median, high, store, model in rows]


def format_costs(summaries: Sequence[StageSummary]) -> str:
    """The cost table `chunkyard run` prints at its end: one line per stage."""
    return format_table(COST_COLUMNS, [s.row() for s in summaries], null="-")


def recent_ingests(con, limit: int) -> list[tuple[str, Any, int]]:
    """(ingest_id, first recorded_at, documents) of the latest ``limit`` ingests that recorded costs, newest first."""
    return con.execute(
        """
        SELECT ingest_id, min(recorded_at) AS started, count(DISTINCT doc_id)
        FROM stage_costs GROUP BY ingest_id ORDER BY started DESC LIMIT ?
        """,
        [limit],
    ).fetchall()


def cost_comparison(con, previous: int = 5) -> str:
    """The latest ingest's cost per stage beside the median of the ``previous`` ingests before it.

    Compared per document (s/doc median), so ingests of different sizes compare; ``ratio`` is
    latest / previous, and a stage at least ``SLOWER`` times slower is marked.
    """
    ingests = recent_ingests(con, previous + 1)
    if not ingests:
        return "no stage costs recorded yet: `chunkyard run` records them"
    latest_id, started, docs = ingests[0]
    latest = ingest_costs(con, latest_id)
    before: dict[str, list[float]] = {}
    for ingest_id, _, _ in ingests[1:]:
        for summary in ingest_costs(con, ingest_id):
            before.setdefault(summary.stage, []).append(summary.median)
    rows = []
    for s in latest:
        earlier = sorted(before.get(s.stage, []))
        reference = earlier[len(earlier) // 2] if earlier else None
        ratio = round(s.median / reference, 2) if reference else None
        mark = "slower" if ratio is not None and ratio >= SLOWER else ""
        rows.append((s.stage, s.documents, round(s.total, 2), round(s.median, 3),
                     None if reference is None else round(reference, 3), ratio, mark))
    header = (f"latest ingest {latest_id[:8]} ({started:%Y-%m-%d %H:%M} UTC, {docs} document(s)) against the median "
              f"of the {len(ingests) - 1} ingest(s) before it (s/doc medians; ratio = latest / before)")
    table = format_table(["stage", "documents", "total s", "s/doc median", "before", "ratio", "flag"], rows, null="-")
    return header + "\n" + table
