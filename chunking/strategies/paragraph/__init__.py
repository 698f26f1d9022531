"""``paragraph``: LightRAG's P strategy (paragraph-semantic chunking) on the blocks sidecar.

Input is the document's heading-level blocks (``doc.blocks``, one per
``type == "content"`` line of a ``.blocks.jsonl``) and its tables sidecar
(``doc.tables``, the ``.tables.json`` "tables" mapping). The pipeline, stage by
stage; each stage is a module of this package named after it, entry point
``run`` (the stage names are the seed's, and the log keywords below are its too)::

    heading_blocks    HeadingBlocks   one content line = one basic block       §3.1
    table_row_split   TableRowSplit   oversized tables cut on row boundaries,
                                      roles first/middle/last/none              §3.2, §3.3.1
    header_recovery   HeaderRecovery  the table's header re-injected into its
                                      middle/last slices, budgeted up front     §3.3.3
    table_bridge      TableBridge     bridge text between two split tables
                                      copied to both sides by budget            §3.3.2
    anchor_split      AnchorSplit     over-cap blocks cut at short paragraphs   §3.4
    part_labeling     PartLabeling    ``[part n]`` per original content line    §4.4
    heading_glue      HeadingGlue     body-less heading glued to its child      §3.5
    level_merge       LevelMerge      deepest level first, Phase A / tail
                                      absorption / Phase B                      §3.6

Before them, with ``drop_references``, ``references`` leaves out the reference
section (LightRAG's option, not in the seed); a block flagged ``is_title_block``
(the document title) keeps level 0 through to its chunks' heading dict.

``model`` holds what they share (thresholds, config, the section passed from
stage to stage, the counting context, the merge primitives); ``table_markup``
the table tag parsing TableRowSplit and HeaderRecovery share. This module is the
pipeline that runs them.

Thresholds derive from N = ``chunk_token_size`` (:class:`Thresholds`). A document
without blocks degrades to the ``recursive`` strategy with a logged warning.

The invariants a caller relies on:

* every chunk has at most N tokens (counted with the given tokenizer on the
  chunk's final text);
* text is duplicated across chunks only where the seed allows it (§3.7): R
  overlap inside one over-long content line, and bridge text between two split
  tables of one content line. Different content lines never share text, table
  row slices never share rows;
* every split table slice is a legal ``<table ...>`` tag with the table's own
  attributes, and its middle/last slices carry the header from ``.tables.json``
  when there is one;
* ``block_ids`` lists every source block a chunk was built from (a piece of a
  split section only the blocks it overlaps). The char span is the tightest span
  of the parsed text covering the characters the chunk was built from: every
  stage carries each line's source position (``Paragraph.src``, or a
  :class:`~.model.CharMap` for content a parser derived from its source), so an
  R piece, anchor sub-block, row slice or bridge copy has its own span, not its
  block's. ``verbatim`` is set exactly when ``text[char_start:char_end]`` is the
  chunk's text; otherwise (blocks joined by a blank line, a re-injected table
  header, rendered markup) the span covers the source rows and lines the chunk
  came from, an injected header being a copy that adds nothing to it. The spans
  of a block's pieces cover all of it.

Where we differ from the reference implementation, on purpose:

* Source block ids survive tail absorption (the reference drops them there).
* Tokens are counted about once: each content line once (whole, or line by line
  when AnchorSplit will need the lines), each table row once, R pieces once. A
  merge is decided on its estimate (parts plus joiners, an upper bound since a
  newline join can only let tokens merge across it) and the joined text is
  measured only when the estimate is over the limit by less than the join slack.
  Every chunk is then measured once on its final text; a merge found over the
  cap there (a tokenizer breaking the upper-bound assumption) is undone.
  The lines are laid out in one text as merging joins them, so these counts are
  mostly spans of one encoding of it (``span_counter``; exact, checked against
  the text). A one-line block proven over the cap by a lower bound (its UTF-8
  size over the longest token, or a prefix's count) is not counted at all:
  it goes to R, which measures it anyway.
* Row slices are balanced by row tokens, not by row counts, and a multi-row
  header (JSON rows equal to the stored header, HTML ``<thead>`` rows) is never
  cut from the first data row, so a cut never lands inside a header.
* A table's R fragments (when it has no row structure or a row cannot fit) keep
  the table roles, so they stay frozen against LevelMerge like row slices.
* In AnchorSplit the table role goes to the sub-block that holds the table slice
  (the reference gives it to the first sub-block whatever it holds), and anchors
  found when a sub-block is split again are siblings of the first ones (parent
  path = the content line's path), not children of the anchor before them.
* TableBridge cuts the bridge's prefix and suffix at a word boundary within the
  token budget rather than mid-word.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from chunking.model import Block, Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec
from chunking.strategies.recursive import CJK_SEPARATORS, split_recursive
from chunking.tokenizers import Tokenizer
from chunking.strategies.paragraph import (
    anchor_split,
    heading_blocks,
    heading_glue,
    level_merge,
    part_labeling,
    references,
    table_row_split,
)
from chunking.strategies.paragraph.model import (
    ParagraphConfig,
    ParagraphPiece,
    Section,
    Thresholds,
    _Context,
    _at,
    _source_of,
    log,
)


def _within_cap(section: Section, ctx: _Context) -> list[tuple[Section, str, int, tuple[int, int]]]:
    """``(section, final text, exact tokens, where the text lies in section.content)``.

    A merge found over the cap is undone; a single block over it goes to R, each
    piece keeping its own place in the content (and so in the source).
    """
    content = section.content
    text = content.strip()
    lead = len(content) - len(content.lstrip())
    if section.pending == 0 and not section.over_cap and text == content:
        tokens = section.tokens
    else:
        at = _at(section.paragraphs)
        tokens = ctx.count_at(text, at + lead if at >= 0 else -1)
    cap = ctx.limits.target_max
    if tokens <= cap:
        return [(section, text, tokens, (lead, lead + len(text)))]
    if section.parts:
        log.warning("paragraph_semantic: a merge measured %d > %d tokens on its final text; undone", tokens, cap)
        return [item for part in section.parts for item in _within_cap(replace(part, parts=()), ctx)]
    log.warning("paragraph_semantic: block %r measured %d > %d tokens; fallback to recursive_character", section.heading, tokens, cap)
    return [(section, s.text, s.tokens, (lead + s.start, lead + s.end)) for s in ctx.recursive(text, cap, ctx.overlap)]


def split_paragraph_semantic(
    blocks: Sequence[Block],
    tokenizer: Tokenizer,
    *,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    chunk_token_size: int = 2000,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] = CJK_SEPARATORS,
    doc_id: str = "",
    drop_references: bool = False,
    references_headings: Sequence[str] = references.DEFAULT_REFERENCES_HEADINGS,
    references_tail_n: int = references.DEFAULT_REFERENCES_TAIL_N,
    source_text: str = "",
    reference_recursive: bool = False,
) -> list[ParagraphPiece]:
    """Run the P pipeline on heading-level blocks; ``[]`` when no block has content.

    Each piece has at most ``chunk_token_size`` tokens. ``tables`` is the
    ``.tables.json`` "tables" mapping (the header source of HeaderRecovery).
    With ``drop_references`` the reference section is left out first (see
    :mod:`.references`). Raises ValueError when a table's stored header has the
    other format. ``source_text`` is the text the blocks' ``char_start`` /
    ``char_end`` index into: with it, each piece's ``span`` is the tightest
    span of it covering the characters the piece was built from (exact for
    verbatim text, see :func:`.model._source_of`). ``reference_recursive``: the character-level
    splits are the reference R's (``split_recursive(..., reference_mode=True)``), as
    ``chunking.compat.lightrag`` runs P; a piece may then count over the cap, as there.
    """
    limits = Thresholds.from_size(chunk_token_size)
    overlap = min(max(int(chunk_overlap_token_size), 0), max(limits.target_max - 1, 0))
    ctx = _Context(tokenizer, limits, overlap, tuple(separators), tables or {}, doc_id, source=source_text,
                   reference_recursive=reference_recursive)
    if drop_references:
        blocks = references.run(blocks, references_headings, references_tail_n)
    labelled: list[Section] = []
    for basic in heading_blocks.run(blocks, ctx):
        fragments = [piece for part in table_row_split.run(basic, ctx) for piece in anchor_split.run(part, ctx)]
        labelled.extend(part_labeling.run(fragments))
    merged = level_merge.run(heading_glue.run(labelled, ctx), ctx)
    pieces = []
    for section in merged:
        for sec, text, tokens, (start, end) in _within_cap(section, ctx):
            if text:
                span, blocks = _source_of(sec.paragraphs, sec.content, start, end)
                whole = (start, end) == (0, len(sec.content)) or text == sec.content.strip()
                pieces.append(
                    ParagraphPiece(
                        text=text,
                        tokens=tokens,
                        heading=sec.heading,
                        base_heading=sec.base_heading,
                        level=sec.level,
                        parent_headings=sec.parent_headings,
                        # A piece of a section holds only the blocks it overlaps.
                        sources=tuple(dict.fromkeys(sec.sources if whole or not blocks else blocks)),
                        table_fragment=any(p.table_fragment for p in sec.paragraphs) or _unbalanced_tables(text),
                        span=span,
                    )
                )
    return pieces


def _unbalanced_tables(text: str) -> bool:
    """True when a character-level cut left partial ``<table>`` markup in ``text``."""
    return len(re.findall(r"<table[\s>]", text)) != text.count("</table>")


def _span(blocks: Sequence[Block], sources: Iterable[int]) -> tuple[int, int]:
    located = [blocks[i] for i in sources if blocks[i].char_start is not None and blocks[i].char_end is not None]
    if not located:
        return 0, 0
    return min(b.char_start for b in located), max(b.char_end for b in located)


def chunk_paragraph(
    doc: ParsedDocument, config: ParagraphConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    """The ``paragraph`` strategy: P on ``doc.blocks``; R with a warning when there are none."""
    if not any(b.content.strip() for b in doc.blocks):
        # Plain text has no blocks by nature (every chunk_text call): worth a note, not a warning;
        # blocks without content are a sidecar gone wrong.
        log.log(
            logging.WARNING if doc.blocks else logging.INFO,
            "paragraph_semantic: document %r has no blocks sidecar content; fallback to recursive_character "
            "(no heading hierarchy, table roles or bridge overlap)", doc.doc_id,
        )
        spans = split_recursive(
            doc.text, tokenizer, config.chunk_token_size, config.chunk_overlap_token_size, config.separators
        )
        return attach_provenance(doc, [s.to_chunk({"fallback": "recursive"}) for s in spans])
    pieces = split_paragraph_semantic(
        doc.blocks,
        tokenizer,
        tables=doc.tables,
        chunk_token_size=config.chunk_token_size,
        chunk_overlap_token_size=config.chunk_overlap_token_size,
        separators=config.separators,
        doc_id=doc.doc_id,
        drop_references=config.drop_references,
        references_headings=config.references_headings,
        references_tail_n=config.references_tail_n,
        source_text=doc.text,
    )
    chunks = []
    for piece in pieces:
        start, end = piece.span or _span(doc.blocks, piece.sources)
        chunks.append(
            Chunk(
                text=piece.text,
                char_start=start,
                char_end=end,
                token_count=piece.tokens,
                heading_path=[*piece.parent_headings, piece.base_heading] if piece.base_heading else list(piece.parent_headings),
                block_ids=[doc.blocks[i].block_id for i in piece.sources if doc.blocks[i].block_id],
                # Verbatim exactly when the span holds the text (blocks joined by a blank
                # line, injected headers and [part n]-free rewrites are not).
                verbatim=doc.text[start:end] == piece.text,
                metadata={
                    "heading": {
                        "level": piece.level,
                        "heading": piece.heading,
                        "parent_headings": list(piece.parent_headings),
                    },
                    # A table degraded to R (§3.2.2, §6): its pieces carry partial <table> markup on purpose.
                    **({"table_fragment": True} if piece.table_fragment else {}),
                },
            )
        )
    return attach_provenance(doc, chunks)


SPEC = StrategySpec(
    name="paragraph",
    config_model=ParagraphConfig,
    chunk=chunk_paragraph,
    description=(
        "LightRAG P: heading blocks from the sidecar, tables cut on rows with headers re-injected, "
        "anchor splits, [part n] labels, heading glue and hierarchy-aware merging; R without blocks."
    ),
    atomic_markup=("table",),
)
