"""LevelMerge (seed §3.6): deepest level first, Phase A, tail absorption, Phase B."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from chunking.strategies.paragraph.model import NONE, Section, _Context, _at, _join, _try_join


def _siblings(a: Section, b: Section) -> bool:
    """Same-level merge needs equal parent paths; an empty path (preamble) is compatible."""
    return a.parent_headings == b.parent_headings or not a.parent_headings or not b.parent_headings


def _on_path(shallow: Section, deep: Section) -> bool:
    """Cross-level absorption needs the shallow block's path to prefix the deep block's parents."""
    path = shallow.path
    if not path or not deep.parent_headings:
        return True
    return tuple(deep.parent_headings[: len(path)]) == path


def _tail_run(blocks: Sequence[Section], i: int, ctx: _Context) -> int:
    """End index of the run of small same-level, same-path, unfrozen blocks after ``blocks[i]``."""
    head, end, total = blocks[i], i + 1, 0
    while end < len(blocks):
        nxt = blocks[end]
        if nxt.level != head.level or nxt.role != NONE or not _siblings(head, nxt) or nxt.tokens >= ctx.limits.small_tail:
            break
        total += nxt.tokens
        end += 1
    return end if end > i + 1 and total < ctx.limits.small_tail else i + 1


def _phase_a(blocks: list[Section], level: int, ctx: _Context) -> tuple[list[Section], bool]:
    lim = ctx.limits
    out: list[Section] = []
    changed = False
    i = 0
    while i < len(blocks):
        cur = blocks[i]
        if cur.level != level or cur.role != NONE:
            out.append(cur)
            i += 1
            continue
        if cur.tokens >= lim.target_ideal:
            end = _tail_run(blocks, i, ctx)
            if end > i + 1:
                absorbed = cur
                for nxt in blocks[i + 1 : end]:
                    absorbed = _join(absorbed, nxt, ctx)
                fits, tokens, pending = ctx.fits(
                    absorbed.tokens, absorbed.pending, lambda: absorbed.content, lim.target_max, _at(absorbed.paragraphs)
                )
                if fits:
                    out.append(replace(absorbed, tokens=tokens, pending=pending))
                    i, changed = end, True
                    continue
            out.append(cur)
            i += 1
            continue
        i, joined = _join_a_neighbour(
            blocks, i, out, ctx,
            takes_next=lambda nxt: nxt.level == level and _siblings(cur, nxt),
            joins_previous=lambda prev: prev.level == level and _siblings(prev, cur),
        )
        changed = changed or joined
    return out, changed


def _phase_b(blocks: list[Section], level: int, ctx: _Context) -> tuple[list[Section], bool]:
    lim = ctx.limits
    out: list[Section] = []
    changed = False
    i = 0
    while i < len(blocks):
        cur = blocks[i]
        if cur.level != level or cur.role != NONE or cur.tokens >= lim.target_ideal:
            out.append(cur)
            i += 1
            continue
        i, joined = _join_a_neighbour(
            blocks, i, out, ctx,
            takes_next=lambda nxt: nxt.level > level and _on_path(cur, nxt),
            joins_previous=lambda prev: prev.level < level and _on_path(prev, cur),
        )
        changed = changed or joined
    return out, changed


def _join_a_neighbour(
    blocks: list[Section],
    i: int,
    out: list[Section],
    ctx: _Context,
    takes_next: Callable[[Section], bool],
    joins_previous: Callable[[Section], bool],
) -> tuple[int, bool]:
    """The step both LevelMerge phases share for a small ``blocks[i]``: join the next
    block into it, else join it into the last block out (itself below target_ideal),
    else keep it. Neither neighbour may be a split-table part, and a join is
    committed only if it fits target_max. Returns the next index and whether it joined."""
    cur, cap = blocks[i], ctx.limits.target_max
    if i + 1 < len(blocks) and blocks[i + 1].role == NONE and takes_next(blocks[i + 1]):
        joined = _try_join(cur, blocks[i + 1], ctx, cap)
        if joined is not None:
            out.append(joined)
            return i + 2, True
    if out and out[-1].role == NONE and out[-1].tokens < ctx.limits.target_ideal and joins_previous(out[-1]):
        joined = _try_join(out[-1], cur, ctx, cap)
        if joined is not None:
            out[-1] = joined
            return i + 1, True
    out.append(cur)
    return i + 1, False


def run(sections: Sequence[Section], ctx: _Context) -> list[Section]:
    """LevelMerge: merge small blocks, deepest level first, without crossing topics.

    Per level: Phase A merges a block below target_ideal with its next (or into
    its previous, itself below target_ideal) same-level block of the same parent
    path; a block at target_ideal absorbs in one go the run of small (each below
    small_tail) same-level, same-path blocks after it when they total below
    small_tail. Phase B lets a shallow block
    absorb a deeper one only along its own path. Split-table blocks (``first``,
    ``middle``, ``last``) never take part. Every merge is committed only when its
    joined text fits target_max; the merged block keeps the left block's identity.
    """
    result = list(sections)
    for level in sorted({s.level for s in result}, reverse=True):
        for phase in (_phase_a, _phase_b):
            changed = True
            while changed:
                result, changed = phase(result, level, ctx)
    return result
