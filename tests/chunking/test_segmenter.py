from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunking.segmenter import (
    _VECTOR_SCAN_CHARS,
    _long_text_spans,
    _spans_candidate_by_candidate,
    ends_with_sentence_ending,
    sentence_bounds,
    sentence_spans,
    sentences,
)


def test_service_seed_basic_split():
    assert sentences("Hello world. How are you? I am fine!") == ["Hello world. ", "How are you? ", "I am fine!"]


def test_service_seed_multiple_punctuation():
    assert sentences("What?! Really... Yes!") == ["What?! ", "Really... ", "Yes!"]
    assert sentences("What?! Really... Yes. Okay!") == ["What?! ", "Really... ", "Yes. ", "Okay!"]


def test_service_seed_no_punctuation():
    assert sentences("This has no ending punctuation") == ["This has no ending punctuation"]


def test_empty_text_has_no_spans():
    assert sentence_spans("") == []


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith arrived late.",
        "Use a list, e.g. this one, or that.",
        "That is, i.e. the other one.",
        "The U.S. economy grew by 0.95 percent.",
        "J. Smith signed it.",
        "Costs rose approx. five percent.",
        "See fig. 3 for details.",
        "The accuracy was 0.95 on the test set.",
        "Open file.txt and config.yaml now.",
        "Wait... and then it stopped.",
    ],
)
def test_no_false_boundary(text):
    assert sentences(text) == [text]


def test_abbreviations_that_may_end_a_sentence():
    assert sentences("See No. 5 here. The answer is no. Then stop.") == ["See No. 5 here. ", "The answer is no. ", "Then stop."]
    assert sentences("Made by Acme Inc. The end.") == ["Made by Acme Inc. ", "The end."]
    assert sentences("Acme Inc. Board met.") == ["Acme Inc. Board met."]


def test_dotted_acronym_before_a_sentence_starter_ends_the_sentence():
    assert sentences("I live in the U.S. The weather is fine.") == ["I live in the U.S. ", "The weather is fine."]


def test_closing_quotes_and_brackets_stay_with_their_sentence():
    assert sentences('He said "Stop." Then he left.') == ['He said "Stop." ', "Then he left."]
    assert sentences("(See above.) Next one.") == ["(See above.) ", "Next one."]
    assert sentences("她说：「好。」然后走了。") == ["她说：「好。」", "然后走了。"]


def test_cjk_endings_need_no_space():
    assert sentences("这是第一句。这是第二句！对吗？还有‼最后⁉") == [
        "这是第一句。",
        "这是第二句！",
        "对吗？",
        "还有‼",
        "最后⁉",
    ]


def test_ellipsis_character_and_paragraph_break():
    assert sentences("Hmm… Fine.") == ["Hmm… ", "Fine."]
    assert sentences("Title\n\nBody text here.") == ["Title\n\n", "Body text here."]
    # A single newline is a line wrap, not a boundary.
    assert sentences("Heading line\nIntro text.") == ["Heading line\nIntro text."]


def test_trailing_and_leading_whitespace_is_attached():
    assert sentences("  One.   Two.  ") == ["  One.   ", "Two.  "]


@pytest.mark.parametrize("lead", ["\n\n", "\n\n\n\n", " \n\n ", "\t\n \n", "\n\n \n\n"])
@pytest.mark.parametrize("body", ["naïve\n", "b", "中文。x", "Title\n\nBody text. " * 200], ids=["word", "letter", "cjk", "long"])
def test_a_blank_line_before_the_first_sentence_is_whitespace_before_it_not_a_sentence(lead, body):
    # The blank-line rule ends a sentence; with no sentence before it, the whitespace is
    # the first span's (a page starting "\n\nnaïve" was a whitespace-only span, which the
    # sentence strategy carried across a page break as if it were text).
    text = lead + body
    spans = sentence_spans(text)
    assert spans[0][0] == 0 and text[spans[0][0] : spans[0][1]].strip()
    assert spans[1:] == [(s + len(lead), e + len(lead)) for s, e in sentence_spans(body)][1:]
    assert sentences("\n\n") == ["\n\n"]


def test_ends_with_sentence_ending():
    assert ends_with_sentence_ending("Done.  ")
    assert ends_with_sentence_ending('He said "yes!"')
    assert ends_with_sentence_ending("完了。")
    assert not ends_with_sentence_ending("The procedure continues to operate")
    assert not ends_with_sentence_ending("")


def test_non_string_is_rejected():
    with pytest.raises(TypeError, match="expects str"):
        sentence_spans(b"bytes")  # type: ignore[arg-type]


