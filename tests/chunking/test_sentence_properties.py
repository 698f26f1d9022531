"""Property tests over random text with CJK, emoji, long words, figures and page breaks."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunking.model import Page, ParsedDocument
from chunking.strategies.sentence import FIGURE, SentenceConfig, chunk_sentence
from chunking.strategies.sentence_window import SentenceWindowConfig, chunk_sentence_window, window_spans
from chunking.tokenizers import TiktokenTokenizer

TOKENIZER = TiktokenTokenizer()
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

words = st.sampled_from(["the", "data", "Dr.", "e.g.", "0.95", "U.S.", "model", "Über", "naïve", "x"])
cjk = st.text(alphabet="这是一个句子中文日本語のテキスト", min_size=1, max_size=12)
emoji = st.sampled_from(["😀", "🚀🚀", "👩‍💻", "🇩🇪"])
long_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=30, max_size=400)
punctuation = st.sampled_from([". ", "! ", "? ", "。", "！", "... ", ", ", "\n", "\n\n", " ", " "])
figure = st.text(alphabet="abc xyz=\"/", max_size=300).map(lambda body: f"<figure>{body}</figure>")
piece = st.one_of(words, words, words, cjk, emoji, long_word, punctuation, punctuation, figure)
page_text = st.lists(piece, max_size=60).map("".join)
pages_strategy = st.lists(page_text, min_size=1, max_size=3)


def document(texts: list[str]) -> ParsedDocument:
    pages, offset = [], 0
    for number, text in enumerate(texts):
        pages.append(Page(page_num=number, char_offset=offset, text=text))
        offset += len(text)
    return ParsedDocument(doc_id="p", text="".join(texts), pages=pages)


def no_ws(text: str) -> str:
    return re.sub(r"\s+", "", text)


def is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(ch in it for ch in needle)


@SETTINGS
@given(pages_strategy, st.sampled_from([24, 60, 500]), st.sampled_from([120, 300, 1000]))
def test_sentence_strategy_properties(texts, cap, section_length):
    doc = document(texts)
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=section_length)
    check_sentence_chunks(doc, chunk_sentence(doc, config, TOKENIZER), cap)


def check_sentence_chunks(doc: ParsedDocument, chunks: list, cap: int) -> None:
    # No chunk above the cap except figure chunks; counts are exact.
    for c in chunks:
        assert c.token_count == len(TOKENIZER.encode(c.text))
        assert c.token_count <= cap or c.metadata.get("cap_exempt") == "figure"
        assert c.text.strip() == c.text and c.text

    # Figures intact, never split, never duplicated.
    for match in FIGURE.finditer(doc.text):
        assert sum(c.text.count(match.group()) for c in chunks) == doc.text.count(match.group())
    for c in chunks:
        assert c.text.count("<figure>") == c.text.count("</figure>")

    # Order preserved and every input character appears in the output: the input
    # is a subsequence of the chunks read in order (overlaps only add repeats).
    assert is_subsequence(no_ws(doc.text), no_ws("".join(c.text for c in chunks)))
    # The owning page is one the chunk has text on.
    for c in chunks:
        assert c.page_start <= c.metadata["page_num"] <= c.page_end, c
    # Document order by span too: the midpoint split's duplicated region is taken only
    # where both halves are final pieces, so no piece starts (or ends) before the last.
    assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)
    assert [c.char_end for c in chunks] == sorted(c.char_end for c in chunks)

    # Offsets map back to the input.
    for c in chunks:
        source = no_ws(doc.text[c.char_start : c.char_end])
        own = c.text[: len(c.text) - c.metadata.get("overlap_chars", 0)]
        assert source.startswith(no_ws(own))
        if "overlap_chars" in c.metadata:
            assert no_ws(c.text[len(own) :]) in source
        if c.verbatim:
            assert doc.text[c.char_start : c.char_end] == c.text
        assert doc.pages[0].page_num <= c.page_start <= c.page_end <= doc.pages[-1].page_num


@SETTINGS
@given(pages_strategy, st.sampled_from([16, 64, 512]), st.sampled_from([0, 8, 30]))
def test_sentence_window_properties(texts, size, overlap):
    doc = document(texts)
    overlap = min(overlap, size - 1)
    config = SentenceWindowConfig(chunk_size=size, overlap=overlap)
    chunks = chunk_sentence_window(doc, config, TOKENIZER)
    # The windows are in document order; the chunks are not always: a window that BPE
    # counts over the cap once joined is re-split, and its last piece may start after
    # the next (overlapping) window does (found by this test: "...</figure>, . ！the"
    # at size 16, overlap 8 gives chunks starting at 46, 101, then 99).
    starts = [start for start, _ in window_spans(doc.text, config, TOKENIZER)]
    assert starts == sorted(starts)
    check_window_chunks(doc, chunks, size, ordered=False)


def check_window_chunks(doc: ParsedDocument, chunks: list, size: int, ordered: bool = True) -> None:
    for c in chunks:
        assert doc.text[c.char_start : c.char_end] == c.text and c.verbatim
        assert c.token_count == len(TOKENIZER.encode(c.text)) <= size
    if ordered:
        assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)
    covered = set()
    for c in chunks:
        covered.update(range(c.char_start, c.char_end))
    assert all(i in covered for i, ch in enumerate(doc.text) if not ch.isspace())


# Long documents (each page several thousand characters): the segmenter's numpy path
# and the span counter's index over the document's one encoding are what run here
# (short texts take the per-candidate path and count each span directly).
code = st.sampled_from(
    [
        "def f(x):\n    return x.y()\n", "    if a > b:\n        a = b.c(0.95)\n", "os.path.join(a, b)",
        "x = [1, 2, 3]  # approx. value\n", "print('Done.')\n", "```\n", "{\"k\": \"v.w\"}", "\tcall();\n",
    ]
)  # fmt: skip
pdf_line = st.sampled_from(
    ["infor-\nmation", "Fig. 3 shows", "\n2\n", "see p. 12 and", "(continued) ", "Dr. J. Smith wrote", "U.S. The next"]
)
long_piece = st.one_of(words, words, cjk, code, pdf_line, punctuation, punctuation, long_word, emoji)
long_page = st.lists(long_piece, min_size=200, max_size=600).map("".join)
LONG_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_PROSE = "The model reads the data. It stops at the end of each page, e.g. here, and then goes on. "


def long_document(texts: list[str]) -> ParsedDocument:
    # Pages that end mid-sentence (no final punctuation), as PDF pages do; padded with
    # prose so every document is long enough for the numpy and index paths.
    texts = [t.rstrip(". ") for t in texts]
    texts[-1] += _PROSE * max(0, 1 + (4096 - sum(map(len, texts))) // len(_PROSE))
    doc = document(texts)
    assert len(doc.text) >= 4096
    return doc


@LONG_SETTINGS
@given(st.lists(long_page, min_size=1, max_size=3), st.sampled_from([24, 120, 500]))
def test_sentence_on_long_cjk_code_and_pdf_pages_with_overlap(texts, cap):
    doc = long_document(texts)
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=4 * cap, semantic_overlap_percent=10)
    chunks = chunk_sentence(doc, config, TOKENIZER)
    check_sentence_chunks(doc, chunks, cap)


@LONG_SETTINGS
@given(st.lists(long_page, min_size=1, max_size=3), st.sampled_from([16, 128, 512]), st.sampled_from([4, 30]))
def test_sentence_window_on_long_cjk_code_and_pdf_pages_with_overlap(texts, size, overlap):
    doc = long_document(texts)
    config = SentenceWindowConfig(chunk_size=size, overlap=min(overlap, size - 1))
    chunks = chunk_sentence_window(doc, config, TOKENIZER)
    # Not checked for order: a window that BPE counts over the cap once joined is
    # re-split, and its last pieces may start after the next (overlapping) window
    # does. Known and kept (ordering them would change the corpus output).
    check_window_chunks(doc, chunks, size, ordered=False)


# The fast paths of ``sentence`` (issue 14, session 6) against the straightforward
# computations they replaced, on every unit and draft of random multi-page documents.
def _reference_joiner(text: str, current, following, prefix: str) -> str:
    gap = text[current.units[-1].end : following.units[0].start]
    last = text[current.units[-1].start : current.units[-1].end]
    first = text[following.units[0].start : following.units[0].end]
    gap = last[len(last.rstrip()) :] + gap + first[: len(first) - len(first.lstrip())]
    if gap and gap.isspace() and current.units[-1].end <= following.units[0].start:
        return gap
    return " " if current.text[-1:].isalnum() and prefix[:1].isalnum() else ""


@SETTINGS
@given(pages_strategy, st.sampled_from([24, 60, 500]), st.sampled_from([120, 300, 1000]))
def test_sentence_fast_paths_match_the_straightforward_computations(texts, cap, section_length):
    from chunking.strategies.sentence import _Splitter

    doc = document(texts)
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=section_length)
    splitter = _Splitter(doc.text, config, TOKENIZER)
    drafts = []
    for index, page in enumerate(doc.pages):
        units = splitter.page_units(index, page.char_offset, page.char_offset + len(page.text))
        for unit in units:
            # A unit known to fit is taken whole; split_oversized would measure and keep it.
            assert splitter.unit_pieces(unit) == splitter.split_oversized(unit.start, unit.end)
            assert unit.tokens == len(TOKENIZER.encode(doc.text[unit.start : unit.end]))
        drafts += [d for d in splitter.page_drafts(units) if splitter.assemble(d)]
    for draft in drafts:
        first, last = draft.units[0], draft.units[-1]
        raw_first, raw_last = doc.text[first.start : first.end], doc.text[last.start : last.end]
        assert splitter.text_start(draft) == first.start + len(raw_first) - len(raw_first.lstrip())
        assert splitter.text_end(draft) == last.end - (len(raw_last) - len(raw_last.rstrip()))
        assert splitter.is_figure(draft) == any(u.figure for u in draft.units)
    for current, following in zip(drafts, drafts[1:]):
        for prefix in ("word", ", x", following.text[:10]):
            assert splitter.overlap_joiner(current, following, prefix) == _reference_joiner(doc.text, current, following, prefix)
    # Every chunk: verbatim exactly when its text is its source span, counts exact.
    for chunk in chunk_sentence(doc, config, TOKENIZER):
        assert chunk.verbatim == (chunk.text == doc.text[chunk.char_start : chunk.char_end])
        assert chunk.token_count == len(TOKENIZER.encode(chunk.text))


def _reference_pack(text: str, units: list, cap: int, max_chars: int, reference: bool) -> list[list]:
    """The straightforward packing, on one ``Unit`` tuple per span (what ``_Splitter.pack``
    did before it read parallel lists): a figure closes its group (joining the text
    before it, if any), a piece or a unit over the budget in reference mode is a group of its own, a unit that
    overlaps the previous one or passes the cap or the budget starts a new group."""
    groups, acc, chars, tokens = [], [], 0, 0
    for unit in units:
        if unit.figure:
            has_text = bool(acc) if reference else any(text[u.start : u.end].strip() for u in acc)
            groups.append([*acc, unit] if has_text else [unit])
            acc, chars, tokens = [], 0, 0
            continue
        size = unit.end - unit.start
        # Reference mode: a piece, or a span over the budget (the reference's empty builder
        # refuses it too), is appended as a chunk of its own and leaves the builder empty.
        if reference and (unit.piece or size > max_chars):
            if acc:
                groups.append(acc)
            groups.append([unit])
            acc, chars, tokens = [], 0, 0
            continue
        if acc and (unit.start < acc[-1].end or chars + size > max_chars or tokens + unit.tokens > cap):
            groups.append(acc)
            acc, chars, tokens = [], 0, 0
        acc.append(unit)
        chars += size
        tokens += unit.tokens
    return groups + [acc] if acc else groups


def _check_packing_against_reference(doc: ParsedDocument, config: SentenceConfig) -> None:
    from chunking.strategies.sentence import _Splitter, _Units

    splitter = _Splitter(doc.text, config, TOKENIZER)
    every_unit = []
    for index, page in enumerate(doc.pages):
        units = splitter.page_units(index, page.char_offset, page.char_offset + len(page.text))
        tuples = list(units)  # one Unit per span, built by the straightforward path
        every_unit += tuples
        assert [u.tokens for u in tuples] == [len(TOKENIZER.encode(doc.text[u.start : u.end])) for u in tuples]
        drafts = splitter.page_drafts(units)
        expected = _reference_pack(doc.text, tuples, config.max_tokens_per_section, config.max_section_length,
                                   config.reference_mode)
        assert [d.units for d in drafts] == expected
        # A store rebuilt from the tuples (as a carried run is) packs alike.
        assert [tuples[lo:hi] for lo, hi in splitter.pack(_Units.of(tuples))] == expected
        for draft, group in zip(splitter.page_drafts(units), expected):  # fresh drafts: answered from the lists
            assert draft._units is None
            assert draft.tokens == sum(u.tokens for u in group)
            assert draft.figure == any(u.figure for u in group)
            assert draft.first_span == (group[0].start, group[0].end)
            assert draft.last_span == (group[-1].start, group[-1].end)
            contiguous = all(b.start == a.end and b.page == a.page for a, b in zip(group, group[1:]))
            assert units.contiguous(draft.lo, draft.hi) == contiguous
            joined = _draft_of(group, draft.home)  # assembled from its units' list, by join
            assert splitter.assemble(draft) == (splitter.assemble(joined) or "")
            if draft.text:
                assert (draft.start, draft.end) == (joined.start, joined.end)
            if draft.sliced:  # (store-backed, contiguous, native: most drafts)
                assert draft.text == doc.text[draft.start : draft.end]
    # Runs across pages (as a carried fragment is): contiguous only within a page.
    store = _Units.of(every_unit)
    for lo in range(0, len(every_unit), max(len(every_unit) // 20, 1)):
        for hi in range(lo + 1, min(lo + 40, len(every_unit)) + 1):
            run = every_unit[lo:hi]
            assert store.contiguous(lo, hi) == all(b.start == a.end and b.page == a.page for a, b in zip(run, run[1:]))
            assert store.tokens_of(lo, hi) == sum(u.tokens for u in run)
            assert store.any_figure(lo, hi) == any(u.figure for u in run)


def _draft_of(units: list, home: int):
    from chunking.strategies.sentence import _Draft

    return _Draft(units, home)


_PACKING_EXAMPLES = [
    ["\n\n<figure>a</figure> Text after. More text.", "  <figure>b</figure>\n", "next page"],
    ["Some text. \n\n", "\n \n<figure>c</figure>tail. " + "word " * 300],
    ["x" * 3000 + " end.", "lower start of page two. Done."],
]


@pytest.mark.parametrize("texts", _PACKING_EXAMPLES)
@pytest.mark.parametrize("reference", [False, True])
def test_sentence_packing_examples_match_packing_unit_tuples(texts, reference):
    # Whitespace before a figure (left out of its group), a midpoint split, pages that join.
    config = SentenceConfig(max_tokens_per_section=40, max_section_length=200, reference_mode=reference)
    _check_packing_against_reference(document(texts), config)


@SETTINGS
@given(pages_strategy, st.sampled_from([8, 24, 500]), st.sampled_from([40, 120, 1000]), st.booleans())
def test_sentence_packing_over_unit_lists_matches_packing_unit_tuples(texts, cap, section_length, reference):
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=section_length, reference_mode=reference)
    _check_packing_against_reference(document(texts), config)


@LONG_SETTINGS
@given(st.lists(long_page, min_size=1, max_size=3), st.sampled_from([24, 120, 500]), st.booleans())
def test_sentence_packing_over_unit_lists_matches_on_long_pages(texts, cap, reference):
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=4 * cap, reference_mode=reference)
    _check_packing_against_reference(long_document(texts), config)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pages_strategy, st.sampled_from(["numbered", "all page 0", "one page", "blocks"]), st.sampled_from([24, 500]))
def test_provenance_shortcut_gives_what_attach_provenance_gives(monkeypatch, texts, shape, cap):
    # attach_provenance skips its per-chunk look-ups where they change nothing (every page
    # numbered 0, no located block); here it is compared with those look-ups themselves,
    # on the chunks both strategies make before provenance, for documents of every shape.
    from chunking import model
    from chunking.model import Block, attach_provenance
    from chunking.strategies import sentence, sentence_window

    doc = document(texts)
    if shape == "all page 0":
        doc = doc.model_copy(update={"pages": [p.model_copy(update={"page_num": 0}) for p in doc.pages]})
    elif shape == "one page":
        doc = ParsedDocument.from_text(doc.text)
    elif shape == "blocks" and doc.text:
        doc = doc.model_copy(update={"pages": [p.model_copy(update={"page_num": 0}) for p in doc.pages],
                                     "blocks": [Block(block_id="b0", index=0, heading="H", content=doc.text, char_start=0,
                                                      char_end=len(doc.text))]})
    raw: list = []
    monkeypatch.setattr(sentence, "attach_provenance", lambda d, chunks: raw.append(chunks) or chunks)
    monkeypatch.setattr(sentence_window, "attach_provenance", lambda d, chunks: raw.append(chunks) or chunks)
    chunk_sentence(doc, SentenceConfig(max_tokens_per_section=cap), TOKENIZER)
    chunk_sentence_window(doc, SentenceWindowConfig(chunk_size=cap, overlap=0), TOKENIZER)
    monkeypatch.undo()
    assert len(raw) == 2
    for chunks in raw:
        assert attach_provenance(doc, chunks) == model._provenance_of_each(doc, chunks, model._located_blocks(doc))


def _nearest_listed(positions: list[int], middle: int, lo: int, hi: int) -> int | None:
    """The straightforward answer: every match listed, the one in [lo, hi) nearest middle (earlier on a tie)."""
    import bisect

    i = bisect.bisect_right(positions, middle)
    before = positions[i - 1] if i > 0 and positions[i - 1] >= lo else None
    after = positions[i] if i < len(positions) and positions[i] < hi else None
    if before is None or (after is not None and after - middle < middle - before):
        return after
    return before


boundary_text = st.lists(st.sampled_from(["a", "bc", ".", "!", "?", "。", "，", " ", "\n", "\t", ",", "0.9", "x.y", "、", "\u3000",
                                          "é", "😀", "...", ".\n", "(", ")"]), max_size=120).map("".join)


@settings(max_examples=300, deadline=None)
@given(boundary_text, st.data(), st.booleans())
def test_span_boundaries_near_a_midpoint_match_the_listed_matches(text, data, reference):
    # split_oversized asks _SpanBoundaries for the sentence end (else word break) nearest
    # each midpoint, searched next to it; the list of every match of the span must agree.
    from chunking.strategies.sentence import _Splitter, _SpanBoundaries

    splitter = _Splitter(text, SentenceConfig(reference_mode=reference), TOKENIZER)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    boundaries = _SpanBoundaries(text, end)
    for pattern in (splitter.sentence_end_pattern, splitter.break_char_pattern):
        positions = [m.start() for m in pattern.finditer(text, start, end)]
        for _ in range(5):
            middle = data.draw(st.integers(start, end))
            lo = data.draw(st.integers(start, middle + 1))
            hi = data.draw(st.integers(middle, end))
            assert boundaries.nearest(pattern, middle, lo, hi) == _nearest_listed(positions, middle, lo, hi), (
                pattern.pattern, start, end, middle, lo, hi)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(0, 9), st.sampled_from("ttttwfpo")), max_size=30),
    st.integers(1, 25),
    st.integers(1, 25),
    st.booleans(),
)
def test_pack_matches_the_unit_by_unit_rule_at_exact_bounds(specs, cap, max_chars, reference):
    # Small sizes, counts and limits, so groups often end exactly at the cap or the budget;
    # kinds: t text, w whitespace, f figure, p piece of an
    # oversized span, o a piece starting one character before the previous unit ends.
    from chunking.strategies.sentence import Unit, _Splitter, _Units

    text, units, at = "", [], 0
    for size, tokens, kind in specs:
        start = at - 1 if kind == "o" and units and not units[-1].figure and units[-1].end - units[-1].start > 1 else at
        text += (" " if kind == "w" else "x") * (start + size - at) if start + size > at else ""
        units.append(Unit(start, start + size, 0, tokens, kind == "f", kind in "po"))
        at = max(at, start + size)
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=max_chars, reference_mode=reference)
    splitter = _Splitter(text, config, TOKENIZER)
    expected = _reference_pack(text, units, cap, max_chars, reference)
    assert [units[lo:hi] for lo, hi in splitter.pack(_Units.of(units))] == expected


@SETTINGS
@given(st.text(alphabet="ab \n\t。", min_size=1, max_size=40), st.lists(st.integers(1, 39), max_size=8), st.data())
def test_sentence_assemble_from_a_store_matches_joining_the_units(text, cuts, data):
    # Contiguous units of any bounds, blank ones included (a blank piece of an oversized span can
    # start a group, and the next unit start with whitespace): a group assembled from the store
    # (sliced between its trimmed first and last units) is what joining its units gives.
    from chunking.strategies.sentence import Unit, _Draft, _Splitter, _Units

    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    units = [Unit(s, e, 0, e - s) for s, e in zip(bounds, bounds[1:])]
    lo = data.draw(st.integers(0, len(units) - 1))
    hi = data.draw(st.integers(lo + 1, len(units)))
    splitter = _Splitter(text, SentenceConfig(), TOKENIZER)
    stored, joined = _Draft(None, 0, _Units.of(units), lo, hi), _Draft(units[lo:hi], 0)
    assert splitter.assemble(stored) == splitter.assemble(joined) == text[units[lo].start : units[hi - 1].end].strip()
    if stored.text:
        assert (stored.start, stored.end) == (joined.start, joined.end)
    if stored.sliced:
        assert stored.text == text[stored.start : stored.end]
