"""The P strategy (``paragraph``), rule by rule of seeds/paragraph-semantic-chunking.md.

Every behavioural test runs with a 1 char = 1 token tokenizer and with cl100k.
Sizes are never hard-coded token counts: each test derives N from the fixture
measured with the tokenizer under test, so the same rule is exercised by both.
Fixtures are hand-made ``.blocks.jsonl`` / ``.tables.json`` files in
``fixtures/paragraph`` (see ``make_fixtures.py`` there).
"""

from __future__ import annotations

import dataclasses

import json
import logging
import math
import re
from pathlib import Path

import pytest

from chunking import default_tokenizer
from chunking.model import Block, Page, ParsedDocument
from chunking.sidecar import read_blocks_jsonl, read_tables_json
from chunking.strategies import paragraph as P
from chunking.strategies.paragraph import model as M
from chunking.strategies.paragraph import table_row_split as TRS
from chunking.strategies.paragraph import ParagraphConfig, Thresholds, chunk_paragraph
from chunking.strategies.recursive import CJK_SEPARATORS, split_recursive
from chunking.tokenizers import CharTokenizer, count_tokens

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "paragraph"
TABLE_RE = re.compile(r"<table(?P<attrs>\s[^>]*)?>(?P<body>.*?)</table>", re.DOTALL)
HEADING_LINE = re.compile(r"^(#{1,6}) ")


@pytest.fixture(params=["char", "cl100k"])
def tok(request):
    return CharTokenizer() if request.param == "char" else default_tokenizer()


# --------------------------------------------------------------------------- helpers


def with_spans(blocks: list[Block], tables: dict | None = None, doc_id: str = "doc") -> ParsedDocument:
    """A document whose text is the block contents joined by a blank line (the parsers' layout)."""
    text, located, pos = [], [], 0
    for i, block in enumerate(blocks):
        if i:
            text.append("\n\n")
            pos += 2
        located.append(block.model_copy(update={"char_start": pos, "char_end": pos + len(block.content)}))
        text.append(block.content)
        pos += len(block.content)
    full = "".join(text)
    return ParsedDocument(doc_id=doc_id, text=full, pages=[Page(page_num=0, char_offset=0, text=full)],
                          blocks=located, tables=tables or {})


def load(name: str, *, tables: bool = True) -> ParsedDocument:
    blocks = read_blocks_jsonl(FIXTURES / f"{name}.blocks.jsonl")
    sidecar = read_tables_json(FIXTURES / f"{name}.tables.json") if tables else {}
    return with_spans(blocks, sidecar, doc_id=name)


def run(doc: ParsedDocument, tok, n: int, overlap: int = 100):
    return chunk_paragraph(doc, ParagraphConfig(chunk_token_size=n, chunk_overlap_token_size=min(overlap, n - 1)), tok)


def count(tok, text: str) -> int:
    return count_tokens(tok, text)


def heading(chunk) -> str:
    return chunk.metadata["heading"]["heading"]


def from_block(doc: ParsedDocument, chunks, index: int):
    return [c for c in chunks if doc.blocks[index].block_id in c.block_ids]


def tables_in(text: str) -> list[tuple[str, str]]:
    return [(m.group("attrs") or "", m.group("body")) for m in TABLE_RE.finditer(text)]


def block_table(doc: ParsedDocument, index: int) -> str:
    return next(line for line in doc.blocks[index].content.split("\n") if line.startswith("<table "))


def context(tok, n: int, overlap: int = 100, tables: dict | None = None):
    return P._Context(tok, Thresholds.from_size(n), overlap, CJK_SEPARATORS, tables or {}, "test")


def assert_invariants(doc: ParsedDocument, chunks, tok, n: int) -> None:
    for c in chunks:
        assert c.text.strip() == c.text and c.text
        assert c.token_count == count(tok, c.text) <= n
        _assert_own_span(doc, c)
        meta = c.metadata["heading"]
        assert set(meta) == {"level", "heading", "parent_headings"}
        # Never deep-absorbs-shallow: no heading line shallower than the chunk's own level.
        for line in c.text.split("\n"):
            m = HEADING_LINE.match(line)
            if m:
                assert len(m.group(1)) >= min(meta["level"], 6), (line, meta)


# --------------------------------------------------------------------------- §3.8 thresholds, config


def test_thresholds_derive_from_n():
    assert Thresholds.from_size(2000) == Thresholds(
        target_max=2000, target_ideal=1500, table_max=1250, table_ideal=750, table_min_last=400, small_tail=250
    )
    for n in (64, 500, 1200, 2000, 8000):
        t = Thresholds.from_size(n)
        assert t.table_max < t.target_ideal < t.target_max and t.table_ideal < t.table_max
    assert M.MAX_ANCHOR_CANDIDATE_LENGTH == 100


def test_config_defaults_and_validation():
    config = ParagraphConfig()
    assert (config.chunk_token_size, config.chunk_overlap_token_size, config.token_cap) == (2000, 100, 2000)
    assert config.thresholds.target_ideal == 1500
    with pytest.raises(ValueError, match="chunk_overlap_token_size"):
        ParagraphConfig(chunk_token_size=100, chunk_overlap_token_size=100)
    with pytest.raises(ValueError):
        ParagraphConfig(unknown=1)


def test_registered_spec():
    assert P.SPEC.name == "paragraph" and P.SPEC.config_model is ParagraphConfig and P.SPEC.chunk is chunk_paragraph


# --------------------------------------------------------------------------- §3.1 HeadingBlocks


