"""The ``sentence`` strategy: the seed's worked examples, verbatim, plus its rules.

The seed's examples "use a smaller token limit than the actual limit of 500"
without saying which; each test names the limit that reproduces the example.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chunking.model import Page, ParsedDocument
from chunking.segmenter import ends_with_sentence_ending, sentence_bounds
from chunking.strategies.sentence import SPEC, SentenceConfig, chunk_sentence, looks_like_heading, split_oversized
from chunking.tokenizers import CharTokenizer, TiktokenTokenizer


@pytest.fixture(scope="module")
def tiktoken_tokenizer():
    return TiktokenTokenizer()


def paged(*texts: str) -> ParsedDocument:
    pages, offset = [], 0
    for number, text in enumerate(texts):
        pages.append(Page(page_num=number, char_offset=offset, text=text))
        offset += len(text)
    return ParsedDocument(doc_id="d", text="".join(texts), pages=pages)


def texts_of(doc, tokenizer, **config):
    return [c.text for c in chunk_sentence(doc, SentenceConfig(**config), tokenizer)]


def test_example_1_simple_page(tiktoken_tokenizer):
    text = "Sentence one. Sentence two is slightly longer. Final short one."
    assert texts_of(paged(text), tiktoken_tokenizer) == [
        "Sentence one. Sentence two is slightly longer. Final short one."
    ]


def test_example_2_atomic_figure_attached_to_preceding_text(tiktoken_tokenizer):
    text = (
        'Heading line\nIntro before the figure. <figure><img src="x.png" alt="X"></figure> '
        "Text that follows the figure. Another sentence."
    )
    chunks = chunk_sentence(paged(text), SentenceConfig(), tiktoken_tokenizer)
    assert [c.text for c in chunks] == [
        'Heading line\nIntro before the figure. <figure><img src="x.png" alt="X"></figure>',
        "Text that follows the figure. Another sentence.",
    ]
    assert chunks[0].metadata["cap_exempt"] == "figure"
    assert "cap_exempt" not in chunks[1].metadata


EXAMPLE_3 = (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)


def test_example_3_midpoint_split_with_duplicated_overlap():
    # 124 chars, 1 char = 1 token, a 100-token limit: no boundary near the middle.
    chunks = texts_of(paged(EXAMPLE_3), CharTokenizer(), max_tokens_per_section=100)
    assert chunks == [
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL",
        "yz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    ]
    duplicated = "yz0123456789ABCDEFGHIJKL"
    assert len(duplicated) == 2 * int(124 * 0.10)
    assert chunks[0].endswith(duplicated) and chunks[1].startswith(duplicated)


def test_a_long_run_without_boundary_is_cut_in_document_order():
    # 1,000 boundary-less chars, 100 per chunk: the seed's midpoint overlap (10% of the cut
    # span on each side) at every cut whose halves are final pieces; pieces in order.
    text = (EXAMPLE_3 * 9)[:1000]
    pieces = split_oversized(text, CharTokenizer(), SentenceConfig(max_tokens_per_section=100))
    starts, ends = [s for s, _ in pieces], [e for _, e in pieces]
    assert starts == sorted(starts) and ends == sorted(ends)
    assert starts[0] == 0 and ends[-1] == 1000 and all(e - s <= 100 for s, e in pieces)
    # 1000 -> 8 spans of 125 chars, each cut at its middle with 12 chars each side.
    assert pieces[:2] == [(0, 62 + 12), (62 - 12, 125)]
    assert sum(e - s for s, e in pieces) == 1000 + 8 * 24
    # Halves that fit the cap only with less than the 10% share the most that fits:
    # 190 chars, halves of 95, 19 more each would be 114 > 100, so 5 more each.
    assert split_oversized(text[:190], CharTokenizer(), SentenceConfig(max_tokens_per_section=100)) == [
        (0, 100), (90, 190)]
    # The reference duplicates at its first cut instead (the compat module's behaviour):
    # its second half starts before pieces of the first half do.
    reference = split_oversized(text, CharTokenizer(), SentenceConfig(max_tokens_per_section=100, reference_mode=True))
    assert [s for s, _ in reference] != sorted(s for s, _ in reference)


def test_example_3b_word_break_instead_of_overlap():
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron"
    chunks = texts_of(paged(text), CharTokenizer(), max_tokens_per_section=60)
    assert chunks[0] == "alpha beta gamma delta epsilon zeta eta"
    assert chunks[1].startswith("theta iota kappa lambda")
    assert len(chunks) == 2  # no duplicated midpoint region


def test_example_4_cross_page_merge(tiktoken_tokenizer):
    doc = paged(
        "The procedure continues to operate",
        "under heavy load and completes successfully. Follow-up sentence.",
    )
    chunks = chunk_sentence(doc, SentenceConfig(max_tokens_per_section=16), tiktoken_tokenizer)
    assert [c.text for c in chunks] == [
        "The procedure continues to operate under heavy load and completes successfully.",
        "Follow-up sentence.",
    ]
    assert (chunks[0].page_start, chunks[0].page_end, chunks[0].metadata["page_num"]) == (0, 1, 0)
    assert (chunks[1].page_start, chunks[1].page_end) == (1, 1)
    assert not chunks[0].verbatim  # the page join injected a space
    assert (chunks[0].char_start, chunks[0].char_end) == (0, doc.text.index(" Follow-up"))


def test_example_5_trailing_fragment_carry_forward(tiktoken_tokenizer):
    doc = paged(
        "Intro sentence finishes here. This clause is long but near the limit and the following portion would push it over",
        "so the trailing fragment carry‑forward moves this trailing portion forward. Remaining context continues here.",
    )
    chunks = chunk_sentence(doc, SentenceConfig(max_tokens_per_section=36), tiktoken_tokenizer)
    assert [c.text for c in chunks] == [
        "Intro sentence finishes here.",
        "This clause is long but near the limit and the following portion would push it over so the trailing "
        "fragment carry‑forward moves this trailing portion forward. Remaining context continues here.",
    ]
    assert chunks[1].metadata["page_num"] == 1 and chunks[1].page_start == 0


def test_full_merge_when_it_fits(tiktoken_tokenizer):
    doc = paged("The procedure continues to operate", "under heavy load. Then more.")
    assert texts_of(doc, tiktoken_tokenizer) == ["The procedure continues to operate under heavy load. Then more."]


def test_a_blank_page_does_not_stop_the_repair_across_it(tiktoken_tokenizer):
    # A page of whitespace makes no chunk; the sentence cut by it is repaired as across an
    # empty page (it used to be left in two pieces: the repair was tried against the blank page).
    expected = ["The procedure continues to operate under heavy load. Done."]
    for blank in ("", "  \n", "\n\n\t "):
        doc = paged("The procedure continues", blank, "to operate under heavy load. Done.")
        assert texts_of(doc, tiktoken_tokenizer) == expected, repr(blank)


def test_a_sentence_over_three_pages_is_repaired_across_both_breaks(tiktoken_tokenizer):
    # Natively the merged chunk can take the next page's start too; the reference (reference_mode)
    # holds nothing after a page that merged whole, and leaves the third page's start alone.
    doc = paged("The procedure continues", "to operate", "under heavy load. Done.")
    assert texts_of(doc, tiktoken_tokenizer) == ["The procedure continues to operate under heavy load. Done."]
    assert texts_of(doc, tiktoken_tokenizer, reference_mode=True) == ["The procedure continues to operate",
                                                                      "under heavy load. Done."]


def test_no_merge_when_next_page_starts_a_new_sentence_or_heading(tiktoken_tokenizer):
    assert texts_of(paged("Done here", "Next page starts."), tiktoken_tokenizer) == ["Done here", "Next page starts."]
    assert texts_of(paged("Ends well.", "lower start."), tiktoken_tokenizer) == ["Ends well.", "lower start."]
    assert texts_of(paged("A list follows", "- item one\n- item two"), tiktoken_tokenizer) == [
        "A list follows",
        "- item one\n- item two",
    ]


def test_semantic_overlap_appends_a_prefix_of_the_next_chunk(tiktoken_tokenizer):
    sentences = [f"Sentence number {i} talks about topic {i} in some detail." for i in range(40)]
    text = " ".join(sentences)
    chunks = chunk_sentence(paged(text), SentenceConfig(), tiktoken_tokenizer)
    assert len(chunks) >= 2
    for current, following in zip(chunks, chunks[1:]):
        source = text[current.char_start : current.char_end]
        assert current.text.startswith(text[current.char_start : current.char_start + 20])
        # The earlier chunk ends with a whole-sentence prefix of the next one.
        overlap = current.text[len(source) - (current.char_end - following.char_start) :]
        assert following.text.startswith(overlap.strip())
        assert overlap.strip().endswith(".")
        assert current.token_count <= 500 and len(current.text) <= 1200
    assert chunks[-1].text == text[chunks[-1].char_start : chunks[-1].char_end]


def test_overlap_disabled_gives_disjoint_chunks(tiktoken_tokenizer):
    text = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(60))
    chunks = chunk_sentence(paged(text), SentenceConfig(semantic_overlap_percent=0), tiktoken_tokenizer)
    assert all(c.verbatim and c.text == text[c.char_start : c.char_end] for c in chunks)
    assert "".join(c.text for c in chunks).replace(" ", "") == text.replace(" ", "")


def test_figures_never_take_or_give_overlap_and_may_exceed_the_cap():
    figure = "<figure>" + "x" * 300 + "</figure>"
    text = "Some words here. " * 3 + figure + " After the figure. More words follow here."
    chunks = chunk_sentence(paged(text), SentenceConfig(max_tokens_per_section=120), CharTokenizer())
    figure_chunks = [c for c in chunks if figure in c.text]
    assert len(figure_chunks) == 1 and figure_chunks[0].metadata["cap_exempt"] == "figure"
    assert figure_chunks[0].token_count > 120
    assert figure_chunks[0].text.endswith("</figure>")
    assert sum(c.text.count("<figure>") for c in chunks) == 1


def test_figure_alone_when_nothing_precedes_it(tiktoken_tokenizer):
    text = "<figure>chart</figure> Then text."
    assert texts_of(paged(text), tiktoken_tokenizer) == ["<figure>chart</figure>", "Then text."]


def test_accumulator_respects_soft_character_budget(tiktoken_tokenizer):
    text = " ".join(f"Short sentence {i}." for i in range(200))
    chunks = chunk_sentence(paged(text), SentenceConfig(semantic_overlap_percent=0), tiktoken_tokenizer)
    assert all(len(c.text) <= 1000 for c in chunks)
    assert max(len(c.text) for c in chunks) > 900


def test_recursive_split_prefers_sentence_end_near_midpoint():
    text = "word " * 30 + "end. " + "word " * 30
    pieces = split_oversized(text, CharTokenizer(), SentenceConfig(max_tokens_per_section=400))
    assert pieces == [(0, len(text))]
    pieces = split_oversized(text, CharTokenizer(), SentenceConfig(max_tokens_per_section=200))
    assert pieces == [(0, text.index("end.") + 4), (text.index("end.") + 4, len(text))]


def test_decimal_point_is_not_a_split_boundary():
    text = "a" * 60 + " 0.95 " + "b" * 60
    pieces = split_oversized(text, CharTokenizer(), SentenceConfig(max_tokens_per_section=100))
    cut = pieces[0][1]
    assert text[cut - 1] == " "  # split on a word break, not inside 0.95


def test_estimate_option_counts_chars_over_four(tiktoken_tokenizer):
    chunks = chunk_sentence(paged("Hello world!"), SentenceConfig(estimate=True), tiktoken_tokenizer)
    assert chunks[0].token_count == 3
    # The chunk says its count is the estimate (the tokenizer's is 3 here too, by chance).
    assert chunks[0].metadata["token_count_estimated"] is True
    assert "token_count_estimated" not in chunk_sentence(paged("Hello world!"), SentenceConfig(), tiktoken_tokenizer)[0].metadata


def test_exact_token_counts(tiktoken_tokenizer):
    text = " ".join(f"Zdanie {i} mówi o czymś innym. 这是第{i}句。" for i in range(100))
    chunks = chunk_sentence(paged(text), SentenceConfig(), tiktoken_tokenizer)
    assert len(chunks) > 1  # ~4,000 characters: over the 1,000-character budget, several chunks
    for chunk in chunks:
        assert chunk.token_count == len(tiktoken_tokenizer.encode(chunk.text)) <= 500


def test_special_token_text_is_ordinary(tiktoken_tokenizer):
    assert texts_of(paged("Before <|endoftext|> after."), tiktoken_tokenizer) == ["Before <|endoftext|> after."]


def test_empty_and_whitespace_documents(tiktoken_tokenizer):
    assert texts_of(paged(""), tiktoken_tokenizer) == []
    assert texts_of(paged("   \n\n  ", "\t"), tiktoken_tokenizer) == []


def test_heading_detection():
    assert looks_like_heading("# Title\nbody")
    assert looks_like_heading("1. first step")
    assert looks_like_heading("a) option one")
    assert looks_like_heading("INTRODUCTION\nThe text")
    assert not looks_like_heading("under heavy load and completes successfully.")


def test_config_is_strict_and_registered():
    with pytest.raises(ValueError):
        SentenceConfig(max_tokens=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        SentenceConfig(max_tokens_per_section=0)
    assert SPEC.name == "sentence" and SPEC.default_config().token_cap == 500


def test_text_without_pages_is_rejected(tiktoken_tokenizer):
    doc = ParsedDocument(doc_id="nopages", text="Some text.", pages=[])
    with pytest.raises(ValueError, match="no pages"):
        chunk_sentence(doc, SentenceConfig(), tiktoken_tokenizer)


CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"


def test_real_pdf_with_mid_sentence_page_breaks(tiktoken_tokenizer):
    pdf = CORPUS / "pdf" / "howto_logging.pdf"
    if not pdf.is_file():
        pytest.skip("shared corpus not available")
    from chunking.parsers import parse_document

    doc = parse_document(pdf, "pdf/howto_logging.pdf")
    chunks = chunk_sentence(doc, SentenceConfig(), tiktoken_tokenizer)
    assert len(doc.pages) > 1 and chunks
    assert all(c.token_count <= 500 for c in chunks if "cap_exempt" not in c.metadata)
    assert any(c.page_end > c.page_start for c in chunks)  # a sentence repaired across a page break
    assert all(doc.pages[0].page_num <= c.page_start <= c.page_end <= doc.pages[-1].page_num for c in chunks)
    text = "".join(c.text for c in chunks)
    remaining = iter(re.sub(r"\s+", "", text))
    assert all(ch in remaining for ch in re.sub(r"\s+", "", doc.text))  # nothing dropped, order kept


def test_owning_page_is_one_the_chunk_has_text_on_after_a_repacked_carry_forward(tiktoken_tokenizer):
    # Page 38 -> 39 of this PDF: the carried fragment and page 39 re-pack into pieces, the
    # first of them all page-38 text, which the later page's number used to be given.
    pdf = CORPUS / "pdf" / "library_sqlite3.pdf"
    if not pdf.is_file():
        pytest.skip("shared corpus not available")
    from chunking.parsers import parse_document

    doc = parse_document(pdf, "pdf/library_sqlite3.pdf")
    config = {"max_tokens_per_section": 200, "max_section_length": 600}
    chunks = chunk_sentence(doc, SentenceConfig(**config), tiktoken_tokenizer)
    assert all(c.page_start <= c.metadata["page_num"] <= c.page_end for c in chunks)
    page_39 = next(p.char_offset for p in doc.pages if p.page_num == 39)
    (last_of_38,) = [c for c in chunks if c.char_end == page_39 - 1]  # the carried piece (before the newline)
    assert (last_of_38.page_start, last_of_38.page_end, last_of_38.metadata["page_num"]) == (38, 38, 38)
    # A carried piece whose own text is on page 16, with look-ahead overlap copied from page 17:
    # the overlap is not its text, so page 16 owns it.
    (carried,) = [c for c in chunks if c.char_start == 24598]
    assert carried.metadata["overlap_chars"] > 0 and carried.page_end == 17
    assert carried.metadata["page_num"] == 16


# -- the segmenter's vectorised scan of long texts ------------------------------------

_SEGMENT_PIECES = [
    "Dr. Smith", " e.g. ", "U.S. The", "0.95", " approx. five", "wait... and", "End.", "Really?!", " “Quoted.” ",
    "(Note.) ", "中文。", "日本語！", "「引用。」", "\n\n", "\n \n", " ", "\t", "J. ", "no. 5", "Inc. Board",
    "os.path", "…", "‼", "word", " Word", "\u00a0", "\u3000", "😀", "\x1c",
]  # fmt: skip


def test_long_texts_are_segmented_exactly_as_by_the_regex_scan(monkeypatch):
    import random

    import chunking.segmenter as segmenter

    rng = random.Random(4)
    texts = ["".join(rng.choice(_SEGMENT_PIECES) for _ in range(rng.randrange(1, 3000))) for _ in range(30)]
    texts += ["Plain sentence one. " * 400, "x" * 9000 + ". Tail", "。" * 5000, ".\n\n" * 3000]
    vectorised = [segmenter.sentence_spans(t) for t in texts]
    monkeypatch.setattr(segmenter, "_VECTOR_SCAN_CHARS", float("inf"))  # the regex scan, for every length
    for text, spans in zip(texts, vectorised):
        assert spans == segmenter.sentence_spans(text)
        assert "".join(text[s:e] for s, e in spans) == text


# The look-ahead overlap skips segmenting a window of the next chunk when
# ``sentence_end_possible`` rules out a sentence end in [target, reach], and segments the
# others together (``sentence_bounds_each``): the prefix must be what segmenting each
# window alone would have given.
_OVERLAP_PIECES = ["word", "Dr", "e.g", "0.95", ".", ". ", "! ", "?", "...", "…", "。", ")", "\"", "」", "” ", " ", "\n", "\n\n", ",", "中文"]


def _straightforward_overlap_prefix(text: str, target: int, breaks: frozenset[str]) -> str:
    """``native_overlap_prefix`` as first written: the window segmented alone and whole, characters tested one by one."""
    if len(text) <= target:
        return ""
    reach = min(len(text), target + max(target // 2, 1))
    window = text[: reach + 1]
    bounds = sentence_bounds(window)
    for start, end in zip(bounds, bounds[1:]):
        if end == len(window) < len(text):
            break
        sentence_end = start + len(text[start:end].rstrip())
        if target <= sentence_end <= reach and ends_with_sentence_ending(text[start:sentence_end]):
            return text[:sentence_end]
    for i in range(target, reach):
        if text[i] in breaks:
            return text[:i].rstrip()
    last_break = max((i for i in range(target) if text[i] in breaks), default=None)
    return "" if last_break is None else text[:last_break].rstrip()


def test_overlap_prefixes_are_those_of_each_window_segmented_alone():
    import random

    from chunking.strategies.sentence import _Splitter

    rng = random.Random(7)
    texts = ["".join(rng.choice(_OVERLAP_PIECES) for _ in range(rng.randint(5, 80))).strip() for _ in range(3000)]
    # ASCII text gets the stricter test (an ending, its closers, then whitespace or the end).
    ascii_pieces = [p for p in _OVERLAP_PIECES if p.isascii()] + [".)", ".\" ", "?) ", "!\n", "\t"]
    texts += ["".join(rng.choice(ascii_pieces) for _ in range(rng.randint(5, 80))).strip() for _ in range(3000)]
    # Non-ASCII text: an ending, closers, whitespace as in ASCII; or a run holding a CJK ending,
    # cut with no whitespace after it ("。.", ".。」x"), which the test must not rule out.
    mixed_pieces = ascii_pieces + ["é", "“", "¶ ", "。", ".。", "。.", "…", "」", "。」", "？", "x"]
    texts += ["".join(rng.choice(mixed_pieces) for _ in range(rng.randint(5, 80))).strip() for _ in range(3000)]
    # Abbreviations, initials and sentence starters about the window's end (cut mid-word there).
    words = ["etc.", "Inc.", "U.S.", "no.", "No.", "J.", "approx.", "The", "the", "There", "5", "Then", "Dr.", "i.e.", "x"]
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(3000)]
    corpus = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "html" / "library_stdtypes.html"
    doc = ParsedDocument.from_text(re.sub(r"<[^>]+>", " ", corpus.read_text(encoding="utf-8")))
    texts += [c.text for c in chunk_sentence(doc, SentenceConfig(semantic_overlap_percent=0), TiktokenTokenizer())]
    splitter = _Splitter("", SentenceConfig(), TiktokenTokenizer())
    for target in (10, 40, 100):
        expected = [_straightforward_overlap_prefix(text, target, splitter.breaks) for text in texts]
        assert splitter.native_overlap_prefixes(texts, target) == expected  # the windows segmented together
        assert [splitter.native_overlap_prefix(text, target) for text in texts[::7]] == expected[::7]  # one by one
    assert sum(p != "" for p in expected) > 1000  # the texts do reach past the target


# The shrinking look-ahead overlap: its shorter prefixes come from one scan of the breaks
# (``partial_word_trims``) and are counted in batches (``fitting_prefixes``); each must be
# what trimming back a word at a time and trying each prefix in turn would give.
_TRIM_PIECES = ["word", "中文", "x", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", ",", ";", "(", ")", "、", "「", "—",
                ".", "Dr.", "0.95", "é"]


def _straightforward_trim(text: str, breaks: frozenset[str]) -> str:
    match = re.match("(?s).*[" + "".join(re.escape(c) for c in sorted(breaks)) + "]", text)
    return "" if match is None else text[: match.end() - 1].rstrip()


def _straightforward_trims(text: str, breaks: frozenset[str]) -> list[str]:
    trims = []
    while text := _straightforward_trim(text, breaks):
        trims.append(text)
    return trims


def test_partial_word_trims_are_the_prefix_trimmed_back_a_word_at_a_time():
    import random

    from chunking.strategies.sentence import _Splitter

    rng = random.Random(5)
    splitter = _Splitter("", SentenceConfig(), TiktokenTokenizer())
    texts = ["".join(rng.choice(_TRIM_PIECES) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    texts += ["", " ", "word", " word", "word ", "a b", "\u3000x", "x\u3000 y"]
    for text in texts:
        trims = _straightforward_trims(text, splitter.breaks)
        assert [text[:n] for n in splitter.partial_word_trims(text)] == trims
        assert splitter.trim_partial_word(text) == (trims[0] if trims else "")


class _TokenizerWithoutBound:
    """A tiktoken tokenizer that offers no bound (``count_at_most``): every candidate is counted."""

    def __init__(self) -> None:
        self.inner = TiktokenTokenizer()

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.inner.decode(tokens)


@pytest.mark.parametrize("bounded", [True, False])
def test_fitting_prefixes_are_the_first_that_fit_tried_in_turn(bounded):
    import random

    from chunking.strategies.sentence import _Splitter

    rng = random.Random(6)
    source = "".join(rng.choice(_TRIM_PIECES + ["The", "tokens", "überall", "。"]) for _ in range(6000))
    tokenizer = TiktokenTokenizer() if bounded else _TokenizerWithoutBound()
    splitter = _Splitter(source, SentenceConfig(), tokenizer)
    prefixes, starts, room_chars, room_tokens = [], [], [], []
    for _ in range(1500):
        start = rng.randrange(len(source) - 200)
        prefix = source[start : start + rng.randint(1, 150)].strip()
        if not prefix:
            continue
        if rng.random() < 0.2:
            prefix = prefix[:-1] + "Z" if len(prefix) > 1 else "Z"  # not verbatim at its start: counted alone
        tokens = len(tokenizer.encode(prefix))
        prefixes.append(prefix)
        starts.append(start + len(source[start:]) - len(source[start:].lstrip()))
        # Rooms about the prefix's own size (exactly at it, just under), far under, none, negative.
        room_chars.append(rng.choice([len(prefix)] * 4 + [len(prefix) - 1, rng.randint(-5, len(prefix) + 5), 0, -3]))
        room_tokens.append(rng.choice([tokens] * 4 + [tokens - 1, rng.randint(-2, tokens + 2), 0, -1]))
    expected = []
    for prefix, chars, tokens in zip(prefixes, room_chars, room_tokens):
        candidates = [prefix, *_straightforward_trims(prefix, splitter.breaks)]
        expected.append(next((c for c in candidates if len(c) <= chars and len(tokenizer.encode(c)) <= tokens), ""))
    assert splitter.fitting_prefixes(prefixes, starts, room_chars, room_tokens) == expected
    assert sum(e != "" and e != p for e, p in zip(expected, prefixes)) > 100  # shrunk ones
    assert sum(e == p for e, p in zip(expected, prefixes)) > 100  # whole ones


def test_count_bound_is_never_below_the_count():
    import random

    from chunking.tokenizers import CharTokenizer, EstimateTokenizer, count_bound, count_tokens

    rng = random.Random(8)
    pieces = _TRIM_PIECES + ["<|endoftext|>", "😀", "ü", "中文。", "  ", "1234567", "aaaaaaaaaaaa", "\u200b"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    for tokenizer in (TiktokenTokenizer(), CharTokenizer(), EstimateTokenizer()):
        bound = count_bound(tokenizer)
        assert all(bound(t) >= count_tokens(tokenizer, t) for t in texts)
    assert count_bound(_TokenizerWithoutBound()) is None


def test_draft_that_counts_over_the_cap_once_joined_is_packed_again_not_cut_per_sentence(tiktoken_tokenizer):
    # The three sentences count 28 + 28 + 2 = 58 tokens apart, 61 joined (an ending merges
    # with what follows it): the accumulator takes all three under a cap of 60, the chunk
    # is over it. Packed again by the joined text's count: the two sentences that fit
    # together, then the rest (not one chunk per sentence, as before).
    text = "ファイルの最下行に移動するために G をタイプしましょう。\n     ファイルの先頭に移動するには gg とタイプしましょう。\n\n  3."
    first, end = text[: text.index("\n\n")], text.index("3.")
    bounds = sentence_bounds(text)
    assert bounds[-2] == end and len(bounds) == 4
    assert [len(tiktoken_tokenizer.encode(text[a:b])) for a, b in zip(bounds, bounds[1:])] == [28, 28, 2]
    assert len(tiktoken_tokenizer.encode(text)) == 61
    config = SentenceConfig(max_tokens_per_section=60, semantic_overlap_percent=0)
    chunks = chunk_sentence(ParsedDocument.from_text(text), config, tiktoken_tokenizer)
    assert [(c.text, c.char_start, c.char_end, c.token_count) for c in chunks] == [
        (first, 0, len(first), len(tiktoken_tokenizer.encode(first))),
        ("3.", end, end + 2, 2),
    ]
    assert all(c.verbatim and c.token_count <= 60 for c in chunks)
    # Under a cap of 61 the joined text fits: one chunk.
    one = chunk_sentence(ParsedDocument.from_text(text), config.model_copy(update={"max_tokens_per_section": 61}),
                         tiktoken_tokenizer)
    assert [c.text for c in one] == [text]


@pytest.mark.parametrize(
    ("text", "cap"),
    [
        # A sentence measured with its leading space (" naï" + "ve") but emitted stripped
        # ("na" + "ï" + "ve"): within the cap as a unit, over it as a chunk.
        (" naïve", 2),
        (" naïve\n中어句トス中문中是한語", 16),
        # The same for a piece of a midpoint split, which starts wherever the midpoint falls
        # (here on the space before "naïve": 16 tokens with it, 17 without; found by fuzzing).
        ("  3.14 A It. 日한장是장キテ子어本テ語一文子the \u094dthe A page. etc. \r\n；어テ한어日个文장句文个テトス本어日テ語"
         "スス子ス句국문个文中句국；model\nnaïve;Naïve data. naïve\n中어句トス中문中是한語어어个キス…I a. ？No. aIt\n", 16),
    ],
)
def test_cap_binds_the_stripped_chunk_when_stripping_adds_tokens(tiktoken_tokenizer, text, cap):
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=60, semantic_overlap_percent=0)
    chunks = chunk_sentence(ParsedDocument.from_text(text), config, tiktoken_tokenizer)
    assert all(c.token_count == len(tiktoken_tokenizer.encode(c.text)) <= cap for c in chunks)
    assert all(c.verbatim and text[c.char_start : c.char_end] == c.text for c in chunks)
    covered = set().union(*(range(c.char_start, c.char_end) for c in chunks))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_a_page_opening_with_a_blank_line_adds_no_page_to_the_chunk_before_it(tiktoken_tokenizer):
    # The blank line was a whitespace-only unit of page 1; carried forward with the unfinished
    # sentence of page 0 and packed with it, it made that chunk span pages 0-1 although its
    # text and its char span lie on page 0 (found by fuzzing).
    first = "the first page runs on and on without an end"
    doc = paged(first, "\n\nand the second page goes on. More text here.")
    config = SentenceConfig(max_tokens_per_section=12, semantic_overlap_percent=0)
    chunks = chunk_sentence(doc, config, tiktoken_tokenizer)
    assert [(c.text, c.char_start, c.char_end, c.page_start, c.page_end) for c in chunks] == [
        (first, 0, len(first), 0, 0),
        ("and the second page goes on.", 46, 74, 1, 1),
        ("More text here.", 75, 90, 1, 1),
    ]
    offsets = [p.char_offset for p in doc.pages]
    for c in chunks:
        assert (c.page_start, c.page_end) == (doc.page_at(c.char_start, offsets), doc.page_at(c.char_end - 1, offsets))


def test_a_whitespace_piece_of_the_next_page_adds_no_page_to_the_chunk_it_is_packed_with(tiktoken_tokenizer):
    # Page 1's first sentence is over the cap; its split leaves the leading spaces a piece of
    # their own, which carrying page 0's unfinished sentence forward packed with it: the
    # chunk claimed pages 0-1 although its text and its span lie on page 0 (found by fuzzing).
    doc = paged("the page ends on", " " * 40 + "and then it goes on for a good while yet")
    config = SentenceConfig(max_tokens_per_section=8, semantic_overlap_percent=0)
    chunks = chunk_sentence(doc, config, tiktoken_tokenizer)
    assert [(c.text, c.page_start, c.page_end) for c in chunks] == [
        ("the page ends on", 0, 0),
        ("and then it goes on", 1, 1),
        ("for a good while yet", 1, 1),
    ]
    offsets = [p.char_offset for p in doc.pages]
    for c in chunks:
        assert (c.page_start, c.page_end) == (doc.page_at(c.char_start, offsets), doc.page_at(c.char_end - 1, offsets))


@pytest.mark.parametrize("reference_mode", [False, True])
@pytest.mark.parametrize("text", ["x,", "a ", "ab,", "x:y"])
def test_a_boundary_on_the_last_character_of_an_oversized_span_is_no_cut(tiktoken_tokenizer, reference_mode, text):
    # Cutting just after a boundary on the span's last character gives the span itself back:
    # the recursive split recursed until RecursionError (both modes; found by fuzzing).
    config = SentenceConfig(max_tokens_per_section=1, semantic_overlap_percent=0, reference_mode=reference_mode)
    chunks = chunk_sentence(ParsedDocument.from_text(text), config, tiktoken_tokenizer)
    assert "".join(c.text.strip() for c in chunks) == text.replace(" ", "")
    assert all(c.token_count <= 1 for c in chunks)
    if text == "x,":
        assert [c.text for c in chunks] == ["x", ","]


@pytest.mark.parametrize("reference_mode", [False, True])
def test_word_breaks_of_no_single_character_split_at_the_midpoint_instead_of_failing(tiktoken_tokenizer, reference_mode):
    # The word-break pattern was a character class of every break joined, so word_breaks=("",)
    # compiled "[]" and the split of an oversized span failed with re.error (found by fuzzing
    # the Azure compat splitter, whose word_breaks a caller may set). A break is one character,
    # as the overlap's break test and the reference's ``text[i] in word_breaks`` read it.
    text = "hello world again and again"
    config = SentenceConfig(max_tokens_per_section=2, semantic_overlap_percent=0, split_overlap_percent=0, word_breaks=("",),
                            reference_mode=reference_mode)
    chunks = chunk_sentence(ParsedDocument.from_text(text), config, tiktoken_tokenizer)
    assert all(c.token_count <= 2 for c in chunks)
    assert "".join(c.text for c in chunks).replace(" ", "") == text.replace(" ", "")
