"""HeadingBlocks (seed §3.1): one content line of the sidecar is one basic block."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from typing import Sequence

from chunking.model import Block
from chunking.strategies.paragraph.model import (
    BLOCK_JOINER,
    CharMap,
    LIKELY_OVER_CHARS_PER_TOKEN,
    LINE_JOINER,
    Paragraph,
    Section,
    _Context,
    _is_table_line,
    _section,
    _strip_part_suffix,
)


def run(blocks: Sequence[Block], ctx: _Context) -> list[Section]:
    """HeadingBlocks: every non-empty content line is one basic block, in order.

    Heading identification is entirely the parser's; a level of 0 (preamble,
    missing) counts as 1, except on the document title's block
    (``is_title_block``), which keeps level 0 through to its chunks. Each block is measured here, once: as a whole, or line
    by line when it is likely over target_max (AnchorSplit needs its line counts
    then). "Likely" is only a cost guess, never a decision: a block counted whole
    and found over the cap has its lines counted by AnchorSplit. A one-line block
    proven over the cap by :meth:`_Context.over_limit_bound` is not counted at all.

    The lines are laid out in ``ctx.layout`` as merging joins them, so most counts
    (lines, blocks, merges, final chunks) are spans of one encoding of it.
    """
    limit = ctx.limits.target_max
    staged: list[tuple[Section, tuple[Paragraph, ...], bool]] = []
    layout: list[str] = []
    at = 0
    for i, block in enumerate(blocks):
        located = _located_lines(block, i, ctx.source)
        lines = [p.text for p in located]
        if not lines:
            continue
        heading = block.heading or ""
        template = Section(
            heading=heading,
            base_heading=_strip_part_suffix(heading),
            parent_headings=tuple(block.parent_headings or ()),
            # The document title keeps level 0 (shallower than any heading); any other
            # level 0 (preamble, missing) counts as 1.
            level=0 if block.is_title_block else block.level if block.level and block.level > 0 else 1,
            paragraphs=(),
            content="",
            tokens=0,
            pending=0,
            sources=(i,),
            line=i,
        )
        likely_over = len(block.content) > LIKELY_OVER_CHARS_PER_TOKEN * limit
        if likely_over and len(lines) == 1 and not _is_table_line(lines[0]):
            bound = ctx.over_limit_bound(lines[0], limit)
            if bound is not None:
                # Bound for R, which measures it itself: kept out of the layout.
                paragraphs = (located[0],)
                over = replace(template, paragraphs=paragraphs, content=lines[0], tokens=bound, over_cap=True)
                staged.append((over, paragraphs, False))
                continue
        if layout:
            layout.append(BLOCK_JOINER)
            at += len(BLOCK_JOINER)
        paragraphs = []
        for ln, para in zip(lines, located):
            # The substring test first: most lines are prose, and it spares a strip.
            paragraphs.append(replace(para, is_table="</table>" in ln and _is_table_line(ln), at=at))
            at += len(ln) + len(LINE_JOINER)
        at -= len(LINE_JOINER)
        layout.append(LINE_JOINER.join(lines))
        staged.append((template, tuple(paragraphs), likely_over and len(lines) > 1))
    ctx.layout = "".join(layout)
    out = []
    for template, paragraphs, count_lines in staged:
        if template.over_cap:
            out.append(template)
        else:
            out.append(_section(template, paragraphs, ctx, ctx.count_lines(paragraphs) if count_lines else None))
    return out


def _located_lines(block: Block, index: int, source: str) -> list[Paragraph]:
    """The block's non-blank content lines, each with its source position.

    A line is located exactly when the block's content lies verbatim at its
    ``char_start`` in ``source``; through a character map (:func:`_alignment_map`)
    when the content was derived from its source span (lines reflowed, markup
    rendered); otherwise every line gets the block's span as its region.
    """
    start, end = block.char_start, block.char_end
    exact = bool(source) and start is not None and source.startswith(block.content, start)
    positions = None if exact or not source or start is None or end is None else _alignment_map(block.content, source, start, end)
    charmap = CharMap(block.content, positions, start, end, source) if positions is not None else None
    region = (start, end) if not exact and start is not None and end is not None else None
    out, pos = [], 0
    for ln in block.content.split("\n"):
        if ln.strip():
            out.append(Paragraph(ln, src=start + pos if exact else -1, region=region, block=index,
                                 charmap=charmap, charmap_at=pos))
        pos += len(ln) + 1
    return out


# Word alignment (difflib) is quadratic in the worst case: larger derived blocks
# keep the block's span as their lines' region.
ALIGN_MAX_CHARS = 100_000
_WORD = re.compile(r"\w+")


def _alignment_map(content: str, source: str, start: int, end: int) -> list[int] | None:
    """Source position of each character of ``content``, derived from ``source[start:end]``.

    Exact when the two differ only in whitespace (lines a parser reflowed).
    Otherwise (markup, escapes or tables rendered differently) the words of
    both are aligned (longest matching runs, :class:`difflib.SequenceMatcher`): a
    character of an aligned word maps to its place in the source word; any
    other character maps to just after the last aligned word before it, so the
    map never runs backwards. None when nothing aligns or the block is larger
    than ``ALIGN_MAX_CHARS``.
    """
    exact = _whitespace_map(content, source, start, end)
    if exact is not None or len(content) > ALIGN_MAX_CHARS or end - start > 2 * ALIGN_MAX_CHARS:
        return exact
    ours = [(m.start(), m.group()) for m in _WORD.finditer(content)]
    theirs = [(m.start(), m.group()) for m in _WORD.finditer(source, start, end)]
    matcher = difflib.SequenceMatcher(None, [w for _, w in ours], [w for _, w in theirs], autojunk=False)
    anchors = [(ours[i + k][0], theirs[j + k][0], len(ours[i + k][1]))
               for i, j, n in matcher.get_matching_blocks() for k in range(n)]
    if not anchors:
        return None
    out: list[int] = []
    last, nxt = start, 0
    for pos in range(len(content)):
        while nxt < len(anchors) and anchors[nxt][0] + anchors[nxt][2] <= pos:
            last = anchors[nxt][1] + anchors[nxt][2]
            nxt += 1
        if nxt < len(anchors) and anchors[nxt][0] <= pos:
            out.append(anchors[nxt][1] + pos - anchors[nxt][0])
        else:
            out.append(last)
    return out


def _whitespace_map(content: str, source: str, start: int, end: int) -> list[int] | None:
    """Source position of each character of ``content`` when it equals ``source[start:end]``
    but for whitespace (a space maps to just after the character before it); else None."""
    out: list[int] = []
    pos, last = start, start
    for ch in content:
        if ch.isspace():
            out.append(last)
            continue
        while pos < end and source[pos].isspace():
            pos += 1
        if pos >= end or source[pos] != ch:
            return None
        out.append(pos)
        pos += 1
        last = pos
    return out