def test_heading_blocks_one_basic_block_per_content_line(tok):
    doc = load("seed_example")
    sections = P.heading_blocks.run(doc.blocks, context(tok, 2000))
    assert [s.sources for s in sections] == [(i,) for i in range(len(doc.blocks))]
    for sec, block in zip(sections, doc.blocks):
        assert sec.content == block.content and sec.tokens == count(tok, block.content)
        assert (sec.heading, sec.parent_headings, sec.level) == (block.heading, tuple(block.parent_headings), block.level)


def test_level_zero_counts_as_one_and_blank_lines_are_dropped(tok):
    blocks = [Block(index=0, heading="", level=0, content="preamble line\n\n  \nsecond line")]
    (section,) = P.heading_blocks.run(blocks, context(tok, 2000))
    assert section.level == 1 and section.content == "preamble line\nsecond line"


def test_chunk_boundaries_fall_on_content_lines(tok):
    """With no block over N, every chunk is whole content lines joined by a blank line."""
    doc = load("seed_example")
    n = math.ceil(count(tok, doc.blocks[1].content) / 0.8)
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    by_id = {b.block_id: b for b in doc.blocks}
    for c in chunks:
        assert c.text == "\n\n".join(by_id[i].content for i in c.block_ids)
    assert sorted(i for c in chunks for i in c.block_ids) == sorted(b.block_id for b in doc.blocks)


# --------------------------------------------------------------------------- §3.2 TableRowSplit, §3.3.3 HeaderRecovery


def _table_slices(doc, chunks, index, table_id):
    out = []
    for c in from_block(doc, chunks, index):
        for attrs, body in tables_in(c.text):
            if f'id="{table_id}"' in attrs:
                out.append((c, attrs, body))
    return out


def test_json_table_split_on_rows_with_header_reinjected(tok):
    doc = load("tables_json")
    original = block_table(doc, 0)
    n = count(tok, original) // 2
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    slices = _table_slices(doc, chunks, 0, "tb-aaaa-0001")
    assert len(slices) >= 3
    rows = json.loads(TABLE_RE.match(original).group("body"))
    header = rows[0]
    data: list = []
    for k, (_, attrs, body) in enumerate(slices):
        assert attrs == ' id="tb-aaaa-0001" format="json"'
        sliced = json.loads(body)
        assert sliced[0] == header and header not in sliced[1:]  # the first keeps its own, the rest get it once
        data.extend(sliced[1:])
        assert count(tok, f"<table{attrs}>{body}</table>") <= Thresholds.from_size(n).table_max
    assert data == rows[1:]  # row slices never overlap and lose nothing


def test_json_table_without_header_gets_no_injection(tok):
    doc = load("tables_json")
    original = block_table(doc, 1)
    n = count(tok, original) // 2
    slices = _table_slices(doc, run(doc, tok, n), 1, "tb-aaaa-0002")
    rows = json.loads(TABLE_RE.match(original).group("body"))
    assert len(slices) >= 3
    assert [r for _, _, body in slices for r in json.loads(body)] == rows


def test_html_table_rowspan_colspan_header_spliced_verbatim(tok):
    doc = load("tables_html")
    original = block_table(doc, 0)
    thead = doc.tables["tb-bbbb-0001"]["table_header"]
    assert 'rowspan="2"' in thead and 'colspan="2"' in thead
    n = count(tok, original) // 2
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    slices = _table_slices(doc, chunks, 0, "tb-bbbb-0001")
    assert len(slices) >= 3
    body_rows = []
    for k, (_, attrs, body) in enumerate(slices):
        assert attrs == ' id="tb-bbbb-0001" format="html" class="grid"'
        assert body.startswith(thead) and body.count("<thead") == 1
        assert count(tok, f"<table{attrs}>{body}</table>") <= Thresholds.from_size(n).table_max
        body_rows += re.findall(r"<tr>.*?</tr>", body[len(thead):])
    assert body_rows == re.findall(r"<tr>.*?</tr>", TABLE_RE.match(original).group("body").split("</thead>")[1])


def test_html_table_without_header(tok):
    doc = load("tables_html")
    original = block_table(doc, 1)
    n = count(tok, original) // 2
    slices = _table_slices(doc, run(doc, tok, n), 1, "tb-bbbb-0002")
    assert len(slices) >= 3 and all("<thead" not in body for _, _, body in slices)
    rows = [r for _, _, body in slices for r in re.findall(r"<tr>.*?</tr>", body)]
    assert rows == re.findall(r"<tr>.*?</tr>", original)


def test_table_within_table_max_stays_whole(tok):
    doc = load("tables_json")
    small = block_table(doc, 2)
    n = math.ceil(count(tok, small) / 0.6)
    chunks = run(doc, tok, n)
    assert sum(small in c.text for c in chunks) == 1


def test_last_small_slice_swallowed_back(tok):
    rows = [["a" * 40], ["b" * 40], ["c" * 40], ["d" * 40], ["e"]]
    text = '<table id="t1" format="json">' + json.dumps(rows) + "</table>"
    ctx = context(tok, 10_000)
    row = count(tok, json.dumps(rows[0]))
    wrapper = count(tok, '<table id="t1" format="json"></table>')
    keep_tail = TRS._TableLimits(slice_max=10_000, slice_ideal=row + wrapper, last_min=1, row_max=10_000)
    swallow = TRS._TableLimits(slice_max=10_000, slice_ideal=row + wrapper, last_min=wrapper + row, row_max=10_000)
    kept = TRS.split_table(text, ctx, keep_tail)
    swallowed = TRS.split_table(text, ctx, swallow)
    assert [json.loads(TABLE_RE.match(p.text).group("body")) for p in kept][-1] == [["e"]]
    assert len(swallowed) == len(kept) - 1
    assert json.loads(TABLE_RE.match(swallowed[-1].text).group("body"))[-2:] == [["d" * 40], ["e"]]