_ALPHABET = st.sampled_from(list("abc XYZ .!?…。！？\"')」\n\t0123456789é😀中"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=200) | st.text(max_size=200))
def test_spans_are_contiguous_and_lossless(text):
    spans = sentence_spans(text)
    assert "".join(text[s:e] for s, e in spans) == text
    position = 0
    for start, end in spans:
        assert start == position and end > start
        position = end
    assert position == len(text)


# Long texts take the numpy path (_long_text_spans), which settles most candidates
# itself and hands the rest to the per-candidate rules: it must cut exactly where the
# rules cut one candidate at a time. Pieces aim at each branch of those rules.
_LONG_TEXT_PIECES = st.sampled_from(
    [
        "word", "Longerword", "x", "J", "Dr", "dr", "No", "no", "fig", "Inc", "approx", "e.g", "U.S", "os.path",
        "x.py", "a.b.c", "P", "p", "v", "(os.path", "\"x.y", "e.G", "I.E", "mod.Func", "Ab.c", "é.x", "re.A", "3.2", "5.3.0", "v1.2", "x.1", "a._", "A.b)",
        "0.95", "5", "The", "the", "über", "Éclair", "中文", "日本語", "😀", "𝐀bc", "ǅ",
        "Mr", "VOL", "Sept", "\u212ao", "İ", "a\x00", ".\" (", "?”) «", "(" * 12 + "A", ".)" + ")" * 10 + " A",
        ". ", ".", "! ", "?! ", "... ", "…", "。", "！", "？", "‼", ".\u3000", ".\u2029",
        "\"", "'", "”", "」", "）", "(", "“", "「", "«",
        " ", "  ", "\n", "\n\n", "\n  \n", "\t", " " * 40, "\n" + " " * 45 + "\n",
        # Words with an opener and no dot before a lone period: leading openers stripped, or not.
        "connect()", "'NaN'", "(no", "((no", "(J", "\"j", "(v", "«Dr", "(" * 6 + "x", "(" * 7 + "no", "a(b", "[a-z]",
        "'a///b'", "(point)", "“Py3k”", "(é", "(É", "x«y", "(approx", "(Inc", "(The", "(" * 5 + "Mrs", "“I",
        # Blank lines of other whitespace, and runs of them sharing newlines.
        "\r\n", "\r\n\r\n", "\n\x0b\n", "\n\u2028\n", "\n\n\n", "\n \t\n\n",
    ]
)  # fmt: skip
_FILLER = "Filler words here. "


@settings(max_examples=150, deadline=None)
@given(st.lists(_LONG_TEXT_PIECES, min_size=1, max_size=400))
def test_long_text_path_cuts_where_the_rules_cut(pieces):
    text = "".join(pieces)
    # Padding on both sides: the pieces' own text sits at the start, the middle and the end.
    text = text + _FILLER * (1 + (_VECTOR_SCAN_CHARS - len(text)) // len(_FILLER)) + text
    assert len(text) >= _VECTOR_SCAN_CHARS
    assert _long_text_spans(text) == _spans_candidate_by_candidate(text)
    assert sentence_spans(text) == _long_text_spans(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["\n", "\n", " ", "\t", "\r", "\x0b", "\u2028", "\u3000", "\x85", "a", "中", " " * 40]),
                max_size=40).map("".join))
def test_blank_lines_from_the_newlines_are_the_regex_matches(text):
    from chunking.segmenter import _BLANK_LINE, _blank_lines, _scan_tables, code_points

    found = _blank_lines(text, code_points(text, keep=False), _scan_tables())
    assert found.tolist() == [list(m.span()) for m in _BLANK_LINE.finditer(text)]


@pytest.mark.parametrize(
    ("phrase", "cut"),
    [
        ("call connect(). The end", True),  # the word is longer than any listed one
        ("see 'NaN'. Then more", True),
        ("as in (approx. Five more", False),  # "approx" once its opener is stripped: never final
        ("see (no. 5 here", False),  # "no" before a number
        ("said (no. The end", True),
        ("made by (Inc. Board members", False),  # rarely final: only before a sentence starter
        ("made by (Inc. The end", True),
        ("by (J. Smith", False),  # an initial
        ("by (É. Smith", False),  # an initial outside ASCII (left to the rules)
        ("odd ((. The end", True),  # only openers: no word
        ("odd ((((((((no. The end", True),  # openers past the probe (left to the rules)
        ("call f(x). The end", True),
        ("a «Dr. Who» show", False),
    ],
)
def test_long_text_path_reads_words_with_openers_as_the_rules_do(phrase, cut):
    # Each phrase has one lone period before a space: cut there, or not.
    filler = _FILLER * (_VECTOR_SCAN_CHARS // len(_FILLER) + 1)
    text = filler + phrase + " " + filler
    period = len(filler) + phrase.index(". ") + 2
    spans = _long_text_spans(text)
    assert spans == _spans_candidate_by_candidate(text)
    assert (period in {end for _, end in spans}) is cut


def test_long_text_path_on_the_corpus_cuts_where_the_rules_cut():
    corpus = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "txt"
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpus.glob("*.txt"))]
    texts = [t for t in texts if len(t) >= _VECTOR_SCAN_CHARS]
    assert len(texts) >= 3, f"expected the corpus text files under {corpus}"
    for text in texts:
        assert _long_text_spans(text) == _spans_candidate_by_candidate(text)


