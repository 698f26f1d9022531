"""The chunk viewer: one self-contained HTML page per document, strategies side by side.

:func:`render_viewer` is pure: (document text, chunks per strategy) -> HTML. Each
strategy's column is the whole parsed text cut into *segments* at every chunk
boundary of that strategy; a segment knows which chunks cover it, so a stretch
covered by two chunks (an overlap) is drawn hatched and a stretch covered by
none (whitespace between chunks, or text a strategy lost) is drawn plain.
Invariants a reader (and the tests) rely on: in every column the segments'
``data-start``/``data-end`` tile ``[0, len(text))`` in order, the segment texts
concatenate to the document text, and ``data-chunks`` lists exactly the chunks
whose ``[char_start, char_end)`` contains the segment. Hovering a segment shows
each covering chunk's index, token count, pages and heading path.

Every piece of document text and every name is HTML-escaped: documents are
hostile input. The page's only script is the constant below (hover highlight).

:func:`viewer_path` says where ``chunkyard show`` writes a document's page by
default, and :func:`write_viewer` writes it from the store (only on demand: no asset
writes pages); deleting a document from the store removes its page there.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from orchestration.run_report import bare_cause

PALETTE = ("#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6")


@dataclass(frozen=True)
class ViewChunk:
    """What the viewer needs of a chunk: where it is and what to say on hover."""

    index: int
    char_start: int
    char_end: int
    token_count: int
    page_start: int | None = None
    page_end: int | None = None
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    chunks: tuple[int, ...]  # indices into the strategy's chunk list, ascending


def segments(text_length: int, chunks: Sequence[ViewChunk]) -> list[Segment]:
    """Cut ``[0, text_length)`` at every chunk boundary; each piece lists the chunks covering it.

    Offsets are clipped to the text, empty chunks cover nothing. The pieces tile
    the range in order with no gaps and no empty piece (for a non-empty text).
    """
    spans = [
        (max(0, min(c.char_start, text_length)), max(0, min(c.char_end, text_length)), i)
        for i, c in enumerate(chunks)
    ]
    cuts = sorted({0, text_length, *(s for s, _, _ in spans), *(e for _, e, _ in spans)})
    pieces = []
    for start, end in zip(cuts, cuts[1:]):
        covering = tuple(i for s, e, i in spans if s <= start and end <= e and s < e)
        pieces.append(Segment(start, end, covering))
    return pieces


def hover_text(chunk: ViewChunk) -> str:
    pages = ""
    if chunk.page_start is not None:
        pages = (
            f", page {chunk.page_start + 1}"
            if chunk.page_end in (None, chunk.page_start)
            else f", pages {chunk.page_start + 1}-{chunk.page_end + 1}"
        )
    heading = f", heading: {' > '.join(chunk.heading_path)}" if chunk.heading_path else ""
    return (
        f"chunk {chunk.index}: {chunk.token_count} tokens, chars {chunk.char_start}-{chunk.char_end}{pages}{heading}"
    )


def _segment_html(text: str, segment: Segment, chunks: Sequence[ViewChunk]) -> str:
    body = html.escape(text[segment.start : segment.end], quote=True)
    covering = [chunks[i] for i in segment.chunks]
    if not covering:
        kind, style, title = "seg gap", "", "not in any chunk"
    elif len(covering) == 1:
        kind = "seg"
        style = f' style="background:{PALETTE[covering[0].index % len(PALETTE)]}"'
        title = hover_text(covering[0])
    else:
        kind, style = "seg overlap", ""
        title = "overlap of " + "; ".join(hover_text(c) for c in covering)
    ids = " ".join(str(c.index) for c in covering)
    return (
        f'<span class="{kind}" data-start="{segment.start}" data-end="{segment.end}" data-chunks="{ids}"'
        f'{style} title="{html.escape(title, quote=True)}">{body}</span>'
    )


def _column_html(strategy: str, text: str, chunks: Sequence[ViewChunk]) -> str:
    tokens = [c.token_count for c in chunks]
    overlap_chars = sum(s.end - s.start for s in segments(len(text), chunks) if len(s.chunks) > 1)
    summary = (
        f"{len(chunks)} chunks, tokens max {max(tokens)}, mean {sum(tokens) / len(tokens):.0f}, "
        f"{overlap_chars} chars overlapped"
        if chunks
        else "no chunks stored"
    )
    parts = []
    starts = {c.char_start: c.index for c in chunks}
    for segment in segments(len(text), chunks):
        if segment.start in starts and segment.chunks:
            parts.append(f'<b class="mark" data-chunk="{starts[segment.start]}">{starts[segment.start]}</b>')
        parts.append(_segment_html(text, segment, chunks))
    name = html.escape(strategy, quote=True)
    return (
        f'<section class="strategy" data-strategy="{name}">'
        f"<h2>{name}</h2><p class=\"summary\">{html.escape(summary)}</p>"
        f'<div class="text">{"".join(parts)}</div></section>'
    )


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#fafafa;color:#222}
header{padding:10px 16px;border-bottom:1px solid #ddd;background:#fff}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:0}
.columns{display:grid;grid-auto-flow:column;grid-auto-columns:minmax(320px,1fr);gap:10px;padding:10px;overflow-x:auto}
.strategy{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;min-width:0}
.summary{color:#555;margin:2px 0 8px;font-size:12px}
.text{white-space:pre-wrap;word-wrap:break-word;font:13px/1.5 ui-monospace,monospace;max-height:85vh;overflow:auto}
.seg{border-radius:2px} .gap{background:none;color:#999}
.overlap{background:repeating-linear-gradient(45deg,#ffadad 0 4px,#ffe0e0 4px 8px);outline:1px solid #e07070}
.mark{font:10px sans-serif;color:#fff;background:#555;border-radius:3px;padding:0 3px;margin-right:1px;user-select:none}
.hl{outline:2px solid #000}
"""