def test_single_row_over_cap_degrades_whole_table(tok, caplog):
    doc = load("degrade")
    original = block_table(doc, 0)
    n = count(tok, original) // 4
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    assert any("cannot fit" in r.message and "recursive_character" in r.message for r in caplog.records)
    mine = from_block(doc, chunks, 0)
    # No mix of <table> slices and fragments: the whole table went to R, header included.
    assert not any(tables_in(c.text) for c in mine)
    squashed = re.sub(r"\s", "", "".join(c.text for c in mine))
    assert re.sub(r"\s", "", original) in squashed
    assert mine[0].text.startswith("# Giant row\nBefore the giant table.\n<table")
    assert mine[-1].text.endswith("</table>\nAfter the giant table.")
    # Flagged, so a markup check knows the partial <table> tags are the seed's degradation.
    assert all(c.metadata.get("table_fragment") for c in mine)
    degraded = mine + from_block(doc, chunks, 1)  # block 1's table has no row structure: R too
    assert [c for c in chunks if c.metadata.get("table_fragment")] == degraded


def test_single_row_within_target_max_kept_as_table(tok):
    big = " ".join(["wide cell"] * 150)
    rows = [["k", "v"], ["a", "1"], ["b", "2"], ["big", big]]
    table = '<table id="t9" format="json">' + json.dumps(rows) + "</table>"
    size = count(tok, table)
    n = math.ceil(size / 0.9)  # the table is over table_max; its big row is not, with its header, over N
    doc = with_spans([Block(block_id="b0", index=0, heading="Wide", level=1, content="# Wide\n" + table)],
                     {"t9": {"table_header": json.dumps([["k", "v"]])}})
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    slices = [(a, json.loads(b)) for c in chunks for a, b in tables_in(c.text)]
    assert len(slices) >= 2 and slices[-1][1] == [["k", "v"], ["big", big]]
    assert count(tok, f'<table{slices[-1][0]}>{json.dumps(slices[-1][1])}</table>') > Thresholds.from_size(n).table_max


def test_row_that_fits_alone_but_not_with_its_header_degrades(tok, caplog):
    header = [["h" * 10 + str(i) for i in range(30)]]
    big = [" ".join(["cell"] * 120)]
    rows = [*header, ["a"], ["b"], big]
    table = '<table id="t8" format="json">' + json.dumps(rows) + "</table>"
    n = math.ceil(count(tok, json.dumps(big)) * 1.1) + count(tok, '<table id="t8" format="json"></table>')
    assert count(tok, json.dumps(header + [big])) > n
    doc = with_spans([Block(block_id="b0", index=0, heading="H", level=1, content="# H\n" + table)],
                     {"t8": {"table_header": json.dumps(header)}})
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    assert any("cannot fit" in r.message for r in caplog.records)
    assert not any(tables_in(c.text) for c in chunks)
    assert "h" * 10 + "0" in "".join(c.text for c in chunks)  # the header survives as text


def test_table_without_row_structure_uses_r(tok, caplog):
    doc = load("degrade")
    original = block_table(doc, 1)
    n = count(tok, original) // 4
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    assert any("no JSON/HTML row structure" in r.message for r in caplog.records)
    mine = from_block(doc, chunks, 1)
    assert len(mine) >= 4
    assert re.sub(r"\s", "", original) in re.sub(r"\s", "", "".join(c.text for c in mine))


@pytest.mark.parametrize("name", ["mismatch_json", "mismatch_html"])
def test_header_format_mismatch_is_a_hard_error(tok, name):
    doc = load(name)
    n = count(tok, block_table(doc, 0)) // 2
    with pytest.raises(ValueError, match=r"table_header .*corrupted or mis-attributed"):
        run(doc, tok, n)


def test_missing_tables_sidecar_skips_header_injection(tok):
    doc = load("tables_json", tables=False)
    original = block_table(doc, 0)
    n = count(tok, original) // 2
    slices = _table_slices(doc, run(doc, tok, n), 0, "tb-aaaa-0001")
    rows = json.loads(TABLE_RE.match(original).group("body"))
    assert [r for _, _, body in slices for r in json.loads(body)] == rows  # no header repeated


# --------------------------------------------------------------------------- §3.3.1 roles


def test_table_roles_glue_lead_in_and_commentary(tok):
    doc = load("tables_json")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n)
    mine = from_block(doc, chunks, 0)
    assert mine[0].text.startswith("# Qualification\nThe qualification tests are listed below.\n<table ")
    assert mine[-1].text.endswith("</table>\nAll retests passed on the second run.")
    for middle in mine[1:-1]:
        assert middle.text.startswith("<table ") and middle.text.endswith("</table>") and "\n" not in middle.text


def test_split_table_blocks_are_frozen_in_level_merge(tok):
    doc = load("tables_json")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n)
    # Every table slice is alone in its chunk, and the small "Dimensions" block after
    # the last slice of "Parts" is not absorbed by it.
    for c in chunks:
        assert len(tables_in(c.text)) == 1
    dims = next(c for c in chunks if "# Dimensions" in c.text)
    assert dims.text.startswith("# Dimensions") and len(dims.block_ids) == 1


# --------------------------------------------------------------------------- §3.3.2 TableBridge


BRIDGE = "Bridge: alpha feeds beta."


