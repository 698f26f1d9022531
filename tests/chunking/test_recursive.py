"""The recursive (LightRAG R) strategy: cap, overlap, offsets, CJK, empty input."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunking import chunk_text, default_tokenizer
from chunking.model import ParsedDocument, Page, Block
from chunking.strategies import config_hash, get_strategy
from chunking.strategies.recursive import (
    CJK_SEPARATORS,
    PLAIN_SEPARATORS,
    RecursiveConfig,
    chunk_recursive,
    split_recursive,
)
from chunking.tokenizers import CharTokenizer, count_tokens

CHAR = CharTokenizer()
PROSE = " ".join(
    f"Sentence number {i} talks about topic {i % 7} and carries a few extra words for weight." for i in range(200)
)
PARAGRAPHS = "\n\n".join(
    " ".join(f"Paragraph {p} line {i} has some words in it." for i in range(1 + p % 5)) for p in range(60)
)


@pytest.fixture(scope="module")
def cl100k():
    return default_tokenizer()


def assert_invariants(text, spans, tokenizer, cap):
    for s in spans:
        assert text[s.start : s.end] == s.text, "offsets must map back to the input"
        assert s.text == s.text.strip() and s.text, "chunks are whitespace-stripped and non-empty"
        assert s.tokens == count_tokens(tokenizer, s.text), "token count is exact for the chunk's own text"
        assert s.tokens <= cap
    assert [s.start for s in spans] == sorted(s.start for s in spans), "chunks come in text order"
    # No text lost: every non-whitespace character lies inside some span.
    covered = bytearray(len(text))
    for s in spans:
        covered[s.start : s.end] = b"\x01" * (s.end - s.start)
    lost = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not lost, f"lost characters at {lost[:10]}"


@pytest.mark.parametrize("tokenizer_name", ["char", "cl100k"])
@pytest.mark.parametrize("text", [PROSE, PARAGRAPHS], ids=["prose", "paragraphs"])
@pytest.mark.parametrize("cap,overlap", [(50, 0), (120, 20), (400, 100)])
def test_cap_offsets_and_coverage(text, cap, overlap, tokenizer_name, cl100k):
    tokenizer = CHAR if tokenizer_name == "char" else cl100k
    spans = split_recursive(text, tokenizer, cap, overlap)
    assert len(spans) > 1
    assert_invariants(text, spans, tokenizer, cap)


def test_overlap_is_within_budget_and_present(cl100k):
    spans = split_recursive(PROSE, cl100k, 100, 30, PLAIN_SEPARATORS)
    overlaps = []
    for a, b in zip(spans, spans[1:]):
        shared = PROSE[b.start : a.end] if b.start < a.end else ""
        overlaps.append(count_tokens(cl100k, shared))
    # Word-sized pieces can always fill most of a 30-token budget, never exceed it.
    assert max(overlaps) <= 30
    assert min(overlaps) >= 20, overlaps
    assert all(b.start < a.end for a, b in zip(spans, spans[1:]))


def test_zero_overlap_chunks_are_disjoint(cl100k):
    spans = split_recursive(PROSE, cl100k, 80, 0)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_paragraph_boundaries_preferred_over_spaces():
    # Two paragraphs that each fit: the cut falls exactly at the blank line.
    text = "alpha beta gamma delta\n\nepsilon zeta eta theta"
    spans = split_recursive(text, CHAR, 30, 0)
    assert [s.text for s in spans] == ["alpha beta gamma delta", "epsilon zeta eta theta"]


def test_separator_stays_at_start_of_following_piece():
    # Newline-level split: the "\n" belongs to the next piece, then chunks are stripped.
    text = "line one\nline two\nline three"
    spans = split_recursive(text, CHAR, 10, 0, ("\n", ""))
    assert [s.text for s in spans] == ["line one", "line two", "line three"]
    assert [text[s.start - 1] for s in spans[1:]] == ["\n", "\n"]


def test_cjk_punctuation_splits_chinese_without_spaces():
    sentence = "检索增强生成分为两个步骤。"
    text = sentence * 30  # no spaces, no newlines: only CJK punctuation can break it
    spans = split_recursive(text, CHAR, 40, 0, CJK_SEPARATORS)
    assert_invariants(text, spans, CHAR, 40)
    # Every chunk ends on a sentence boundary: the "。" starts the next piece and is
    # packed as the first character of the following chunk.
    for s in spans[1:]:
        assert s.text.startswith("。")


def test_cjk_with_cl100k(cl100k):
    text = "分块之间的重叠是一种廉价的保险，当一个事实恰好位于边界上时，重叠可以保证它完整出现。" * 40
    spans = split_recursive(text, cl100k, 64, 8)
    assert_invariants(text, spans, cl100k, 64)


def test_english_period_is_not_a_separator_by_default():
    # "0.95" must not be cut at the dot: English ". ? !" are left out on purpose.
    assert "." not in CJK_SEPARATORS
    text = "value 0.95 and 1.25 are kept"
    spans = split_recursive(text, CHAR, 12, 0)
    assert all(not s.text.startswith(".") for s in spans)
    assert any("0.95" in s.text for s in spans)


def test_separator_less_run_is_cut_by_token_windows_within_cap(cl100k):
    text = "x" * 20_000
    spans = split_recursive(text, cl100k, 300, 30)
    assert_invariants(text, spans, cl100k, 300)
    # Windows are maximal: every chunk but the last is at the cap.
    assert all(s.tokens == 300 for s in spans[:-1])
    assert all(b.start < a.end for a, b in zip(spans, spans[1:])), "token-window overlap"


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_empty_or_blank_input_gives_no_chunks(text):
    assert split_recursive(text, CHAR, 10, 0) == []
    assert chunk_text(text, tokenizer=CHAR) == []


def test_short_text_is_one_chunk_stripped():
    text = "  \n Hello world. \n"
    (span,) = split_recursive(text, CHAR, 100, 10)
    assert span.text == "Hello world."
    assert text[span.start : span.end] == "Hello world."


def test_overlap_must_be_smaller_than_size():
    with pytest.raises(ValueError, match="smaller"):
        RecursiveConfig(chunk_token_size=100, chunk_overlap_token_size=100)
    with pytest.raises(ValueError):
        split_recursive("abc", CHAR, 5, 5)


def test_config_hash_changes_with_config():
    assert config_hash(RecursiveConfig()) == config_hash(RecursiveConfig())
    assert config_hash(RecursiveConfig()) != config_hash(RecursiveConfig(chunk_token_size=1000))


def test_registry_and_chunk_text_entry_point():
    spec = get_strategy("recursive")
    assert spec.config_model is RecursiveConfig
    assert RecursiveConfig().token_cap == 1200
    chunks = chunk_text(PROSE, chunk_token_size=150, chunk_overlap_token_size=10)
    assert all(PROSE[c.char_start : c.char_end] == c.text and c.token_count <= 150 for c in chunks)
    with pytest.raises(KeyError, match="unknown chunking strategy"):
        get_strategy("nope")


def test_chunks_carry_page_span_heading_path_and_block_ids():
    page0 = "# Intro\n\nFirst page text is here.\n\n"
    page1 = "## Details\n\nSecond page text follows on."
    text = page0 + page1
    doc = ParsedDocument(
        doc_id="d",
        text=text,
        pages=[Page(page_num=0, char_offset=0, text=page0), Page(page_num=1, char_offset=len(page0), text=page1)],
        blocks=[
            Block(index=0, block_id="b0", heading="Intro", level=1, content="# Intro\nFirst page text is here.",
                  char_start=0, char_end=len(page0)),
            Block(index=1, block_id="b1", heading="Details", level=2, parent_headings=["Intro"],
                  content="## Details\nSecond page text follows on.", char_start=len(page0), char_end=len(text)),
        ],
    )
    chunks = chunk_recursive(doc, RecursiveConfig(chunk_token_size=12, chunk_overlap_token_size=0), CHAR)
    first, last = chunks[0], chunks[-1]
    assert (first.page_start, first.page_end) == (0, 0)
    assert (last.page_start, last.page_end) == (1, 1)
    assert first.heading_path == ["Intro"] and first.block_ids == ["b0"]
    assert last.heading_path == ["Intro", "Details"] and last.block_ids == ["b1"]
    whole = chunk_recursive(doc, RecursiveConfig(chunk_token_size=500, chunk_overlap_token_size=0), CHAR)
    assert len(whole) == 1 and (whole[0].page_start, whole[0].page_end) == (0, 1)
    assert whole[0].block_ids == ["b0", "b1"]


def test_endoftext_is_ordinary_text(cl100k):
    text = "before <|endoftext|> after " * 50
    spans = split_recursive(text, cl100k, 40, 5)
    assert_invariants(text, spans, cl100k, 40)


words = st.lists(
    st.sampled_from(list("abcdefghij 你好。，\n") + ["😀", "\n\n", "word ", "0.95"]), max_size=200
).map("".join)


@settings(max_examples=60, deadline=None)
@given(text=words, cap=st.integers(min_value=4, max_value=60), overlap_ratio=st.floats(0, 0.5))
def test_property_invariants_hold_for_random_text(text, cap, overlap_ratio):
    overlap = min(int(cap * overlap_ratio), cap - 1)
    spans = split_recursive(text, CHAR, cap, overlap)
    if not text.strip():
        assert spans == []
        return
    assert_invariants(text, spans, CHAR, cap)


@settings(max_examples=25, deadline=None)
@given(text=words, cap=st.integers(min_value=8, max_value=80))
def test_property_cl100k_cap_and_offsets(text, cap):
    tokenizer = default_tokenizer()
    spans = split_recursive(text, tokenizer, cap, cap // 4)
    if not text.strip():
        assert spans == []
        return
    assert_invariants(text, spans, tokenizer, cap)


def test_repeated_text_offsets_are_not_confused():
    # The reference recovers offsets with str.find and maps repeats to the first copy.
    text = "\n\n".join(["same paragraph text"] * 6)
    spans = split_recursive(text, CHAR, 20, 0)
    assert [s.start for s in spans] == [m.start() for m in re.finditer("same paragraph text", text)]


# -- exact span counts from one encoding (chunking.tokenizers.span_counter) ----------

_SPAN_PIECES = st.sampled_from(
    ["word", " Word", "The", " the", "'s", "'ll", "don't", ".", ". ", "!", "?", ",", " ", "  ", "\n", "\n\n", "\r\n",
     "\t", "12", "12345", "0.95", "中文", "。", "，", "日本語の", "é", "naïve", "😀", "x\u0301", "ǅ", "\u00a0", "\u3000",
     "<|endoftext|>", "__init__", "os.path", "()", "{}", "->", "    ", "Dr.", "a"]
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(_SPAN_PIECES, min_size=1, max_size=400), cuts=st.lists(st.integers(0, 10**6), min_size=2, max_size=40))
def test_property_span_counter_is_exact_for_any_span(cl100k, pieces, cuts):
    from chunking.tokenizers import span_counter

    # Long enough (and with enough ASCII word ends) for the one-encoding index to be used.
    text = "".join(pieces) + " Filler words end this text." * 160
    count = span_counter(cl100k, text)
    assert hasattr(count, "word_ends"), "the index-backed counter is what this test exercises"
    positions = sorted(c % (len(text) + 1) for c in cuts)
    for start, end in zip(positions, positions[1:]):
        assert count(start, end) == len(cl100k.encode(text[start:end])), (start, end)
    for start in positions:  # spans of every length from the same start, incl. whole words
        for end in (start + 1, start + 7, start + 60, start + 500, len(text)):
            end = min(end, len(text))
            assert count(start, end) == len(cl100k.encode(text[start:end]))


def test_span_counter_falls_back_where_one_encoding_cannot_help(cl100k):
    from chunking.tokenizers import span_counter

    assert not hasattr(span_counter(cl100k, "x" * 20_000), "word_ends"), "one 20k letter run: nothing to reuse"
    assert not hasattr(span_counter(cl100k, "Short text."), "word_ends")
    lone_surrogate = "Text with a broken \ud800 character. " * 200
    count = span_counter(cl100k, lone_surrogate)
    assert count(0, 40) == len(cl100k.encode(lone_surrogate[:40]))
    assert span_counter(CHAR, "abcdef")(1, 4) == 3


def test_span_counter_works_with_any_encode_decode_tokenizer():
    from chunking.tokenizers import span_counter

    class WordTokenizer:  # a plain protocol implementation: no count, no span_counter
        def encode(self, text):
            return [len(w) for w in text.split()]

        def decode(self, tokens):
            return " ".join("x" * n for n in tokens)

    text = "one two  three four"
    assert span_counter(WordTokenizer(), text)(4, 15) == 2
    spans = split_recursive(PARAGRAPHS, WordTokenizer(), 30, 5)
    assert all(s.tokens == len(WordTokenizer().encode(s.text)) <= 30 for s in spans)


def test_tiktoken_encode_is_the_special_token_free_encoding(cl100k):
    text = "Before <|endoftext|> after <|fim_prefix|> and 0.95 ünïcödé 中文 😀"
    assert cl100k.encode(text) == cl100k._encoding.encode(text, disallowed_special=())
    assert cl100k.count(text) == len(cl100k._encoding.encode(text, disallowed_special=()))


# -- bulk counting: the plan counts every piece of a depth at once ----------------------


class EncodeOnly:
    """cl100k through the bare protocol: every span is encoded on its own (no one-encoding index)."""

    def __init__(self, tokenizer):
        self.inner = tokenizer

    def encode(self, text):
        return self.inner.encode(text)

    def decode(self, tokens):
        return self.inner.decode(tokens)


_MIXED = (
    "## 3.2. Title\n\nThe quick brown fox's value is 0.95, isn't it? Dr. Smith said so.\n"
    "def __init__(self, path):\n    return os.path.join(path, '中文')  # 😀\n\n"
    "分块之间的重叠是一种廉价的保险，当一个事实恰好位于边界上时。重叠可以保证它完整出现！\n"
    "日本語の文です。カタカナとひらがな、そして漢字。\n\n\n"
    "    for i in range(10):\n        print(i, end=' ')\n~~~~~~~~~~~~\n"
)


@pytest.mark.parametrize("cap,overlap", [(24, 6), (64, 16), (400, 0), (400, 100)])
def test_index_backed_counts_give_the_same_chunks_as_encoding_each_span(cl100k, cap, overlap):
    # Long (the index is used), mixed prose, code and CJK, blank-line runs: every
    # level of the cascade, overlaps and the bulk-measured windows are exercised.
    import random

    rng = random.Random(cap * 1000 + overlap)
    lines = _MIXED.splitlines(keepends=True)
    text = "".join(rng.choice(lines) for _ in range(600)) + "x" * 3000
    fast = split_recursive(text, cl100k, cap, overlap)
    assert hasattr(split_recursive.__globals__["span_counter"](cl100k, text), "word_ends")
    assert fast == split_recursive(text, EncodeOnly(cl100k), cap, overlap)
    assert_invariants(text, fast, cl100k, cap)


class JoinPenalty:
    """1 token per char, plus 5 for every "a b": joined pieces count more than the sum of their counts."""

    def encode(self, text):
        return [0] * (len(text) + 5 * text.count("a b"))

    def decode(self, tokens):
        raise NotImplementedError


def test_window_gives_back_pieces_when_its_text_counts_more_than_its_pieces():
    # Pieces "xa", " b", " xa", " b": their counts sum to 9, within the cap, but the
    # joined "xa b xa b" holds "a b" twice (19 tokens), so the packed window must
    # give pieces back until its own count fits ("xa b": 4 + 5).
    text = "xa b xa b xa b xa b"
    tokenizer = JoinPenalty()
    spans = split_recursive(text, tokenizer, 10, 0, (" ", ""))
    assert_invariants(text, spans, tokenizer, 10)
    assert [s.text for s in spans] == ["xa b"] * 4
    # With overlap the shared text is measured too, and stays within its budget.
    spans = split_recursive(text, tokenizer, 10, 3, (" ", ""))
    assert_invariants(text, spans, tokenizer, 10)
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            assert len(tokenizer.encode(text[b.start : a.end])) <= 3


@pytest.mark.parametrize("gap", [1, 31, 32, 33, 200])
def test_chunks_are_stripped_across_whitespace_runs_of_any_length(gap):
    # Leading and trailing whitespace is looked for in a short probe first; runs
    # longer than the probe must be stripped all the same.
    text = ("alpha" + " " * gap + "\n" + "\t" * gap + "beta\n\n" + " " * gap) * 8
    for cap in (3, 7, 40):
        spans = split_recursive(text, CHAR, cap, 0)
        assert_invariants(text, spans, CHAR, cap)
    assert [s.text for s in split_recursive(text, CHAR, 6, 0)][:2] == ["alpha", "beta"]


def _cuts_by_str_split(text, start, end, separator):
    """Reference: piece bounds from str.split (the search skips a separator at ``start``)."""
    offset = start + 1 if text.startswith(separator, start) else start
    cuts, at = [start], offset
    for part in text[offset:end].split(separator)[:-1]:
        at += len(part)
        cuts.append(at)
        at += len(separator)
    return cuts + [end]


@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "\n", "\n\n", " ", "。", ".", "*", "\\", "(", "中", "😀"]), max_size=60).map("".join),
    separator=st.sampled_from(["\n\n", "\n", " ", "。", ".", "*", "\\", "\n\n\n", "a a", "(.", "😀"]),
    bounds=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    array_cuts=st.booleans(),
)
def test_cuts_are_str_split_positions_for_any_separator(text, separator, bounds, array_cuts):
    # Separators are literals (regex metacharacters included); runs like "\n\n\n"
    # are cut leftmost, non-overlapping, after a separator at the span start. Long spans
    # cut at one character take numpy's path (array_cuts: every span does here).
    from unittest import mock

    from chunking.strategies import recursive
    from chunking.strategies.recursive import _RecursiveSplitter

    start, end = sorted(min(b, len(text)) for b in bounds)
    splitter = _RecursiveSplitter(text, CHAR, 10, 0)
    with mock.patch.object(recursive, "_ARRAY_CUTS_MIN_CHARS", 0 if array_cuts else recursive._ARRAY_CUTS_MIN_CHARS):
        cuts = splitter.cuts_at(start, end, separator)
    assert cuts == _cuts_by_str_split(text, start, end, separator)
    assert all(a < b for a, b in zip(cuts, cuts[1:])) or start == end


@pytest.mark.parametrize(
    ("text", "cap"),
    [
        # One piece " naïve" is 2 tokens with its leading space (" naï" + "ve") and 3 without
        # it ("na" + "ï" + "ve"): the chunk is the stripped text, so that count is the one the
        # cap binds.
        (" naïve", 2),
        # The same in a separator-less run cut by token windows: " 👩‍💻😀" is 8 tokens, stripped 9.
        ("ñI 👩\u200d💻😀\u200d", 8),
        # A window measured again from its stripped start ("gegjdd", 4 tokens; " gegjdd" is 3)
        # takes its overlap from there too: from the space, the whole window fitted the
        # overlap and the next window was the same chunk again.
        (" , gegjddfhdfhfjcfiefcd", 4),
    ],
)
def test_cap_binds_the_stripped_chunk_even_when_stripping_adds_tokens(cl100k, text, cap):
    for overlap in (0, cap // 3, cap - 1):
        spans = split_recursive(text, cl100k, cap, overlap)
        assert_invariants(text, spans, cl100k, cap)
        assert all(a.start < b.start and a.end < b.end for a, b in zip(spans, spans[1:])), "each chunk adds text"


def test_each_token_window_adds_text_when_what_follows_does_not_fit_the_room_left(cl100k):
    # "xxfigure>aa" is 4 tokens and the combining marks after it take more than the room
    # left, so every window from an overlap start ended at the same place: the windows
    # from 2, 3, ..., 7 were suffixes of the first chunk, adding nothing, and "gure>aa"
    # shared 4 tokens with the one before it, over the overlap of 3 (found by fuzzing).
    text = "xxfigure>aa\u0308\u0301"
    spans = split_recursive(text, cl100k, 4, 3)
    assert_invariants(text, spans, cl100k, 4)
    assert all(a.end < b.end for a, b in zip(spans, spans[1:])), "each chunk adds text"
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            assert len(cl100k.encode(text[b.start : a.end])) <= 3


@pytest.mark.parametrize(("text", "separators"), [("abc\t", CJK_SEPARATORS), ("the ", ("\n\n", ""))])
def test_a_token_window_that_adds_only_whitespace_is_no_chunk(text, separators):
    # The window after "abc" starts at its overlap ("c") and ends past the last one only by
    # whitespace, which the chunk strips: "c" was a chunk of its own, adding nothing to "abc"
    # (found by fuzzing). Such a window starts where the last one ended, as one that would
    # end no further does.
    spans = split_recursive(text, CharTokenizer(), 3, 1, separators)
    assert [s.text for s in spans] == [text.strip()]
    assert_invariants(text, spans, CharTokenizer(), 3)


def test_token_window_overlap_is_measured_on_the_shared_text_as_the_chunks_hold_it(cl100k):
    # The overlap start was found on the window's tail with its leading whitespace,
    # " Über日한" (3 tokens), but the next chunk starts stripped, so the two chunks shared
    # "Über日한", 4 tokens, over the overlap of 3 (found by fuzzing).
    text = "xxxxxxxxxxxxxxeé\t Über日한語"
    spans = split_recursive(text, cl100k, 10, 3, ("",))
    assert_invariants(text, spans, cl100k, 10)
    assert len(spans) > 1
    for a, b in zip(spans, spans[1:]):
        assert a.start < b.start and a.end < b.end
        if b.start < a.end:
            assert len(cl100k.encode(text[b.start : a.end])) <= 3


def test_a_packed_window_that_adds_only_whitespace_is_no_chunk():
    # "ab" + " c" is the first window; the next takes " c" as its overlap and the whitespace
    # piece " \t\t\t" after it, which the chunk strips: "c" was a chunk of its own, adding
    # nothing to "ab c" (found by fuzzing with custom separators; the default ones too).
    text = "ab c \t\t\t"
    spans = split_recursive(text, CharTokenizer(), 6, 2)
    assert [s.text for s in spans] == ["ab c"]
    assert_invariants(text, spans, CharTokenizer(), 6)
