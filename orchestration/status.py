"""Read-only views of the store for ``chunkyard status`` and ``chunkyard sql``.

Nothing here writes or runs anything: every query goes through a read-only
connection, and a database that does not exist yet is reported, not created.
"""

from __future__ import annotations

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


def stored_status(con) -> list[FolderStatus]:
    """What is stored now (each document's current good parse), per documents folder and strategy,
    and which documents failed with what cause."""
    folders: dict[str, dict[str, Any]] = {}
    for root, status, n in con.execute(
        "SELECT coalesce(source_root, ''), status, count(*) FROM documents GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        folders.setdefault(root, {"documents": {}, "strategies": {}, "failed": []})["documents"][status] = n
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
        entry = folders.setdefault(root, {"documents": {}, "strategies": {}, "failed": []})
        entry["strategies"][strategy] = (int(docs), int(chunks), int(embeddings), int(max_tokens or 0))
    for root, doc_id, error in con.execute(
        "SELECT coalesce(source_root, ''), doc_id, error FROM documents WHERE status = 'error' ORDER BY ALL"
    ).fetchall():
        folders[root]["failed"].append((doc_id, bare_cause(doc_id, error or "")))
    return [FolderStatus(root, **values) for root, values in sorted(folders.items())]


def format_status(folders: Sequence[FolderStatus], db_path: str) -> str:
    if not folders:
        return f"database: {db_path}\nnothing stored yet (chunkyard run --docs FOLDER)"
    lines = [f"database: {db_path}"]
    for folder in folders:
        docs = ", ".join(f"{n} {status}" for status, n in sorted(folder.documents.items())) or "none"
        lines.append(f"\nfolder {folder.source_root or '(unknown)'}: {sum(folder.documents.values())} documents ({docs})")
        if folder.strategies:
            rows = [(name, *figures) for name, figures in sorted(folder.strategies.items())]
            table = format_table(["strategy", "documents", "chunks", "embeddings", "max tokens"], rows)
            lines += ["  " + line for line in table.splitlines()]
        if folder.failed:
            lines.append(f"  failed documents ({len(folder.failed)}):")
            lines += [f"    {doc_id}  {cause}" for doc_id, cause in folder.failed]
    return "\n".join(lines)


def cell(value: Any, max_cell: int | None = MAX_CELL) -> str:
    """One table cell on one line: control characters shown escaped, cut at ``max_cell`` characters."""
    text = "NULL" if value is None else str(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")
    return text if max_cell is None or len(text) <= max_cell else text[: max_cell - 1] + "…"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_cell: int | None = MAX_CELL) -> str:
    """A plain text table: a header, a rule, one line per row; numbers right-aligned, cells cut at ``max_cell``."""
    cells = [[cell(v, max_cell) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows if row[i] is not None) and bool(rows)
               for i in range(len(columns))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(list(columns)), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def run_sql(con, query: str, max_rows: int) -> str:
    """Run one read-only query; the result as a table (at most ``max_rows`` rows, and says so)."""
    relation = con.sql(query)
    if relation is None:  # a statement without a result (SET, PRAGMA ...)
        return "ok"
    columns = list(relation.columns)
    rows = relation.fetchmany(max_rows + 1)
    text = format_table(columns, rows[:max_rows])
    shown = min(len(rows), max_rows)
    more = " (more not shown; --max-rows N)" if len(rows) > max_rows else ""
    return f"{text}\n({shown} row{'s' if shown != 1 else ''}{more})"