def test_short_bridge_goes_to_both_tables(tok):
    doc = load("bridge")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n, overlap=100)
    assert_invariants(doc, chunks, tok, n)
    holders = [c for c in chunks if BRIDGE in c.text]
    assert len(holders) == 2
    left, right = holders
    assert left.text.endswith("</table>\n" + BRIDGE) and 'id="tb-cccc-0001"' in left.text
    assert right.text.startswith(BRIDGE + '\n<table id="tb-cccc-0002"')


def test_zero_overlap_keeps_bridge_with_left_table_only(tok):
    doc = load("bridge")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n, overlap=0)
    holders = [c for c in chunks if BRIDGE in c.text]
    assert len(holders) == 1 and 'id="tb-cccc-0001"' in holders[0].text


def _long_bridge(doc):
    lines = doc.blocks[1].content.split("\n")
    return "\n".join(lines[3:5])


@pytest.mark.parametrize("overlap_share", [0.05, 0.9])
def test_long_bridge_prefix_suffix_and_whole_middle(tok, overlap_share):
    doc = load("bridge")
    n = count(tok, block_table(doc, 0)) // 2
    bridge = _long_bridge(doc)
    assert count(tok, bridge) > n // 2
    overlap = max(int(n * overlap_share), 1)
    chunks = run(doc, tok, n, overlap=overlap)
    assert_invariants(doc, chunks, tok, n)
    mine = from_block(doc, chunks, 1)
    left = next(c for c in mine if 'id="tb-cccc-0003"' in c.text and not c.text.endswith("</table>"))
    right = next(c for c in mine if c.text.endswith("</table>") and '<table id="tb-cccc-0004"' in c.text
                 and not c.text.startswith("<table"))
    prefix = left.text.split("</table>\n", 1)[1]
    suffix = right.text.split("\n<table", 1)[0]
    budget = min(overlap, n // 2)
    assert bridge.startswith(prefix) and 0 < count(tok, prefix) <= budget
    assert bridge.endswith(suffix) and 0 < count(tok, suffix) <= budget
    # The middle chunk(s): the whole bridge (R-split when longer than N), never any table text.
    middles = [c.text for c in mine if "<table" not in c.text]
    assert middles and all(m in bridge for m in middles)
    assert bridge.startswith(middles[0]) and bridge.endswith(middles[-1])
    if count(tok, bridge) <= n:
        assert middles == [bridge]


def test_bridge_never_crosses_content_lines(tok):
    doc = load("bridge")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n, overlap=n - 1)
    assert sum("This line must never be copied" in c.text for c in chunks) == 1
    assert sum(c.text.endswith("\nEnd.") for c in chunks) == 1


# --------------------------------------------------------------------------- §3.4 AnchorSplit


ANCHORS = ["Installation", "Wiring", "Commissioning", "Maintenance", "Disposal", "Warranty"]


def test_anchor_split_promotes_short_paragraphs(tok):
    doc = load("long_blocks")
    n = count(tok, doc.blocks[0].content) // 3
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    mine = from_block(doc, chunks, 0)
    assert len(mine) >= 3
    assert heading(mine[0]) == "Operating manual [part 1]" and mine[0].metadata["heading"]["parent_headings"] == []
    for k, c in enumerate(mine[1:], start=2):
        anchor = c.text.split("\n", 1)[0]
        assert anchor in ANCHORS
        assert heading(c) == f"{anchor} [part {k}]"
        assert c.metadata["heading"]["parent_headings"] == ["Operating manual"]
        assert c.heading_path == ["Operating manual", anchor]
    assert "\n".join(c.text for c in mine) == doc.blocks[0].content  # cut at lines: nothing lost or repeated


def test_anchor_nearest_each_ideal_position(tok):
    lines = ["# Long", "A" * 300, "first anchor", "B" * 300, "second anchor", "C" * 300, "D" * 300, "third anchor", "E" * 50]
    block = Block(index=0, heading="Long", level=1, content="\n".join(lines))
    n = math.ceil(count(tok, block.content) / 1.6)  # k = ceil(T / 0.75N) = 3 sub-blocks
    ctx = context(tok, n)
    (section,) = P.heading_blocks.run([block], ctx)
    counts = [count(tok, ln) for ln in lines]
    total = sum(counts)
    k = max(math.ceil(total / ctx.limits.target_ideal), math.ceil(total / n))
    positions = {i: sum(counts[:i]) for i, ln in enumerate(lines) if ln.endswith("anchor")}
    expected, pool = [], dict(positions)
    for j in range(1, k):
        best = min(pool, key=lambda i: abs(pool[i] - j * total / k))
        expected.append(lines[best])
        del pool[best]
    subs = P.anchor_split.run(section, ctx)
    assert [s.heading for s in subs[1:]] == sorted(expected, key=lines.index)


def test_no_anchor_warning_names_a_block_without_heading(caplog):
    # Plain text has no heading: the warning names the block by its index instead of ''.
    long_line = " ".join(f"word{i} is here." for i in range(400))
    doc = with_spans([Block(block_id="b0", index=0, content=long_line)], doc_id="plain.txt")
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        run(doc, default_tokenizer(), 200, overlap=0)
    (message,) = [r.getMessage() for r in caplog.records if "no anchor" in r.getMessage()]
    assert "document 'plain.txt': block #0 (text before any heading) exceeds target_max=200" in message


