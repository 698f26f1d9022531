"""HeadingGlue (seed §3.5): a body-less heading glued forward into its first deeper child."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from chunking.strategies.paragraph.anchor_split import _pack_without_anchor
from chunking.strategies.paragraph.model import (
    BLOCK_JOINER,
    FIRST,
    NONE,
    Section,
    _Context,
    _at,
    _join,
    _lines_of,
    _section,
    _source_of,
    _try_join,
    log,
)


def run(sections: Sequence[Section], ctx: _Context) -> list[Section]:
    """HeadingGlue: a heading-only block is glued forward into a strictly deeper child.

    The child must be ``none`` or ``first`` (the glued block then stays ``first``);
    the bond keeps the shallow block's heading, level and parents. A chain of
    heading-only blocks collapses until the first block with body. A heading-only
    block followed by a peer or a shallower block is left to LevelMerge.
    """
    out: list[Section] = []
    i, n = 0, len(sections)
    while i < n:
        head = sections[i]
        if not (head.heading_only and head.role == NONE):
            out.append(head)
            i += 1
            continue
        chain = [head]
        j = i + 1
        while (
            j < n
            and chain[-1].heading_only
            and sections[j].level > chain[-1].level
            and sections[j].role in (NONE, FIRST)
        ):
            chain.append(sections[j])
            j += 1
        if len(chain) == 1:
            out.append(head)
        else:
            out.extend(_bond(chain, ctx))
        i = j
    return out


def _bond(chain: Sequence[Section], ctx: _Context) -> list[Section]:
    """Glue ``chain`` (heading-only blocks, then their first child) into one block.

    Over the cap, the heading lines are peeled off, the child's body is packed at
    the full cap, and the headings go back onto its first piece, which alone is
    re-split smaller when it cannot hold them. A heading prefix that alone fills
    the cap is split with the rest (the cap wins over heading integrity).
    """
    cap = ctx.limits.target_max
    prefix = chain[0]
    for sec in chain[1:-1]:
        prefix = _join(prefix, sec, ctx)
    child = chain[-1]
    whole = _join(prefix, child, ctx)
    fits, tokens, pending = ctx.fits(whole.tokens, whole.pending, lambda: whole.content, cap, _at(whole.paragraphs))
    if fits:
        return [replace(whole, tokens=tokens, pending=pending, parts=())]
    log.debug("paragraph_semantic: glued heading %r over the cap; re-splitting its body", prefix.heading)
    prefix_tokens = ctx.count_at(prefix.content + BLOCK_JOINER, _at(prefix.paragraphs))
    if prefix_tokens >= cap:
        # Each piece lists the blocks it holds (a piece of the heading alone is not built from
        # the child, nor one of the body from the heading), as any piece of a split section.
        return [
            _section(prefix, _lines_of(whole.paragraphs, whole.content, s.start, s.end), ctx,
                     sources=_source_of(whole.paragraphs, whole.content, s.start, s.end)[1] or whole.sources)
            for s in ctx.recursive(whole.content, cap, ctx.overlap)
        ]
    counts = ctx.count_lines(child.paragraphs)
    body = _pack_without_anchor(child, child.paragraphs, counts, cap, ctx)
    first = body[0]
    glued = _try_join(prefix, first, ctx, cap)
    if glued is None:
        first_counts = ctx.count_lines(first.paragraphs)
        body = _pack_without_anchor(first, first.paragraphs, first_counts, cap - prefix_tokens, ctx) + body[1:]
        glued = _join(prefix, body[0], ctx)
    return [replace(glued, parts=()), *body[1:]]
