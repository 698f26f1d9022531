"""TableRowSplit (seed §3.2, §3.3.1): oversized tables cut on row boundaries, with table roles."""

from __future__ import annotations

import bisect
import itertools
import json
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from chunking.strategies.paragraph import header_recovery, table_bridge
from chunking.strategies.paragraph.model import (
    FIRST,
    LAST,
    MIDDLE,
    NONE,
    Paragraph,
    Section,
    _Context,
    _section,
    log,
)
from chunking.strategies.paragraph.table_markup import (
    _TABLE_TAG,
    _TableHeader,
    _html_body,
    _html_rows,
    _json_row_spans,
    _table_format,
)


@dataclass(frozen=True)
class _TableLimits:
    slice_max: int  # a slice of several rows must fit this
    slice_ideal: int
    last_min: int  # a smaller last slice is swallowed back when it fits
    row_max: int  # a single-row slice (with its header) must fit this, else the table degrades


class _RowTable:
    """A table with a row structure: serialises any run of units as a legal ``<table>``.

    A unit is a run of rows that is never cut: one row, or a leading header with
    the first row after it.
    """

    def __init__(self, attrs: str, fmt: str, units: list[list[Any]], header: _TableHeader | None,
                 prefix: str = "", suffix: str = "", unit_spans: Sequence[tuple[int, int]] = (),
                 length: int = 0) -> None:
        self.attrs, self.fmt, self.units, self.header = attrs, fmt, units, header
        self.prefix, self.suffix = prefix, suffix
        # Where each unit's rows lie in the table's line (provenance only), and the line's length.
        self.unit_spans, self.length = list(unit_spans), length

    def source_span(self, lo: int, hi: int, n_units: int) -> tuple[int, int] | None:
        """The characters of the table's line that units ``lo:hi`` come from.

        The first slice starts at the line's start (its tag and lead-in), the last
        ends at its end; an injected header is a copy and adds nothing.
        """
        if len(self.unit_spans) != n_units:
            return None
        start = 0 if lo == 0 else self.unit_spans[lo][0]
        end = self.length if hi == n_units else self.unit_spans[hi - 1][1]
        return start, end

    def unit_text(self, unit: list[Any]) -> str:
        if self.fmt == "json":
            return ", ".join(json.dumps(r, ensure_ascii=False) for r in unit)
        return "".join(r.html for r in unit)

    def header_text(self) -> str:
        return self.header.text if self.header else ""

    def render(self, lo: int, hi: int, n_units: int) -> str:
        rows = [r for unit in self.units[lo:hi] for r in unit]
        first, last = lo == 0, hi == n_units
        if self.fmt == "json":
            if not first and self.header and list(rows[: len(self.header.rows)]) != list(self.header.rows):
                rows = [*self.header.rows, *rows]
            body = json.dumps(rows, ensure_ascii=False)
        else:
            body = _html_body(rows)
            # A slice that already has <thead> rows (a cut inside the header) is not given a second one.
            if not first and self.header and not any(r.section == "thead" for r in rows):
                body = self.header.text + body
            body = (self.prefix if first else "") + body + (self.suffix if last else "")
        return f"<table{self.attrs}>{body}</table>"