def test_no_anchor_packs_then_splits_long_paragraph_with_overlap(tok, caplog):
    doc = load("long_blocks")
    long_para = doc.blocks[1].content.split("\n")[3]
    n = count(tok, long_para) // 4
    overlap = n // 5
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        chunks = run(doc, tok, n, overlap=overlap)
    assert_invariants(doc, chunks, tok, n)
    assert any("no anchor" in r.message and "recursive_character" in r.message for r in caplog.records)
    mine = from_block(doc, chunks, 1)
    joined = "\n".join(c.text for c in mine)
    for line in doc.blocks[1].content.split("\n"):
        for sentence in line.split(". "):
            assert sentence.strip(". ") in joined
    # R pieces of the long paragraph overlap (a mid-body cut inside one content line).
    lines = doc.blocks[1].content.split("\n")
    pieces = [c.text for c in mine if c.text not in lines and not c.text.startswith("#")]
    assert len(pieces) >= 3
    start = -1
    for a, b in zip(pieces, pieces[1:]):
        start = long_para.find(a, start + 1)
        nxt = long_para.find(b, start + 1)
        assert start >= 0 and start < nxt < start + len(a)


# --------------------------------------------------------------------------- §4.4 PartLabeling


def test_part_suffix_per_content_line(tok):
    doc = load("tables_json")
    n = count(tok, block_table(doc, 0)) // 2
    chunks = run(doc, tok, n)
    quals = from_block(doc, chunks, 0)
    assert [heading(c) for c in quals] == [f"Qualification [part {k}]" for k in range(1, len(quals) + 1)]
    assert all(c.metadata["heading"]["parent_headings"] == [] and c.heading_path == ["Qualification"] for c in quals)
    parts = from_block(doc, chunks, 1)
    assert heading(parts[0]) == "Parts [part 1]"  # numbering restarts per content line
    dims = from_block(doc, chunks, 2)
    assert [heading(c) for c in dims] == ["Dimensions"]  # a line left whole keeps its heading


def test_merged_fragments_keep_only_the_main_suffix(tok):
    doc = load("merge")
    n = math.ceil(count(tok, doc.blocks[1].content) / 1.1)
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    for c in chunks:
        assert heading(c).count("[part") <= 1
    tail = next(c for c in chunks if "## 1.2 Paint" in c.text)
    assert heading(tail) == "1.1 Mechanical [part 2]"


def test_suffixes_are_replaced_not_stacked():
    assert M._strip_part_suffix("Results [part 2]") == "Results"
    assert M._strip_part_suffix("Results [表格片段3] [part 1]") == "Results"
    sec = P.Section("T [part 9]", "T", (), 1, (), "", 0, 0, (0,), 0)
    assert [s.heading for s in P.part_labeling.run([sec, sec])] == ["T [part 1]", "T [part 2]"]
    assert [s.heading for s in P.part_labeling.run([sec])] == ["T [part 9]"]


# --------------------------------------------------------------------------- §3.5 HeadingGlue


S24 = "2.4 Environmental adaptability metrics"


def test_heading_only_block_glued_into_its_child(tok):
    """The seed's example: ## 2.4 (no body) travels with ### 2.4.1, not with ## 2.3."""
    doc = load("seed_example")
    n = math.ceil(count(tok, doc.blocks[1].content) / 0.8)
    chunks = run(doc, tok, n)
    glued = next(c for c in chunks if f"## {S24}" in c.text)
    assert glued.text.startswith(f"## {S24}\n\n### 2.4.1 Overview\n")
    assert glued.metadata["heading"] == {"level": 2, "heading": S24, "parent_headings": ["Report"]}
    assert "## 2.3" not in glued.text


def test_chain_of_bodyless_headings_collapses(tok):
    doc = load("seed_example")
    n = math.ceil(count(tok, doc.blocks[1].content) / 0.8)
    chunks = run(doc, tok, n)
    chain = next(c for c in chunks if "# 3 Appendix" in c.text)
    assert chain.text.startswith("# 3 Appendix\n\n## 3.1 Tables\n\n### 3.1.1 Notes\nThe cooling fins")
    assert chain.metadata["heading"] == {"level": 1, "heading": "3 Appendix", "parent_headings": []}


def test_heading_only_before_peer_or_shallower_is_not_glued(tok):
    ctx = context(tok, 2000)
    blocks = [
        Block(index=0, heading="2.4", level=2, parent_headings=["R"], content="## 2.4"),
        Block(index=1, heading="2.5", level=2, parent_headings=["R"], content="## 2.5\nbody"),
        Block(index=2, heading="2.5.1", level=3, parent_headings=["R", "2.5"], content="### 2.5.1"),
        Block(index=3, heading="3", level=1, content="# 3\nbody"),
    ]
    sections = P.heading_blocks.run(blocks, ctx)
    assert [s.sources for s in P.heading_glue.run(sections, ctx)] == [(0,), (1,), (2,), (3,)]


def test_glue_into_first_table_slice_keeps_it_first(tok):
    doc = load("glue_table")
    n = count(tok, block_table(doc, 3)) // 2
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    glued = next(c for c in chunks if "## 2.4 Ramp profile" in c.text)
    assert glued.text.startswith("## 2.4 Ramp profile\n\n### 2.4.1 Steps\n<table ")
    assert heading(glued) == "2.4 Ramp profile"
    # The bonded block is a ``first`` slice: frozen, so not absorbed back into 2.3.
    assert "## 2.3 Defaults" not in glued.text
    assert len(glued.block_ids) == 2


def test_glued_block_over_cap_is_resplit_keeping_heading_with_body(tok):
    doc = load("glue_overcap")
    child = doc.blocks[1].content
    n = count(tok, child) + 2  # the child fits; the child plus its parent heading does not
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    first = next(c for c in chunks if "# Parent section" in c.text)
    assert first.text.startswith("# Parent section\n\n## Child section\nThe enclosure")
    assert heading(first) == "Parent section"
    body = re.sub(r"\s", "", "".join(c.text for c in chunks))
    for line in child.split("\n")[1:]:
        assert re.sub(r"\s", "", line) in body