# Highlights every segment of the chunk under the pointer; reads only data-* attributes.
SCRIPT = """
document.addEventListener('mouseover',function(e){
  var s=e.target.closest('.seg');document.querySelectorAll('.hl').forEach(function(x){x.classList.remove('hl')});
  if(!s||!s.dataset.chunks)return;var col=s.closest('.strategy');var ids=s.dataset.chunks.split(' ');
  col.querySelectorAll('.seg').forEach(function(x){var c=x.dataset.chunks.split(' ');
    if(ids.some(function(i){return c.indexOf(i)>=0}))x.classList.add('hl')});
});
"""


def render_viewer(doc_id: str, text: str, chunks_by_strategy: dict[str, Sequence[ViewChunk]]) -> str:
    """The whole page: a header, then one column per strategy (in the mapping's order)."""
    columns = "".join(_column_html(name, text, chunks) for name, chunks in chunks_by_strategy.items())
    title = html.escape(doc_id, quote=True)
    legend = (
        f"{len(text)} characters; {len(chunks_by_strategy)} strategies. Colours alternate per chunk; "
        "hatched red = text in two or more chunks (overlap); grey = in no chunk. Hover for tokens, pages, headings."
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>chunkyard: {title}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{title}</h1><div>{html.escape(legend)}</div></header>"
        f'<main class="columns">{columns}</main><script>{SCRIPT}</script></body></html>\n'
    )


# --- where pages go, and writing one from the store ------------------------------


def safe_name(doc_id: str) -> str:
    """A file name for ``doc_id``: readable, one path component, distinct per id (hash suffix)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", doc_id).strip("._")[:80] or "document"
    return f"{readable}-{hashlib.sha256(doc_id.encode('utf-8')).hexdigest()[:8]}"


def viewer_path(db_path: str | Path, doc_id: str) -> Path:
    """Where ``chunkyard show DOC`` writes a document's page by default: ``<db dir>/viewer/<safe id>.html``."""
    return Path(db_path).resolve().parent / "viewer" / f"{safe_name(doc_id)}.html"


def load_view(store, doc_id: str, strategies: Iterable[str] | None = None) -> tuple[str, dict[str, list[ViewChunk]]]:
    """The stored parsed text of ``doc_id`` and its chunks per strategy (all stored ones by default).

    Raises LookupError when the document has no stored parse.
    """
    doc = store.load_parsed(doc_id)
    if doc is None:
        row = store.document(doc_id)
        if row is None:
            raise LookupError(f"{doc_id}: no such document stored")
        if row.get("status") == "error":
            cause = bare_cause(doc_id, row.get("error") or "")
            raise LookupError(f"{doc_id}: nothing to show: its current bytes did not parse ({cause})")
        raise LookupError(f"{doc_id}: nothing to show yet: its current bytes are read but not parsed "
                          f"(status {row.get('status')!r}; the next run parses them)")
    with store.connect(read_only=True) as con:
        rows = con.execute(
            """SELECT strategy, chunk_index, char_start, char_end, token_count, page_start, page_end, heading_path
               FROM chunks WHERE doc_id = ? ORDER BY strategy, chunk_index""",
            [doc_id],
        ).fetchall()
    stored: dict[str, list[ViewChunk]] = {}
    for strategy, index, start, end, tokens, page_start, page_end, heading in rows:
        stored.setdefault(strategy, []).append(
            ViewChunk(index, start, end, tokens, page_start, page_end, tuple(heading or ()))
        )
    wanted = list(strategies) if strategies is not None else sorted(stored)
    unknown = [s for s in wanted if s not in stored]
    if unknown:
        raise LookupError(
            f"{doc_id}: no chunks stored for {', '.join(unknown)}; stored: {', '.join(sorted(stored)) or 'none'}"
        )
    return doc.text, {name: stored[name] for name in wanted}


def write_viewer(store, doc_id: str, strategies: Iterable[str] | None = None, out: str | Path | None = None) -> Path:
    """Write ``doc_id``'s viewer page (default: :func:`viewer_path`) atomically; return its path."""
    text, chunks = load_view(store, doc_id, strategies)
    path = Path(out) if out is not None else viewer_path(store.path, doc_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(render_viewer(doc_id, text, chunks), encoding="utf-8")
    partial.replace(path)
    return path


def metadata_link(path: Path) -> str:
    """A ``file://`` URL for a page (what a partition's metadata shows)."""
    return path.resolve().as_uri()


__all__ = ["ViewChunk", "load_view", "metadata_link", "render_viewer", "segments", "viewer_path", "write_viewer"]
