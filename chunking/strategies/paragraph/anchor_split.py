"""AnchorSplit (seed §3.4): an over-cap block cut at its short lines (anchors)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

from chunking.strategies.paragraph.model import (
    LINE_JOINER,
    MAX_ANCHOR_CANDIDATE_LENGTH,
    Paragraph,
    Section,
    TABLE_MIN_LAST_RATIO,
    _Context,
    _at,
    _section,
    log,
)
from chunking.strategies.paragraph.table_row_split import _TableLimits, split_table


def run(section: Section, ctx: _Context, origin: Section | None = None) -> list[Section]:
    """AnchorSplit: cut a block over target_max at short-paragraph anchors.

    Candidates are the block's non-table lines of at most 100 characters after
    its first line; for ``k = max(ceil(T/ideal), ceil(T/max))`` sub-blocks the
    candidate nearest each ideal position ``i * T / k`` is chosen, promoted to the
    heading of the sub-block it starts, and the original heading joins that
    sub-block's parent path. Without candidates: :func:`_pack_without_anchor`.
    Sub-blocks still over the cap are split again; the anchors found then are
    siblings of the first ones (their parent path ends with the content line's
    heading, not with the anchor that headed the sub-block).
    """
    origin = origin or section
    lim = ctx.limits
    fits, tokens, pending = ctx.fits(section.tokens, section.pending, lambda: section.content, lim.target_max, _at(section.paragraphs))
    if fits:
        return [replace(section, tokens=tokens, pending=pending)]
    paragraphs = section.paragraphs
    if section.line_counts is not None:
        counts = list(section.line_counts)
    elif len(paragraphs) == 1 and pending == 0:
        counts = [tokens]
    else:
        counts = ctx.count_lines(paragraphs)
    total = sum(counts)
    k = max(math.ceil(total / lim.target_ideal), math.ceil(total / lim.target_max), 2)
    candidates, position = [], 0
    for i, (para, c) in enumerate(zip(paragraphs, counts)):
        if i > 0 and not para.is_table and 0 < len(para.text.strip()) <= MAX_ANCHOR_CANDIDATE_LENGTH:
            candidates.append((i, position))
        position += c
    if not candidates:
        # Warn once per content line; the same fallback inside its sub-blocks is detail.
        (log.warning if origin is section else log.debug)(
            "paragraph_semantic: document %r: block %s exceeds target_max=%d (~%d tokens) with no anchor "
            "line of at most %d chars; table first, then greedy packing, then fallback to recursive_character",
            ctx.doc_id, _block_name(section), lim.target_max, total, MAX_ANCHOR_CANDIDATE_LENGTH,
        )
        return _pack_without_anchor(section, paragraphs, counts, lim.target_max, ctx)

    chosen: list[int] = []
    pool = list(candidates)
    for i in range(1, k):
        if not pool:
            break
        ideal = i * total / k
        best = min(pool, key=lambda c: abs(c[1] - ideal))
        pool.remove(best)
        chosen.append(best[0])
    chosen.sort()
    log.debug("paragraph_semantic: anchor split of %r at lines %s", section.heading, chosen)

    subs: list[Section] = []
    bounds = [0, *chosen, len(paragraphs)]
    parents = (*origin.parent_headings, origin.base_heading) if origin.base_heading else origin.parent_headings
    for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if n == 0:
            identity: dict[str, Any] = {}
        else:
            anchor = paragraphs[lo].text.strip()
            identity = {"heading": anchor, "base_heading": anchor, "parent_headings": parents}
        subs.append(_section(section, paragraphs[lo:hi], ctx, counts[lo:hi], **identity))
    return [piece for sub in subs for piece in run(sub, ctx, origin)]


def _block_name(section: Section) -> str:
    """The block as a log names it: its heading, or where it is when it has none."""
    if section.heading:
        return repr(section.heading)
    # Text before the document's first heading (a plain-text file is all of it): an
    # empty name would leave the reader nothing to look for.
    return f"#{section.sources[0]} (text before any heading)" if section.sources else "(text before any heading)"


def _pack_without_anchor(
    section: Section, paragraphs: Sequence[Paragraph], counts: Sequence[int], cap: int, ctx: _Context
) -> list[Section]:
    """The no-anchor fallback: tables over the cap by rows, greedy packing, R for a long line."""
    lim = ctx.limits
    pieces: list[tuple[Paragraph, int | None]] = []
    for para, c in zip(paragraphs, counts):
        if para.is_table and c > cap:
            limits = _TableLimits(cap, min(lim.target_ideal, cap), max(int(cap * TABLE_MIN_LAST_RATIO), 1), cap)
            pieces.extend((replace(p, role=para.role), None) for p in split_table(para.text, ctx, limits, para))
        elif c > cap:
            # Ordinary text keeps R overlap: it is one content line's body (§3.7).
            pieces.extend(
                (para.cut(s.start, s.end, is_table=False), s.tokens) for s in ctx.recursive(para.text, cap, ctx.overlap)
            )
        else:
            pieces.append((para, c))
    texts_to_count = [p.text for p, c in pieces if c is None]
    fresh = iter(ctx.count_many(texts_to_count))
    sized = [(p, c if c is not None else next(fresh)) for p, c in pieces]

    groups: list[tuple[list[Paragraph], list[int]]] = []
    sep = ctx.joiner(LINE_JOINER)
    buf: list[Paragraph] = []
    buf_counts: list[int] = []
    running = 0
    for para, c in sized:
        addition = c + (sep if buf else 0)
        if buf and running + addition > cap:
            groups.append((buf, buf_counts))
            buf, buf_counts, running, addition = [], [], 0, c
        buf.append(para)
        buf_counts.append(c)
        running += addition
    if buf:
        groups.append((buf, buf_counts))
    return [_section(section, paras, ctx, cs) for paras, cs in groups]
