"""HeadingBlocks (seed §3.1): one content line of the sidecar is one basic block."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from chunking.model import Block
from chunking.strategies.paragraph.model import (
    BLOCK_JOINER,
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
        lines = [ln for ln in block.content.split("\n") if ln.strip()]
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
                paragraphs = (Paragraph(lines[0]),)
                over = replace(template, paragraphs=paragraphs, content=lines[0], tokens=bound, over_cap=True)
                staged.append((over, paragraphs, False))
                continue
        if layout:
            layout.append(BLOCK_JOINER)
            at += len(BLOCK_JOINER)
        paragraphs = []
        for ln in lines:
            # The substring test first: most lines are prose, and it spares a strip.
            paragraphs.append(Paragraph(ln, "</table>" in ln and _is_table_line(ln), at=at))
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