def _row_table(text: str, ctx: _Context) -> _RowTable | None:
    """The row structure of a ``<table>`` line, or None when it has none (R handles it)."""
    match = _TABLE_TAG.match(text.strip())
    if not match:
        return None
    attrs, body = match.group("attrs") or "", match.group("body")
    body_at = len(text) - len(text.lstrip()) + match.start("body")
    fmt = _table_format(attrs, body)
    if fmt is None:
        return None
    header = header_recovery.run(attrs, fmt, ctx)
    if fmt == "json":
        try:
            rows = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(rows, list) or len(rows) < 2:
            return None
        lead = len(header.rows) if header and list(rows[: len(header.rows)]) == list(header.rows) else 0
        units = [rows[: lead + 1]] + [[r] for r in rows[lead + 1 :]] if lead else [[r] for r in rows]
        spans = [(body_at + a, body_at + b) for a, b in (_json_row_spans(body) or ())]
        unit_spans = _unit_spans(spans, [len(u) for u in units]) if len(spans) == len(rows) else ()
        return _RowTable(attrs, fmt, units, header, unit_spans=unit_spans, length=len(text)) if len(units) > 1 else None
    parsed = _html_rows(body)
    if parsed is None:
        return None
    prefix, rows, suffix = parsed
    lead = 0
    while lead < len(rows) and rows[lead].section == "thead":
        lead += 1
    units = [rows[: lead + 1]] + [[r] for r in rows[lead + 1 :]] if lead else [[r] for r in rows]
    spans = [(body_at + r.span[0], body_at + r.span[1]) for r in rows]
    unit_spans = _unit_spans(spans, [len(u) for u in units])
    return _RowTable(attrs, fmt, units, header, prefix, suffix, unit_spans, len(text)) if len(units) > 1 else None


def _unit_spans(row_spans: Sequence[tuple[int, int]], sizes: Sequence[int]) -> list[tuple[int, int]]:
    """The span of each unit (a run of ``sizes[i]`` consecutive rows), from its rows' spans.

    A unit's span runs on to the next unit's start, so the separators between
    rows (``, ``, section tags) belong to the slice before them: slices tile the table.
    """
    out, at = [], 0
    for size in sizes:
        out.append((row_spans[at][0], row_spans[at + size - 1][1]))
        at += size
    return [(a, nxt[0]) for (a, _), nxt in zip(out, out[1:])] + out[-1:]


def _balanced_cuts(counts: Sequence[int], ideal: int, cap: int) -> list[tuple[int, int]]:
    """Cut units into ``k = max(ceil(T/ideal), ceil(T/cap))`` runs, each cut nearest ``j * T / k``.

    Every run holds at least one unit (``k`` is at most the number of units).
    """
    n, total = len(counts), sum(counts)
    k = min(max(math.ceil(total / max(ideal, 1)), math.ceil(total / max(cap, 1)), 1), n)
    before = [0, *itertools.accumulate(counts)]  # before[c] = tokens of the first c units
    cuts = [0]
    for j in range(1, k):
        target = total * j / k
        lo, hi = cuts[-1] + 1, n - (k - j)
        at = bisect.bisect_left(before, target)
        options = [min(max(c, lo), hi) for c in (at - 1, at)]
        cuts.append(min(options, key=lambda c: abs(before[c] - target)))
    cuts.append(n)
    return list(zip(cuts, cuts[1:]))


