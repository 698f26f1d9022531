"""TableBridge (seed §3.3.2): text between two split tables of one line, copied to both sides by budget."""

from __future__ import annotations

from typing import Sequence

from chunking.strategies.paragraph.model import LINE_JOINER, Paragraph, _Context, _lines_of, log


def _head_within(text: str, tokens: list[int], budget: int, ctx: _Context) -> str:
    """The longest prefix of ``text`` of at most ``budget`` tokens, cut on a character."""
    if budget <= 0:
        return ""
    guess = ctx.tokenizer.decode(tokens[:budget])
    if guess and text.startswith(guess) and ctx.count(guess) <= budget:
        return guess
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ctx.count(text[:mid]) <= budget else (lo, mid - 1)
    return text[:lo]


def _tail_within(text: str, tokens: list[int], budget: int, ctx: _Context) -> str:
    if budget <= 0:
        return ""
    guess = ctx.tokenizer.decode(tokens[-budget:])
    if guess and text.endswith(guess) and ctx.count(guess) <= budget:
        return guess
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ctx.count(text[mid:]) <= budget else (mid + 1, hi)
    return text[lo:]


def _snap_head(text: str, head: str) -> str:
    """``head`` cut back to its last whitespace when the cut falls inside a word."""
    if len(head) < len(text) and head and not head[-1].isspace() and not text[len(head)].isspace():
        at = max(head.rfind(" "), head.rfind("\n"))
        return head[:at] if at > 0 else head
    return head


def _snap_tail(text: str, tail: str) -> str:
    """``tail`` cut forward to its first whitespace when the cut falls inside a word."""
    start = len(text) - len(tail)
    if 0 < start and tail and not tail[0].isspace() and not text[start - 1].isspace():
        at = min((i for i in (tail.find(" "), tail.find("\n")) if i >= 0), default=-1)
        return tail[at + 1 :] if 0 <= at < len(tail) - 1 else tail
    return tail


def run(
    last_slice: Paragraph, bridge: Sequence[Paragraph], next_first: Paragraph, ctx: _Context
) -> tuple[list[Paragraph], list[Paragraph], list[Paragraph]]:
    """TableBridge: share the text between two split tables with both of them.

    Returns ``(left, middle, right)``: the left table's last slice with the head
    of the bridge, a standalone middle chunk (the whole bridge, when it does not
    fit both sides), and the tail of the bridge to put before the right table's
    first slice. Each side's budget is ``min(overlap, room beside its slice,
    N / 2)``; a bridge within both budgets goes whole to both sides. The middle
    chunk overlaps each side by up to ``overlap`` tokens, which covers the whole
    prefix and suffix: it carries the complete bridge, never table text.
    """
    if ctx.overlap <= 0 or not bridge or any(p.is_table for p in bridge):
        return [last_slice, *bridge], [], []
    text = LINE_JOINER.join(p.text for p in bridge)
    tokens = ctx.tokenizer.encode(text)
    sep = ctx.joiner(LINE_JOINER)
    cap = ctx.limits.target_max
    prev_budget = max(min(ctx.overlap, cap - ctx.count(last_slice.text) - sep, cap // 2), 0)
    next_budget = max(min(ctx.overlap, cap - ctx.count(next_first.text) - sep, cap // 2), 0)
    log.debug("paragraph_semantic: bridge of %d tokens, budgets %d / %d", len(tokens), prev_budget, next_budget)
    if len(tokens) <= prev_budget and len(tokens) <= next_budget:
        return [last_slice, *bridge], [], list(bridge)
    prefix = _snap_head(text, _head_within(text, tokens, prev_budget, ctx))
    suffix = _snap_tail(text, _tail_within(text, tokens, next_budget, ctx))
    # Both are copies of the bridge's own text: its lines keep their source positions.
    head = _lines_of(bridge, text, 0, len(prefix))
    tail = _lines_of(bridge, text, len(text) - len(suffix), len(text))
    return [last_slice, *head], list(bridge), tail