def test_offset_shifts_every_span_on_both_paths():
    short = "Dr. Smith arrived. He sat down! Did he? Yes."
    long = short + " " + "Filler words here. " * (_VECTOR_SCAN_CHARS // 19 + 1)
    for text in (short, long):
        assert sentence_spans(text, 1234) == [(s + 1234, e + 1234) for s, e in sentence_spans(text)]
        assert sentence_spans(text, 0) == sentence_spans(text)
        bounds = sentence_bounds(text, 1234)
        assert list(zip(bounds, bounds[1:])) == sentence_spans(text, 1234)
    assert sentence_bounds("") == []


def test_sentence_bounds_each_gives_each_texts_own_bounds():
    # Texts segmented together: every candidate about a text's ends (an abbreviation, an
    # initial or a sentence starter cut mid-word at the end, whitespace, closers or a
    # blank line reaching it, a CJK ending without whitespace, a run at the very start)
    # is decided as in the text alone. Few texts (the per-candidate path) and many (numpy).
    import random

    from chunking.segmenter import code_points, sentence_bounds_each

    rng = random.Random(12)
    pieces = ["word", "Dr", "e.g", "0.95", ".", ". ", "! ", "?", "...", "…", "。", "。」", ".)", ")", "\"", "“", "」",
              "” ", " ", "\n", "\n\n", "\n \n", ",", "中文", "Über", "the", "The", "There", "U.S", "Inc", "etc", "no",
              "5", "J", "x", "(", "\t", "\u3000"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    texts += ["", ". Then", "etc. Th", "etc. The", "J. ", "Hi.\n\n", "\n\nHi", "中文。", "中文。」", "Dr.", "“", "a" * 45 + ". B"]
    texts.append("Plain sentence one. " * 300)  # longer than the numpy path's threshold on its own
    expected = [sentence_bounds(text) for text in texts]
    document = "kept"
    kept = code_points(document)
    for size in (3, 40, len(texts)):
        assert sentence_bounds_each(texts[:size]) == expected[:size]
    assert sentence_bounds_each([]) == []
    assert code_points(document) is kept, "the joined text does not replace the document's code points"


def test_code_points_are_kept_for_the_last_text_only():
    from chunking.segmenter import code_points

    text = "naïve 😀 中文 \ud800 x" * 300  # a lone surrogate too
    codes = code_points(text)
    assert codes.tolist() == [ord(c) for c in text]
    assert code_points(text) is codes, "the segmenter and the span counter share one array per document"
    other = (text + " ")[:-1]
    assert code_points(other) is not codes and code_points(other).tolist() == codes.tolist()


@pytest.mark.parametrize(
    ("text", "dtype"),
    [("Plain text. Dr. Who? " * 300, "uint8"), ("Naïve „Hallo!“ 中文。\uffff x. " * 300, "uint16"),
     ("Emoji 😀. Then \ud800 more. " * 300, "uint32")],
)
def test_code_points_come_as_narrow_as_the_text_allows_with_the_same_bounds(text, dtype):
    import numpy as np

    from chunking.segmenter import code_points

    codes = code_points(text, keep=False)
    assert codes.dtype == dtype and codes.tolist() == [ord(c) for c in text]
    wide = np.array([ord(c) for c in text], dtype=np.uint32)
    assert sentence_bounds(text, codes=codes) == sentence_bounds(text, codes=wide)


def test_sentence_bounds_of_a_slice_from_a_view_of_the_documents_code_points():
    import numpy as np

    from chunking.segmenter import code_points

    document = ("Dr. Smith arrived. He said: „Hallo!“ 中文。Then... nothing.\n\n" * 200) + "tail"
    codes = code_points(document)
    for start, end in ((0, len(document)), (7, 9000), (4100, len(document) - 3)):
        part = document[start:end]
        assert sentence_bounds(part, start, codes=codes[start:end]) == sentence_bounds(part, start)
    with pytest.raises(ValueError):
        sentence_bounds(document[:5000], codes=np.zeros(10, dtype=np.uint32))