def _slice_table(table: _RowTable, ctx: _Context, limits: _TableLimits) -> list[tuple[str, int, int]] | None:
    """Row slices of ``table`` within the limits as ``(text, first unit, end unit)``, or None
    when a single row cannot fit."""
    n = len(table.units)
    counts = ctx.count_many([table.unit_text(u) for u in table.units])
    # Budget the <table {attrs}></table> wrapper and the header each later slice carries.
    overhead = ctx.count(f"<table{table.attrs}></table>") + ctx.count(table.header_text())
    body_max = max(limits.slice_max - overhead, 1)
    body_ideal = max(min(limits.slice_ideal, limits.slice_max) - overhead, 1)

    slices: list[tuple[int, int, str, int]] = []
    pending = [(lo, hi) for lo, hi in _balanced_cuts(counts, body_ideal, body_max)]
    while pending:
        lo, hi = pending.pop(0)
        text = table.render(lo, hi, n)
        tokens = ctx.count(text)
        if tokens <= limits.slice_max or (hi - lo == 1 and tokens <= limits.row_max):
            slices.append((lo, hi, text, tokens))
        elif hi - lo == 1:
            return None
        else:
            part = counts[lo:hi]
            halves = _balanced_cuts(part, sum(part), max((sum(part) + 1) // 2, 1))
            pending[0:0] = [(lo + a, lo + b) for a, b in (halves if len(halves) > 1 else [(0, 1), (1, hi - lo)])]
    if len(slices) >= 2 and slices[-1][3] < limits.last_min:
        lo = slices[-2][0]
        merged = table.render(lo, n, n)
        tokens = ctx.count(merged)
        if tokens <= limits.slice_max:
            slices[-2:] = [(lo, n, merged, tokens)]
    return [(text, lo, hi) for lo, hi, text, _ in slices]


def split_table(text: str, ctx: _Context, limits: _TableLimits, origin: Paragraph | None = None) -> list[Paragraph]:
    """Slices of one oversized table line, in order (their roles are set by the caller).

    Row slices when the table has a JSON/HTML row structure (header re-injected);
    otherwise, or when a single row cannot fit ``row_max`` with its header, an R
    split of the original tag, header and all, with a warning. Raises ValueError
    for a header whose format disagrees with the table's (HeaderRecovery).
    ``origin`` is the table's line (``origin.text == text``): R fragments keep
    their exact place in it, row slices (rewritten text) get the table's span.
    """
    origin = origin if origin is not None and origin.text == text else Paragraph(text)
    table = _row_table(text, ctx)
    slices = _slice_table(table, ctx, limits) if table is not None else None
    if slices is not None:
        return [
            Paragraph(s, is_table=True, region=_region(origin, table.source_span(lo, hi, len(table.units))), block=origin.block)
            for s, lo, hi in slices
        ]
    reason = "has no JSON/HTML row structure" if table is None else "has a row that cannot fit the cap with its header"
    log.warning(
        "paragraph_semantic: document %r: a table (%s...) %s; fallback to recursive_character for that table "
        "(table_chunk_role kept on its fragments)",
        ctx.doc_id, text[:40], reason,
    )
    return [
        origin.cut(s.start, s.end, is_table=False, role=NONE, table_fragment=True)
        for s in ctx.recursive(text, limits.slice_max, 0)
    ]


def _region(origin: Paragraph, within: tuple[int, int] | None) -> tuple[int, int] | None:
    """The source span of ``origin.text[within[0]:within[1]]`` (the whole line's without ``within``)."""
    return (origin if within is None else origin.cut(*within)).source_span()


def run(section: Section, ctx: _Context) -> list[Section]:
    """TableRowSplit: cut the tables over table_max and glue slices by role (§3.3.1).

    ``first`` joins the text accumulated before it (the table's lead-in),
    ``middle`` stands alone, ``last`` starts a fresh accumulation (so the trailing
    commentary follows it). Between a ``last`` and the next table's ``first`` the
    bridge text goes to both by :func:`table_bridge.run`.
    """
    lim = ctx.limits
    tables = [p for p in section.paragraphs if p.is_table]
    if not tables:
        return [section]
    table_counts = dict(zip((p.text for p in tables), ctx.count_lines(tables)))
    if all(table_counts[p.text] <= lim.table_max for p in tables):
        return [section]
    limits = _TableLimits(lim.table_max, lim.table_ideal, lim.table_min_last, lim.target_max)

    out: list[Section] = []
    acc: list[Paragraph] = []

    def flush() -> None:
        if acc:
            out.append(_section(section, acc, ctx))
            acc.clear()

    for para in section.paragraphs:
        if not (para.is_table and table_counts[para.text] > lim.table_max):
            acc.append(para)
            continue
        pieces = split_table(para.text, ctx, limits, para)
        if len(pieces) <= 1:
            acc.append(para)  # nothing to gain: keep the original line
            continue
        roles = [FIRST] + [MIDDLE] * (len(pieces) - 2) + [LAST]
        for piece, role in zip(pieces, roles):
            piece = replace(piece, role=role)
            if role == FIRST:
                if acc and acc[0].role == LAST:
                    left, middle, right = table_bridge.run(acc[0], acc[1:], piece, ctx)
                    out.append(_section(section, left, ctx))
                    if middle:
                        out.append(_section(section, middle, ctx))
                    acc[:] = right
                acc.append(piece)
            elif role == MIDDLE:
                flush()
                out.append(_section(section, [piece], ctx))
            else:
                flush()
                acc.append(piece)
    flush()
    return out