def test_heading_prefix_alone_over_cap_is_split(tok):
    doc = load("glue_overcap")
    n = count(tok, doc.blocks[2].content) // 2
    chunks = run(doc, tok, n, overlap=0)
    assert_invariants(doc, chunks, tok, n)
    assert "Short body line two." in "".join(c.text for c in chunks)


# --------------------------------------------------------------------------- §3.6 LevelMerge


def test_same_level_siblings_merge(tok):
    doc = load("siblings")
    chunks = run(doc, tok, 2000)
    merged = next(c for c in chunks if "2.5.1" in c.text)
    assert merged.block_ids == [b.block_id for b in doc.blocks[1:4]]
    assert heading(merged) == "2.5.1 Overview"


def test_siblings_with_different_parent_paths_never_merge(tok):
    doc = load("siblings")
    chunks = run(doc, tok, 2000)
    first = next(c for c in chunks if "2.4.1" in c.text)
    assert first.block_ids == [doc.blocks[0].block_id]


def test_shallow_absorbs_deep_only_along_its_path(tok):
    doc = load("merge")
    chapter1 = with_spans(doc.blocks[:8])
    chunks = run(chapter1, tok, 4000)
    assert_invariants(chapter1, chunks, tok, 4000)
    (whole,) = chunks
    assert whole.metadata["heading"]["heading"] == "1 Scope" and "### 1.4.1 Pallets" in whole.text
    # "2 Other" absorbs its own 2.1 but not a deep block of branch 1.4 that follows it.
    tail = with_spans(doc.blocks[8:])
    chunks = run(tail, tok, 4000)
    assert [c.metadata["heading"]["heading"] for c in chunks] == ["2 Other", "1.4.2 Late"]
    assert "## 2.1 Misc" in chunks[0].text


def test_deep_block_never_absorbs_a_shallower_one(tok):
    ctx = context(tok, 4000)
    blocks = [
        Block(index=0, heading="1.1.1", level=3, parent_headings=["1", "1.1"], content="### 1.1.1\nsmall"),
        Block(index=1, heading="1.2", level=2, parent_headings=["1"], content="## 1.2\nsmall too"),
    ]
    merged = P.level_merge.run(P.heading_blocks.run(blocks, ctx), ctx)
    assert [s.sources for s in merged] == [(0,), (1,)]


def test_tail_absorption_in_one_shot_keeps_every_block_id(tok):
    doc = load("merge")
    n = math.ceil(count(tok, doc.blocks[1].content) / 0.8)
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    big = next(c for c in chunks if "## 1.1 Mechanical" in c.text)
    assert "## 1.2 Paint" in big.text and "## 1.3 Labels" in big.text
    assert {doc.blocks[i].block_id for i in (1, 2, 3)} <= set(big.block_ids)
    # 1.4 is not small: the saturated block does not take it (no ordinary merge at target_ideal).
    assert "## 1.4 Packaging" not in big.text


