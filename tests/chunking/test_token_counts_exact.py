"""Every strategy's ``token_count`` is the exact count of the chunk's own text.

The strategies count spans from one encoding of the whole document
(``chunking.tokenizers.span_counter``), and tiktoken's merges depend on context:
encoding a concatenation is not the concatenation of encodings. These tests
check the promise where it could break: long texts (so the one-encoding index
is used), mixed scripts, token caps small enough that cuts fall everywhere.
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunking import default_tokenizer
from chunking.model import ParsedDocument
from chunking.strategies import config_field_names, get_strategy
from chunking.tokenizers import EncodedText, span_counter
from chunking.strategies.token import TokenOffsets

STRATEGIES = ("recursive", "sentence", "sentence_window", "token", "paragraph", "simple")

_PIECES = st.sampled_from(
    ["word", " Word", "The", " the", "'s", "don't", ".", ". ", "!", "?", ",", " ", "  ", "\n", "\n\n", "\r\n",
     "\t", "12", "12345", "0.95", "中文", "。", "，", "日本語の", "カタカナ", "é", "naïve", "😀", "x\u0301", "\u00a0",
     "\u3000", "<|endoftext|>", "__init__", "os.path", "()", "->", "    ", "Dr.", "a", "~~~~~~~~", "## Title\n"]
)  # fmt: skip


@pytest.fixture(scope="module")
def cl100k():
    return default_tokenizer()


def _config(name: str, size: int, overlap: int):
    spec = get_strategy(name)
    values = {"chunk_token_size": size, "chunk_overlap_token_size": overlap}
    accepted = set(config_field_names(spec))
    return spec, spec.parse_config({k: v for k, v in values.items() if k in accepted})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(_PIECES, min_size=50, max_size=600),
    seed=st.integers(0, 10**6),
    size=st.sampled_from([24, 60, 400]),
    overlap=st.sampled_from([0, 5]),
)
def test_property_token_count_is_the_count_of_the_chunk_text(cl100k, pieces, seed, size, overlap):
    rng = random.Random(seed)
    filler = [" Filler words end this text.", "\n\nA new paragraph. It has two sentences.", " 日本語の文です。"]
    text = "".join(pieces) + "".join(rng.choice(filler) for _ in range(220))
    assert len(text) >= 4096  # long enough for the one-encoding index
    doc = ParsedDocument.from_text(text, doc_id="prop.txt")
    for name in STRATEGIES:
        spec, config = _config(name, size, overlap)
        for chunk in spec.chunk(doc, config, cl100k, None):
            assert chunk.token_count == len(cl100k.encode(chunk.text)), (name, chunk.char_start, chunk.text[:60])
            if chunk.verbatim:
                assert doc.text[chunk.char_start : chunk.char_end] == chunk.text, name


def test_span_counter_uses_cjk_word_ends_and_stays_exact(cl100k):
    # Almost no ASCII word ends: the index must come from CJK / kana word ends.
    rng = random.Random(7)
    parts = ["日本語の文", "です", "。", "カタカナ", "、", "中文字符", "，", "「引用」", "\n", "！", "x", "1"]
    text = "".join(rng.choice(parts) for _ in range(3000))
    count = span_counter(cl100k, text)
    assert hasattr(count, "word_ends"), "CJK text keeps the one-encoding index"
    bounds = sorted(rng.randrange(len(text) + 1) for _ in range(200))
    for start, end in zip(bounds, bounds[1:]):
        assert count(start, end) == len(cl100k.encode(text[start:end])), (start, end)
    starts, ends = bounds[:-1], bounds[1:]
    assert count.many(starts, ends) == [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]


def test_many_spans_at_once_equal_one_by_one(cl100k):
    rng = random.Random(3)
    text = "".join(rng.choice(["Alpha beta. ", "gamma,", "\n\n", " δέλτα ", "~~~~\n", "x" * 30, "中文。"]) for _ in range(900))
    count = span_counter(cl100k, text)
    assert hasattr(count, "many")
    starts = sorted(rng.randrange(len(text)) for _ in range(300))
    ends = [min(len(text), s + rng.choice([0, 1, 5, 16, 17, 40, 300, 5000])) for s in starts]
    assert count.many(starts, ends) == [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]


@pytest.mark.parametrize("seed", range(4))
def test_many_spans_one_after_another_equal_one_by_one(cl100k, seed):
    # Contiguous spans (a text's sentences) search each bound once: bounds on word ends (where
    # the end's own word end counts for the span before it), beside them, empty spans, the
    # text's end, and a text that ends after its last word end or on one.
    rng = random.Random(seed)
    text = "".join(rng.choice(["Alpha beta. ", "gamma,", "\n\n", " δέλτα ", "~~~~\n", "x" * 30, "中文。"]) for _ in range(900))
    text += rng.choice(["", " ", "end", "。"])
    count = span_counter(cl100k, text)
    assert hasattr(count, "many")
    word_ends = list(count.word_ends)
    cuts = rng.sample(word_ends, 150) + [w + rng.choice([-1, 1]) for w in rng.sample(word_ends, 150)]
    cuts += [rng.randrange(len(text)) for _ in range(100)] + [word_ends[0]] * 2
    bounds = sorted(c for c in cuts if 0 <= c <= len(text)) + [len(text)]
    starts, ends = [0, *bounds[:-1]], bounds
    assert count.many(starts, ends) == [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(st.sampled_from(["The", " a", ". ", ".\n\n", "\x00", "\xfe", "\xff", "ÿx", "é ", "naïve", "Ωx", "中。",
                                     "😀", "12", " ", "\n", "word", "~", "(", "xy" * 5]), min_size=100, max_size=600),
    seed=st.integers(0, 10**6),
)
def test_many_counts_short_latin1_heads_and_tails_by_packed_keys_exactly(cl100k, pieces, seed):
    # Heads and tails of up to 8 characters below U+00FF are counted through an integer
    # packing their characters (one look-up per distinct piece): every length 1-8, the
    # characters next to that limit (\xfe counted that way, \xff and wider not), NUL,
    # and a cache shared with the strings and with other texts.
    rng = random.Random(seed)
    text = "".join(pieces) + "".join(rng.choice([" Filler words.", "\nÿé\xfe. ", " a", "xyz "]) for _ in range(900))
    count = span_counter(cl100k, text)
    assert hasattr(count, "many"), "long enough, with enough word ends, for the one-encoding index"
    starts = sorted(rng.randrange(len(text)) for _ in range(300))
    ends = [min(len(text), s + rng.choice([1, 2, 3, 8, 9, 12, 17, 25, 40, 90])) for s in starts]
    expected = [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]
    assert count.many(starts, ends) == expected
    assert count.many(starts, ends) == expected, "again, from the keys cached by the first call"
    other = span_counter(cl100k, (text + " ")[:-1])
    assert other.many(starts, ends) == expected


def test_packed_keys_stand_for_one_piece_each(cl100k):
    import numpy as np

    from chunking.tokenizers import _unpack_keys

    text = "ab\x00\xfe\xff." * 800 + "Ω中 " * 400
    count = span_counter(cl100k, text)
    starts = np.arange(0, len(text) - 10, 7, dtype=np.int64)  # pieces inside the text, as the counter asks
    lengths = (starts % 11).astype(np.int64)
    rows, keys = count._packed_keys(starts, lengths)
    for row, key in zip(rows.tolist(), keys.tolist()):
        piece = text[starts[row] : starts[row] + lengths[row]]
        assert 1 <= len(piece) <= 8 and max(map(ord, piece)) < 0xFF and _unpack_keys([key]) == [piece]
    assert _unpack_keys(keys) == [text[starts[r] : starts[r] + lengths[r]] for r in rows.tolist()]  # all at once
    left_out = set(range(len(starts))) - set(rows.tolist())
    for row in left_out:
        piece = text[starts[row] : starts[row] + lengths[row]]
        assert not piece or len(piece) > 8 or max(map(ord, piece)) >= 0xFF
    assert len(set(keys.tolist())) == len({text[starts[r] : starts[r] + lengths[r]] for r in rows.tolist()})


def test_counts_missing_from_the_cache_are_counted_in_one_batch_and_cached(cl100k):
    # A first document: every head and tail is new. They are counted by one count_texts
    # call over the distinct pieces, exactly as one count each would, and cached for the next.
    import numpy as np

    def letters(i: int) -> str:  # distinct words without digits (a digit run's ends are in the index)
        return "".join(chr(ord("a") + int(d)) for d in str(i))

    text = "".join(f"Word{letters(i)} ({letters(i)}). \n\n  Line{letters(i % 97)}, x\n" for i in range(3000))
    text += "日本語のテキスト。" * 50
    cl100k.small_counts().clear()
    cl100k.short_key_counts().fill(-1)
    count = span_counter(cl100k, text)
    batches = []
    real = count.count_texts
    count.count_texts = lambda texts: batches.append(len(texts)) or real(texts)
    one_by_one = []
    real_one = count.count_text
    count.count_text = lambda text: one_by_one.append(text) or real_one(text)
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, len(text) - 1, 4000))
    ends = np.minimum(starts + rng.integers(1, 300, 4000), len(text))
    expected = [cl100k.count(text[s:e]) for s, e in zip(starts.tolist(), ends.tolist())]
    assert count.many(starts.tolist(), ends.tolist()) == expected
    # One batch per kind of piece (heads and tails; one-two characters, up to 8, longer): not a call per piece.
    assert 1 <= len(batches) <= 6 and sum(batches) >= 1000
    assert one_by_one == []  # no piece of any kind (dense table, packed keys, strings) counted alone
    batches.clear()
    assert count.many(starts.tolist(), ends.tolist()) == expected
    assert sum(batches) <= 50  # only pieces longer than the cache holds are counted again
    assert cl100k.count_many(["a", "Hello world", "日本語", ""]) == [1, 2, cl100k.count("日本語"), 0]


def test_a_batch_of_new_pieces_keeps_the_cache_within_its_bound(cl100k, monkeypatch):
    import chunking.tokenizers as tokenizers

    monkeypatch.setattr(tokenizers, "_SMALL_PIECE_CACHE_SIZE", 50)
    cl100k.small_counts().clear()
    count = span_counter(cl100k, "Some text. " * 1000)
    texts = [f"piece{i}" for i in range(200)]
    assert count.pieces(texts) == [cl100k.count(t) for t in texts]
    assert 0 < len(cl100k.small_counts()) <= 50
    assert count.pieces(texts[:30]) == [cl100k.count(t) for t in texts[:30]]
    assert len(cl100k.small_counts()) <= 50
    cl100k.small_counts().clear()


def test_encoded_text_maps_every_token_boundary_to_a_character(cl100k):
    text = "naïve café 😀 日本語 x\u0301 " * 40
    encoded = cl100k.encode_text(text)
    assert isinstance(encoded, EncodedText)
    assert encoded.ids.tolist() == cl100k.encode(text)
    offsets = TokenOffsets(text, cl100k)
    byte_starts = [0, *encoded.token_ends.tolist()]
    for i, byte in enumerate(byte_starts):
        char = offsets.char_at(i)
        # The character holding the boundary byte starts at or before it, and the next one after it.
        assert len(text[:char].encode()) <= byte
        assert char == len(text) or len(text[: char + 1].encode()) > byte
    assert cl100k.encode_text(text) is encoded, "the last text's encoding is kept for the next caller"
    assert cl100k.encode_text((text + " ")[:-1]) is not encoded, "an equal but new string is encoded again"


@pytest.mark.parametrize("text", ["naïve café 😀 日本語 x\u0301 \U0001f9d1\u200d\U0001f4bb ", "plain ASCII, no other bytes. "])
def test_token_char_ends_count_the_characters_starting_before_each_token_end(cl100k, text):
    # Emoji are split across tokens: a token end can fall inside a character, and
    # then it counts the character whose first byte lies before it.
    text *= 60
    encoded = cl100k.encode_text(text)
    data = text.encode()
    expected = [sum(1 for b in data[:end] if b & 0xC0 != 0x80) for end in encoded.token_ends.tolist()]
    assert encoded.token_char_ends.tolist() == expected
    assert any(data[end - 1] & 0xC0 == 0x80 and end < len(data) and data[end] & 0xC0 == 0x80
               for end in encoded.token_ends.tolist()) or text.isascii(), "some token ends inside a character"
    boundaries = [k for k, end in enumerate(encoded.token_ends.tolist()) if end == len(data) or data[end] & 0xC0 != 0x80]
    assert encoded.chars_at_bytes(encoded.token_ends[boundaries]).tolist() == encoded.token_char_ends[boundaries].tolist()


def test_word_end_tokens_agree_with_a_character_by_character_reading(cl100k):
    # The bytes around each token end decide (a pair table for ASCII, whole 3-byte
    # characters next to non-ASCII bytes); here each is decoded and looked up instead.
    from chunking.tokenizers import _word_end_tables, _word_end_tokens

    letter, non_letter = _word_end_tables()
    rng = random.Random(11)
    parts = ["日本語の文", "です", "。", "カタカナ", "、", "中文", "，", "「引用」", "\n", "！", "x", "1", " word", "é", "😀",
             ".", "ab", "Ω", "（", "）", "\u3000", "naïve", "~", "\n#", "\n 1", "\r\n", "\n\x7f", "\n\x1f", ". ", "2 ",
             ") x", " ", "(2009)", "x1", "1x", "\t1\t", "12345678", ".5", "1\n", "١٢", "²3"]
    text = "".join(rng.choice(parts) for _ in range(4000))
    data = text.encode()
    encoded = cl100k.encode_text(text)
    char_at = {}  # byte offset of each character start (and of the end) -> character index
    offset = 0
    for index, char in enumerate(text):
        char_at[offset] = index
        offset += len(char.encode())
    char_at[offset] = len(text)
    expected = []
    for k, end in enumerate(encoded.token_ends.tolist()):
        index = char_at.get(end)  # a token end inside a character is no word end
        if index and letter[ord(text[index - 1])] and (index == len(text) or non_letter[ord(text[index])]):
            expected.append(k)
        elif index and index < len(text) and text[index - 1] == "\n" and "!" <= text[index] <= "~":
            expected.append(k)  # a line start
        elif index and index < len(text) and text[index] in " \t" and "!" <= text[index - 1] <= "~" \
                and not letter[ord(text[index - 1])]:
            expected.append(k)  # a space or tab after punctuation or a digit
        elif index and index < len(text) and text[index - 1] in "0123456789" and text[index].isascii() \
                and text[index] not in "0123456789":
            expected.append(k)  # a run of ASCII digits ends
        elif index and index < len(text) and text[index] in "0123456789" and "!" <= text[index - 1] <= "~" \
                and text[index - 1] not in "0123456789":
            expected.append(k)  # one starts after printable ASCII
    assert _word_end_tokens(data, encoded.token_ends).tolist() == expected


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.sampled_from(["12345", "(1, 2)", "***", "-----", "  \t", "", "x = [1]", ">>> 0.5", "'a'", "\\[1\\]",
                                    "  # c", "...", "é1", "中。", " ", "\r", "!?", "{}", "foo"]), min_size=300, max_size=900),
    seed=st.integers(0, 10**6),
)
def test_spans_across_line_starts_count_exactly(cl100k, lines, seed):
    # Lines of digits, rules and brackets have no word end: their spans are cut at line
    # starts (a newline, then printable ASCII other than the space) -- after whitespace
    # runs, punctuation, CRs, and before digits, quotes and brackets.
    rng = random.Random(seed)
    text = "\n".join(lines) + "\n" + "".join(rng.choice(["1, 2, 3\n", "(a)\n", "\n\n---\n", " x\n"]) for _ in range(900))
    count = span_counter(cl100k, text)
    assert hasattr(count, "many"), "enough word ends and line starts for the one-encoding index"
    line_starts = [m.end() for m in re.finditer(r"\n(?=[!-~])", text)]
    assert set(line_starts) <= set(count.word_ends.tolist()), "every line start is in the index"
    # Within the text: a line start at 1 (a first empty line) less 2 is no position of it.
    bounds = sorted(min(max(rng.choice(line_starts) + rng.choice([-2, -1, 0, 0, 1, 3]), 0), len(text))
                    for _ in range(300))
    starts, ends = bounds[:-1], bounds[1:]
    expected = [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]
    assert count.many(starts, ends) == expected
    assert [count(s, e) for s, e in zip(starts, ends)] == expected
    far = [(s, min(len(text), s + rng.randrange(17, 400))) for s in starts]
    assert count.many([s for s, _ in far], [e for _, e in far]) == [len(cl100k.encode(text[s:e])) for s, e in far]


def test_indented_line_starts_agree_with_a_regex_reading(cl100k):
    # After the last newline of a whitespace run that is only spaces and tabs up to a
    # printable ASCII character (an indentation of at most _INDENT_MAX_BYTES).
    from chunking.tokenizers import _INDENT_MAX_BYTES, _word_end_tokens

    rng = random.Random(12)
    parts = ["\n", "\n\n", "  ", "\t", " ", "x", ">>>", "1", "é", "中", "\r\n", "\xa0", "\u3000", "\x0b", "(", "\n  #",
             " " * (_INDENT_MAX_BYTES + 3)]
    text = "".join(rng.choice(parts) for _ in range(5000)) + "\n   "  # an indentation ending the text: none
    assert text.isascii() is False
    encoded = cl100k.encode_text(text)
    with_indented = set(_word_end_tokens(text.encode(), encoded.token_ends, indented=True).tolist())
    without = set(_word_end_tokens(text.encode(), encoded.token_ends).tolist())
    assert without <= with_indented
    found = encoded.token_char_ends.take(sorted(with_indented - without)).tolist()
    expected = [m.start(1) for m in re.finditer(r"\n(?=([ \t]+)[!-~])", text) if len(m.group(1)) <= _INDENT_MAX_BYTES]
    assert len(expected) > 200 and found == expected


def test_cl100k_never_joins_a_newline_to_the_indentation_after_it(cl100k):
    # What cutting spans after an indented line's newline relies on; a vocabulary with
    # such a token keeps those line starts out of the index.
    from chunking.tokenizers import _joins_newline_to_indentation

    assert cl100k.indentation_stays_apart()
    assert not _joins_newline_to_indentation({b"\n": 0, b"  ": 1, b" \n": 2, b"\n  \n": 3, b"\t": 4})
    assert _joins_newline_to_indentation({b"\n": 0, b"\n  ": 1}) and _joins_newline_to_indentation({b"x\n\t": 0, b"y": 1})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.sampled_from(["    x = 1", "\t>>> f(2)", "  ", "", "  # c", "    ", " 1. Item", "\t\t)", "(1, 2)",
                                    "  \u3000x", "   \xa0y", "foo.", "12", "  \r", "  *"]), min_size=300, max_size=900),
    seed=st.integers(0, 10**6),
)
def test_spans_around_indented_line_starts_count_exactly(cl100k, lines, seed):
    # Indented code and lists: a span's middle may start or end after an indentation's
    # newline, even for a span ending inside the indentation, whose whitespace run the
    # pre-tokenizer takes whole there: no cl100k token ends with a newline and indentation,
    # so BPE gives it the tokens of its two parts.
    rng = random.Random(seed)
    text = "\n".join(lines) + "\n" + "".join(rng.choice(["    y = 2\n", "\n\n  - a\n", "  1 2\n"]) for _ in range(900))
    count = span_counter(cl100k, text)
    assert hasattr(count, "many"), "the one-encoding index"
    indented = [m.end() for m in re.finditer(r"\n(?=[ \t]+[!-~])", text)]
    assert set(indented) <= set(count.word_ends.tolist()), "every indented line start is in the index"
    bounds = sorted(min(len(text), rng.choice(indented) + rng.choice([-3, -1, 0, 0, 1, 2, 3, 4, 5])) for _ in range(400))
    starts, ends = bounds[:-1], bounds[1:]
    far = [(s, min(len(text), s + rng.randrange(1, 300))) for s in starts]
    starts, ends = starts + [s for s, _ in far], ends + [e for _, e in far]
    expected = [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]
    assert count.many(starts, ends) == expected
    assert [count(s, e) for s, e in zip(starts, ends)] == expected


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [("", "uint8"), (" Ω中\xff\uffff", "uint16"), (" Ω中\xff\uffff 😀", "uint32")],
)
def test_packed_keys_are_exact_whatever_width_the_code_points_come_in(cl100k, extra, dtype):
    # code_points is as narrow as the text allows (uint8, uint16, uint32): the packed keys and
    # the word-end index give exact counts at every width, \xff and \uffff (the edges of
    # uint8 and uint16, too wide to pack) included.
    from chunking.segmenter import code_points

    rng = random.Random(5)
    text = "".join(rng.choice(["The", " a", ". ", "\n", "x~", "ab"] + ([extra] if extra else [])) for _ in range(4000))
    count = span_counter(cl100k, text)
    assert code_points(text).dtype == dtype and hasattr(count, "word_ends"), "the one-encoding index"
    starts = sorted(rng.randrange(len(text)) for _ in range(400))
    ends = [min(len(text), s + rng.choice([1, 2, 3, 7, 8, 9, 20, 60])) for s in starts]
    assert count.many(starts, ends) == [len(cl100k.encode(text[s:e])) for s, e in zip(starts, ends)]


def test_one_and_two_character_pieces_are_counted_once_per_tokenizer_in_a_dense_table():
    from chunking.tokenizers import TiktokenTokenizer

    tokenizer = TiktokenTokenizer()  # a table of its own, empty
    text = "Alpha beta. Gamma!\n\n" * 600
    count = span_counter(tokenizer, text)
    # "\n\nAlpha beta. Gamma!": the head "\n\n" (to the line start), the tail "!" (from the word end).
    starts = list(range(18, len(text) - 40, 20))
    ends = [s + 20 for s in starts]
    expected = [len(tokenizer.encode(text[s:e])) for s, e in zip(starts, ends)]
    assert count.many(starts, ends) == expected
    table = tokenizer.short_key_counts()
    newlines, bang = (ord("\n") + 1) | (ord("\n") + 1) << 8, ord("!") + 1
    assert table[newlines] == len(tokenizer.encode("\n\n")) and table[bang] == 1
    assert (table >= 0).sum() < 10, "only the pieces seen are counted"
    table[bang] = 7  # the count of a one-character tail is read from the table
    assert count.many(starts, ends) == [n + 6 for n in expected]
