"""Embedding a chunk with its context: the document title and heading path prepended.

Only the text given to the embedding model changes; the stored chunk (text,
offsets) does not. The embedded text's sha256 is the embedding-cache key, so the
prefix is part of the key: a renamed heading or title re-embeds, nothing else does.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import PurePosixPath
from typing import Sequence

CONTEXT_SEPARATOR = " > "


def embedding_text(text: str, *, title: str = "", heading_path: Sequence[str] = ()) -> str:
    """``"Title > H1 > H2\\n\\n<text>"``; the text alone when there is no context.

    Empty parts are dropped, and a heading equal to the part before it (a document
    whose first heading is its title) is not repeated.
    """
    parts: list[str] = []
    for part in (title, *heading_path):
        part = " ".join(part.split())
        if part and (not parts or parts[-1] != part):
            parts.append(part)
    return f"{CONTEXT_SEPARATOR.join(parts)}\n\n{text}" if parts else text


def document_title(first_heading: str | None, source_path: str | None, doc_id: str) -> str:
    """The document's first level-1 heading, else its file name without extension."""
    if first_heading and first_heading.strip():
        return first_heading.strip()
    return PurePosixPath(source_path or doc_id).stem


def with_context(store, doc_id: str, strategy: str, rows: Sequence) -> list:
    """``rows`` (StoredChunk) with ``text`` replaced by the text to embed and ``text_sha256`` by its hash.

    The embeddings table then records the hash of what the model read (it equals the
    chunk's text_sha256 exactly when no context is prepended).
    """
    from search.engine import CHUNKS_RELATION

    with store.connect(read_only=True) as con:
        doc = con.execute("SELECT source_path FROM documents WHERE doc_id = ?", [doc_id]).fetchone()
        heading = con.execute(
            "SELECT heading FROM blocks WHERE doc_id = ? AND level = 1 ORDER BY block_index LIMIT 1", [doc_id]
        ).fetchone()
        paths = dict(con.execute(
            f"SELECT chunk_index, heading_path FROM {CHUNKS_RELATION} WHERE doc_id = ? AND strategy = ?",
            [doc_id, strategy],
        ).fetchall())
    title = document_title(heading[0] if heading else None, doc[0] if doc else None, doc_id)
    out = []
    for row in rows:
        text = embedding_text(row.text, title=title, heading_path=paths.get(row.chunk_index) or ())
        out.append(dataclasses.replace(row, text=text, text_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest()))
    return out