def test_token_counts_remeasured_and_capped_on_every_fixture(tok):
    for name in ("seed_example", "siblings", "merge", "tables_json", "tables_html", "bridge", "long_blocks",
                 "degrade", "glue_table", "glue_overcap"):
        doc = load(name)
        biggest = max(count(tok, b.content) for b in doc.blocks)
        for n in (max(biggest // 3, 40), biggest):
            assert_invariants(doc, run(doc, tok, n), tok, n)


def test_an_over_cap_merge_is_undone(tok):
    """Should a tokenizer make a join cost more than the slack, the merge is undone, never emitted."""
    a_text, b_text = "alpha beta gamma delta", "epsilon zeta eta theta"
    cap = max(count(tok, a_text), count(tok, b_text))
    ctx = context(tok, cap, overlap=0)
    a = P.Section("a", "a", (), 1, (M.Paragraph(a_text),), a_text, count(tok, a_text), 0, (0,), 0)
    b = P.Section("b", "b", (), 1, (M.Paragraph(b_text),), b_text, count(tok, b_text), 0, (1,), 1)
    joined = M._join(a, b, ctx)
    assert count(tok, joined.content) > cap
    lying = dataclasses.replace(joined, tokens=2)  # an estimate that a join made wrong (pending join)
    out = P._within_cap(lying, ctx)
    assert [(text, tokens) for _, text, tokens, _ in out] == [(a_text, count(tok, a_text)), (b_text, count(tok, b_text))]


# --------------------------------------------------------------------------- §3.7 overlap invariants


@pytest.mark.parametrize("name", ["seed_example", "merge", "siblings"])
def test_content_lines_never_share_text(tok, name):
    doc = load(name)
    biggest = max(count(tok, b.content) for b in doc.blocks)
    chunks = run(doc, tok, biggest)
    for block in doc.blocks:
        for line in block.content.split("\n"):
            assert sum(line in c.text.split("\n") for c in chunks) == 1, line


# --------------------------------------------------------------------------- §6 degradation, provenance


def test_no_blocks_degrades_to_recursive(tok, caplog):
    text = "First paragraph of plain text.\n\n" + "Second paragraph, somewhat longer than the first one. " * 20
    doc = ParsedDocument.from_text(text, doc_id="plain")
    with caplog.at_level(logging.INFO, logger="chunking.strategies.paragraph"):
        chunks = chunk_paragraph(doc, ParagraphConfig(chunk_token_size=60, chunk_overlap_token_size=10), tok)
    # Noted at INFO: plain text has no blocks by nature (test_chunk_text_config has the WARNING case).
    assert any("fallback to recursive_character" in r.message and r.levelno == logging.INFO for r in caplog.records)
    spans = split_recursive(text, tok, 60, 10, CJK_SEPARATORS)
    assert [(c.text, c.char_start, c.char_end) for c in chunks] == [(s.text, s.start, s.end) for s in spans]
    assert all(c.verbatim and c.metadata["fallback"] == "recursive" for c in chunks)


def test_chunk_provenance(tok):
    doc = load("seed_example")
    n = math.ceil(count(tok, doc.blocks[1].content) / 0.8)
    chunks = run(doc, tok, n)
    by_id = {b.block_id: b for b in doc.blocks}
    for c in chunks:
        sources = [by_id[i] for i in c.block_ids]
        assert c.char_start == sources[0].char_start and c.char_end == sources[-1].char_end
        assert (c.page_start, c.page_end) == (0, 0)
        meta = c.metadata["heading"]
        assert c.heading_path == meta["parent_headings"] + [meta["heading"]]
    assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)


def test_registry_style_call_with_default_config(tok):
    doc = load("tables_html")
    chunks = P.SPEC.chunk(doc, P.SPEC.default_config(), tok, None)
    assert_invariants(doc, chunks, tok, 2000)
    assert {i for c in chunks for i in c.block_ids} == {b.block_id for b in doc.blocks}


# --------------------------------------------------------------------------- every rule at once, on random outlines


_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa 中文 測試 Ω x. y, z!".split()


def _random_line(r) -> str:
    k = r.random()
    if k < 0.1:
        rows = [[r.choice(_WORDS) * r.randint(1, 5) for _ in range(r.randint(1, 4))] for _ in range(r.randint(1, 30))]
        return f'<table id="t{r.randint(0, 2)}" format="json">' + json.dumps(rows, ensure_ascii=False) + "</table>"
    if k < 0.15:
        cells = "".join(f"<tr><td>{r.choice(_WORDS) * r.randint(1, 20)}</td></tr>" for _ in range(r.randint(1, 40)))
        return '<table id="h1" format="html"><thead><tr><th>a</th></tr></thead>' + cells + "</table>"
    if k < 0.2:
        return '<table format="csv">' + " ".join(r.choices(_WORDS, k=r.randint(1, 200))) + "</table>"
    return " ".join(r.choices(_WORDS, k=r.randint(1, r.choice([5, 40, 300]))))


def _random_document(r) -> ParsedDocument:
    blocks, open_headings = [], []
    for i in range(r.randint(1, 20)):
        level = r.randint(1, 4)
        open_headings = [h for h in open_headings if h[0] < level]
        body = [_random_line(r) for _ in range(r.choice([0, 0, 1, 3, 10]))]
        blocks.append(Block(block_id=f"b{i}", index=i, heading=f"H{i}", level=level,
                            parent_headings=[h for _, h in open_headings],
                            content="\n".join(["#" * level + f" H{i}", *body])))
        open_headings.append((level, f"H{i}"))
    tables = {"t0": {"table_header": json.dumps([["alpha", "beta"]])}, "t1": {},
              "h1": {"table_header": "<thead><tr><th>a</th></tr></thead>"}}
    return with_spans(blocks, tables)


@pytest.mark.parametrize("seed", range(6))
def test_random_outlines_keep_every_invariant(tok, seed):
    """Cap, exact counts, every block referenced, and no text lost, whatever the outline and N."""
    import random
    from collections import Counter

    r = random.Random(seed)
    for _ in range(3):
        doc = _random_document(r)
        n = r.choice([8, 20, 50, 120, 400, 2000])
        chunks = run(doc, tok, n, overlap=r.choice([0, 1, n // 3, n - 1]))
        assert_invariants(doc, chunks, tok, n)
        assert {i for c in chunks for i in c.block_ids} == {b.block_id for b in doc.blocks}
        visible = lambda t: Counter(ch for ch in t if not ch.isspace() and ch not in '[]",')  # noqa: E731
        assert not visible(doc.text) - visible("".join(c.text for c in chunks))


# --------------------------------------------------------------------------- counting once


class _RecordingTokenizer:
    """The tokenizer under test, recording the length of every text it counts itself."""

    def __init__(self, inner):
        self.inner = inner
        self.counted: list[int] = []

    def encode(self, text):
        self.counted.append(len(text))
        return self.inner.encode(text)

    def decode(self, tokens):
        return self.inner.decode(tokens)

    def count(self, text):
        self.counted.append(len(text))
        return count_tokens(self.inner, text)

    def __getattr__(self, name):  # span_counter, token_byte_lengths: the inner tokenizer's
        return getattr(self.inner, name)


def _prose_blocks(count_blocks: int, lines: int, words: int) -> list[Block]:
    import random

    r = random.Random(7)
    vocab = ["alpha", "beta", "gamma", "delta", "the", "of", "quick", "brown", "fox", "jumps", "over", "lazy", "dog."]
    blocks = []
    for i in range(count_blocks):
        body = [" ".join(r.choices(vocab, k=words)) for _ in range(lines)]
        blocks.append(Block(block_id=f"b{i}", index=i, heading=f"H{i}", level=1 + i % 3, parent_headings=[],
                            content="\n".join([f"{'#' * (1 + i % 3)} H{i}", *body])))
    return blocks


def test_counts_from_the_layout_are_exact(tok):
    """Blocks, lines and merged spans are counted from one encoding of the layout, exactly."""
    doc = with_spans(_prose_blocks(24, 4, 40))
    recording = _RecordingTokenizer(tok)
    ctx = context(recording, 2000)
    sections = P.heading_blocks.run(doc.blocks, ctx)
    assert len(ctx.layout) > 4096  # long enough for tiktoken's span index
    assert recording.counted == []  # every block answered by the tokenizer's span counter
    for sec in sections:
        assert sec.pending == 0 and sec.tokens == count(tok, sec.content)
        assert ctx.layout.startswith(sec.content, sec.paragraphs[0].at)
    # Consecutive blocks as LevelMerge joins them are spans of the layout too.
    merged = sections[3].content + M.BLOCK_JOINER + sections[4].content
    assert ctx.count_at(merged, sections[3].paragraphs[0].at) == count(tok, merged)
    # A position that does not hold the text only costs a count, never a wrong one.
    assert ctx.count_at(sections[4].content, sections[3].paragraphs[0].at) == count(tok, sections[4].content)
    assert ctx.count_at("not in the layout", 0) == count(tok, "not in the layout")


def test_one_line_block_proven_over_cap_is_left_to_r_uncounted(tok):
    """A long one-line block over the cap is never counted whole by P: R measures it."""
    n = 50
    line = " ".join(["lorem ipsum dolor sit amet, consectetur."] * (8 * n))
    doc = with_spans([Block(block_id="b0", index=0, heading="H", level=1, parent_headings=[], content=line)])
    recording = _RecordingTokenizer(tok)
    ctx = context(recording, n)
    [section] = P.heading_blocks.run(doc.blocks, ctx)
    assert section.over_cap and n < section.tokens <= count(tok, line)
    assert len(line) not in recording.counted
    chunks = run(doc, tok, n)
    assert_invariants(doc, chunks, tok, n)
    assert [c.text for c in chunks] == [s.text for s in split_recursive(line, tok, n, min(100, n - 1))]


def test_over_limit_bound_never_claims_a_text_within_the_limit(tok):
    ctx = context(tok, 10)
    line = " ".join(["word"] * 2000)
    assert ctx.over_limit_bound(line, count(tok, line)) is None
    assert ctx.over_limit_bound(line[:200], 10) is None  # too short to be worth a prefix count
    bound = ctx.over_limit_bound(line, 10)
    assert bound is not None and 10 < bound <= count(tok, line)


# --------------------------------------------------------------------------- provenance of the pieces of a block


def _assert_own_span(doc: ParsedDocument, chunk) -> None:
    """A verbatim chunk's span holds exactly its text; a rewritten one says so and stays near its text."""
    assert 0 <= chunk.char_start < chunk.char_end <= len(doc.text)
    assert chunk.verbatim == (doc.text[chunk.char_start : chunk.char_end] == chunk.text)
    if chunk.verbatim:
        return
    # Rewritten (merged blocks, injected headers, copied bridge text): the span covers
    # the source it was cut from, never much more than the chunk holds.
    assert chunk.char_end - chunk.char_start <= 3 * len(chunk.text) + 200, chunk.text[:80]


def test_pieces_of_a_long_block_carry_their_own_span_pages_and_block(tok):
    """R pieces of one over-long content line: each its own verbatim span, not the block's."""
    words = " ".join(f"word{i}" for i in range(900))
    blocks = [
        Block(block_id="b0", index=0, heading="Intro", level=1, content="# Intro\nShort opening line."),
        Block(block_id="b1", index=1, heading="Long", level=1, content=f"# Long\n{words}"),
        Block(block_id="b2", index=2, heading="Tail", level=1, content="# Tail\nA closing line."),
    ]
    located = with_spans(blocks)
    half = located.blocks[1].char_start + len(located.blocks[1].content) // 2
    doc = located.model_copy(update={"pages": [
        Page(page_num=0, char_offset=0, text=located.text[:half]),
        Page(page_num=1, char_offset=half, text=located.text[half:]),
    ]})
    n = count(tok, words) // 6
    chunks = run(doc, tok, n, overlap=n // 5)
    # The R pieces of the long line (its last one may have been merged with "Tail").
    pieces = [c for c in chunks if c.text.startswith("word") and "#" not in c.text]
    assert len(pieces) >= 4
    for c in chunks:
        _assert_own_span(doc, c)
    for c in pieces:
        assert c.verbatim and doc.text[c.char_start : c.char_end] == c.text
        assert c.block_ids == ["b1"]
        assert (c.page_start, c.page_end) == (doc.page_at(c.char_start), doc.page_at(c.char_end - 1))
    assert {c.page_start for c in pieces} == {0, 1}
    # Spans follow the text: increasing, overlapping only by R's overlap.
    starts = [c.char_start for c in chunks]
    assert starts == sorted(starts)


def test_spans_of_every_piece_on_the_fixtures(tok):
    """Anchor sub-blocks, table slices, bridges, glued headings: every chunk's span is its own."""
    for name in ("long_blocks", "tables_json", "tables_html", "bridge", "degrade", "glue_overcap", "seed_example"):
        doc = load(name)
        for n in (60, 200):
            for c in run(doc, tok, n, overlap=n // 4):
                _assert_own_span(doc, c)


def test_glued_heading_that_fills_the_cap_lists_only_the_blocks_each_piece_holds():
    # A body-less heading glued to its child, the heading alone at the cap: the glued text is
    # split by R, and every piece listed both blocks, the heading's piece the child's block
    # and the child's piece the heading's (found by fuzzing).
    doc = with_spans([
        Block(block_id="b1", index=0, heading="节 1", level=2, content="# 节 1"),
        Block(block_id="b3", index=1, heading="2.3 Part", level=3, parent_headings=["节 1", "节 2"], content="é"),
    ])
    chunks = chunk_paragraph(doc, ParagraphConfig(chunk_token_size=7, chunk_overlap_token_size=3), default_tokenizer())
    assert [(c.text, c.block_ids) for c in chunks] == [("# 节 1", ["b1"]), ("é", ["b3"])]
