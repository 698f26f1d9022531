"""The one sentence segmenter every sentence-based strategy uses.

Entry point::

    spans = sentence_spans(text)
    assert "".join(text[s:e] for s, e in spans) == text   # never loses a character

Invariants a caller relies on:

* Spans are contiguous, non-empty and cover ``text`` exactly: the first starts at 0,
  each starts where the previous ended, the last ends at ``len(text)``. Empty text
  gives ``[]``.
* Whitespace after a sentence belongs to that sentence (``"Hi. "`` + ``"Yo."``);
  whitespace before the first sentence belongs to the first span.

A boundary is placed after

* a run of ``. ! ? …`` (with any closing quotes / brackets) that is followed by
  whitespace or the end of the text, unless the period ends an abbreviation
  (``Dr.``, ``e.g.``, ``U.S.`` before a lowercase word, an initial like ``J.``), or a
  dot run is followed by a lowercase word (``approx. five``, ``wait... and``);
  a period inside a token (``0.95``, ``file.txt``) is never a boundary because no
  whitespace follows it;
* a run containing a CJK ending ``。！？‼⁇⁈⁉`` (CJK text has no spaces, so none is
  required), with its closing quotes / brackets;
* a blank line (a paragraph break): a heading or list item without final
  punctuation is a sentence of its own rather than glued to the next paragraph.

This is deliberately a rule set, not a model: it runs at regex speed over
megabytes and its mistakes are predictable. Texts from ``_VECTOR_SCAN_CHARS`` on
are scanned for candidate endings with numpy (the same candidates, several times
faster than a regex character class holding non-Latin-1 characters; blank lines
from the newlines), and the rules are applied there to all candidates at once
where their outcome needs nothing beyond per-character tables (all but 96 of the
21,074 candidates of the chunker bench's workload); the others go through the same per-candidate rules as short texts
(:func:`_long_text_spans`; ``tests/chunking/test_segmenter.py`` checks that both
paths cut alike).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any, NamedTuple

STANDARD_SENTENCE_ENDINGS: tuple[str, ...] = (".", "!", "?")
# CL05 and CL06 of the W3C jlreq (JIS X 4051), as in the Azure splitter.
CJK_SENTENCE_ENDINGS: tuple[str, ...] = ("。", "！", "？", "‼", "⁇", "⁈", "⁉")
SENTENCE_ENDINGS: tuple[str, ...] = STANDARD_SENTENCE_ENDINGS + CJK_SENTENCE_ENDINGS

STANDARD_WORD_BREAKS: tuple[str, ...] = (",", ";", ":", " ", "(", ")", "[", "]", "{", "}", "\t", "\n")
# CL01/CL02 of the W3C jlreq: CJK commas, brackets, quotes and dashes.
CJK_WORD_BREAKS: tuple[str, ...] = (
    "、", "，", "；", "：", "（", "）", "【", "】", "「", "」", "『", "』", "〔", "〕", "〈", "〉",
    "《", "》", "〖", "〗", "〘", "〙", "〚", "〛", "〝", "〞", "〟", "〰", "–", "—", "‘", "’",
    "‚", "‛", "“", "”", "„", "‟", "‹", "›",
)  # fmt: skip
WORD_BREAKS: tuple[str, ...] = STANDARD_WORD_BREAKS + CJK_WORD_BREAKS

_CLOSERS = "\"'”’)]}»›」』）】〕〉》〗〙〛〞〟"
_OPENERS = "\"'“‘([{«‹「『（【〔〈《〖〘〚〝"
_CJK_ENDINGS = "".join(CJK_SENTENCE_ENDINGS)

# Candidates are found with a plain character class (fast); what follows each is
# then matched in place. Written ``[c][c]*`` rather than ``[c]+``: the regex engine
# then skips to a possible first character instead of trying both branches at
# every position (a third faster); ASCII text gets a class without the others.
_CANDIDATE = re.compile("[.!?…" + _CJK_ENDINGS + "][.!?…" + _CJK_ENDINGS + "]*|\n[^\\S\n]*\n")
_ASCII_CANDIDATE = re.compile("[.!?][.!?]*|\n[^\\S\n]*\n")
# An ending character, its closers, then whitespace or the end: where a sentence's text can end
# unless a CJK ending cut it (see sentence_end_possible).
_SPACED_ENDING = re.compile("[" + re.escape("".join(SENTENCE_ENDINGS) + "…") + "][" + re.escape(_CLOSERS) + "]*(?=\\s|\\Z)")
# A CJK ending: the only ending the segmenter cuts after without whitespace (see sentence_end_possible).
_CJK_ENDING_CHARACTER = re.compile("[" + re.escape(_CJK_ENDINGS) + "]")
# The characters of a candidate ending run (_CANDIDATE's first class).
_ENDING_RUN_CHARACTERS = frozenset(".!?…" + _CJK_ENDINGS)
# The numpy scan's first filter for those characters (see _candidate_arrays).
_ASCII_ENDING_CODES = tuple(sorted(ord(c) for c in _ENDING_RUN_CHARACTERS if ord(c) < 0x80))
_FIRST_NON_ASCII_ENDING = min(ord(c) for c in _ENDING_RUN_CHARACTERS if ord(c) >= 0x80)
_BLANK_LINE = re.compile("\n[^\\S\n]*\n")
# From this length on, candidates are located and mostly decided with numpy: Python's
# regex scans a character class holding non-Latin-1 characters at ~40 ns per char,
# and the rules cost a few microseconds per candidate in Python.
_VECTOR_SCAN_CHARS = 4096
# The same, for a caller deciding whether to hand sentence_bounds a text's code points.
VECTOR_SCAN_CHARS = _VECTOR_SCAN_CHARS
# The numpy path steps through at most this much whitespace, and this many closers, after a candidate.
_MAX_WHITESPACE_STEPS = 32
_MAX_CLOSER_STEPS = 8
# The last code point str.isspace() accepts (U+3000, the ideographic space).
_LAST_SPACE = 0x3000
# After an ending run: closers, whitespace, then the next word (as far as the rules look).
_TAIL = re.compile("([" + re.escape(_CLOSERS) + "]*)(\\s*)(\\S{0,40})")
_WHITESPACE = re.compile(r"\s*")
_NON_SPACE = re.compile(r"\S")

# Abbreviations after which a period never ends a sentence: titles and Latin
# shorthands that are always followed by more of the same sentence.
_NEVER_FINAL = frozenset(
    """
    mr mrs ms mx dr prof sr jr st mt ft gen col lt capt sgt rev hon pres gov sen rep
    e.g i.e cf vs v viz approx ca al
    """.split()
)
# Abbreviations that do not end a sentence before a number ("No. 5", "fig. 3"),
# but may otherwise ("The answer is no. Then ...").
_BEFORE_NUMBER = frozenset("no nos vol vols p pp fig figs eq eqs ch sec art".split())
# Abbreviations that end a sentence only before a typical sentence start, as
# dotted acronyms do ("Acme Inc. The next" vs "Acme Inc. Board").
_RARELY_FINAL = frozenset("inc ltd co corp dept est jan feb mar apr jun jul aug sep sept oct nov dec".split())
# Words that start a new sentence often enough that a dotted acronym before them
# ("... in the U.S. The next ...") is taken as sentence-final.
_SENTENCE_STARTERS = frozenset(
    """
    the a an this that these those it its he she they we i you there here in on at
    but and or so yet however then thus therefore also if when while after before
    as for to our their his her my
    """.split()
)
# Every word whose period _ends_sentence_here may treat specially (the longest has 6
# characters: a word of _WORD_PROBE or more without a dot is never one of them).
_LISTED_WORDS = _NEVER_FINAL | _BEFORE_NUMBER | _RARELY_FINAL
_WORD_PROBE = 7
_DOTTED_ACRONYM = re.compile(r"^(?:[^\W\d_]\.)+[^\W\d_]$")


def sentence_spans(text: str, offset: int = 0) -> list[tuple[int, int]]:
    """Contiguous ``(start, end)`` sentence spans that concatenate back to ``text``.

    ``offset``: added to every position, for a caller that sliced ``text`` from a
    larger text at ``offset`` (the sentences are those of ``text`` alone).
    """
    bounds = sentence_bounds(text, offset)
    return list(zip(bounds, bounds[1:]))


def sentence_bounds(text: str, offset: int = 0, *, codes: Any = None) -> list[int]:
    """``sentence_spans(text, offset)`` as its bounds: the first start, then every end.

    For a caller that wants the starts and ends as two lists (``bounds[:-1]``,
    ``bounds[1:]``): no tuple per sentence is made (a document has thousands, and
    each allocation brings the next cyclic garbage collection nearer). ``[]`` for
    empty text. ``codes``: ``code_points(text)`` when the caller has it already (a
    slice of a document's array: ``code_points(doc)[start:end]`` for
    ``text = doc[start:end]``), so a long text's code points are not copied again.
    """
    if not isinstance(text, str):
        raise TypeError(f"sentence_spans expects str, got {type(text).__name__}")
    if not text:
        return []
    if len(text) >= _VECTOR_SCAN_CHARS:
        return _long_text_bounds(text, offset, codes)
    bounds = _bounds_candidate_by_candidate(text)
    return [bound + offset for bound in bounds] if offset else bounds


# Between the texts that sentence_bounds_each segments in one call: whitespace, a letter, whitespace.
_TEXT_SEPARATOR = " x "


def sentence_bounds_each(texts: list[str]) -> list[list[int]]:
    """``[sentence_bounds(text) for text in texts]``, segmenting the texts in one call.

    For many short texts (the windows of the look-ahead overlap): they are joined with
    ``_TEXT_SEPARATOR`` between them and segmented together, so their candidates are
    decided in one numpy pass (:func:`_long_text_bounds`) rather than one by one in
    Python; each text's bounds are the joined text's cuts strictly inside it.

    Why it is exact. The rules decide a candidate from the text itself: 40 characters
    back (``_word_before``) and forward through its closers, whitespace and the next
    word (``_TAIL``; a blank line, its whitespace). The separator starts and ends with
    whitespace and holds a letter, which no closer, whitespace or blank-line run crosses:

    * Nothing before a text reaches into it: a cut made before it stops at the
      separator's letter at the latest, and a word read back from inside it stops at
      the separator's last character, whitespace, as the text alone stops at its
      start. So every candidate of the text, and the candidates only, are found and
      read alike up to the text's end.
    * At the text's end: a next word that the text cut short ends there, followed by
      the separator's whitespace, as by the end of the text alone. A candidate whose
      closers or whitespace reach the end (alone: ``end >= size``, no cut, the text's
      last bound) may be decided otherwise here (it now sees the separator), but its
      cut, if any, falls at or after the text's end: outside the text. No other
      candidate follows it within the text (a later one would start inside its
      whitespace, a blank line, and end where it ends).

    So the cuts strictly inside each text are those of the text alone, and
    ``sentence_bounds`` gives the same cuts along either of its paths
    (``tests/chunking/test_segmenter.py``); a first cut with only whitespace before
    it is then left out of each text's, as ``sentence_bounds`` leaves it out.
    """
    if not texts:
        return []
    import numpy as np

    joined = _TEXT_SEPARATOR.join(texts)
    codes = code_points(joined, keep=False) if len(joined) >= _VECTOR_SCAN_CHARS else None
    bounds = np.array(sentence_bounds(joined, codes=codes), dtype=np.int64)
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    starts = np.concatenate(([0], np.cumsum(sizes + len(_TEXT_SEPARATOR))[:-1]))
    # Each bound relative to the start of the text it falls in (or the separator after it).
    relative = (bounds - starts[np.searchsorted(starts, bounds, side="right") - 1]).tolist()
    firsts = np.searchsorted(bounds, starts, side="right").tolist()  # the first bound past each start
    lasts = np.searchsorted(bounds, starts + sizes, side="left").tolist()  # the first at or past each end
    return [
        _blank_start_attached(text, [0, *relative[first:last], size], 0) if size else []
        for text, first, last, size in zip(texts, firsts, lasts, sizes.tolist())
    ]


def _spans_candidate_by_candidate(text: str) -> list[tuple[int, int]]:
    """``sentence_spans(text)`` (non-empty ``text``), evaluating the rules at each candidate in turn."""
    bounds = _bounds_candidate_by_candidate(text)
    return list(zip(bounds, bounds[1:]))


def _bounds_candidate_by_candidate(text: str) -> list[int]:
    """``sentence_bounds(text)`` (non-empty ``text``), evaluating the rules at each candidate in turn."""
    size = len(text)
    cuts: list[int] = []
    for match in (_ASCII_CANDIDATE if text.isascii() else _CANDIDATE).finditer(text):
        decision = _evaluate(text, *match.span())
        if decision is None:
            continue  # "0.95", "os.path": punctuation inside a token
        end, is_boundary = decision
        if end >= size:
            break
        if is_boundary and (not cuts or end > cuts[-1]):
            cuts.append(end)
    # The cuts ascend strictly, from above 0 to below size: no span is empty.
    return _blank_start_attached(text, [0, *cuts, size], 0)


def _blank_start_attached(text: str, bounds: list[int], offset: int) -> list[int]:
    """``bounds`` of ``text`` (shifted by ``offset``) without a first cut that only whitespace
    precedes: the blank-line rule ends a sentence, and before the first there is none, so
    that whitespace is the first span's (as any whitespace before the first sentence is)."""
    while len(bounds) > 2 and _NON_SPACE.search(text, 0, bounds[1] - offset) is None:
        del bounds[1]
    return bounds


def _evaluate(text: str, at: int, after: int) -> tuple[int, bool] | None:
    """The rules at one candidate ``text[at:after]``: ``(end, is_boundary)``; ``None`` inside a token.

    ``end`` is where a sentence that ends here stops: past the candidate, its
    closing quotes / brackets and the whitespace after them.
    """
    term = text[at:after]
    if term[0] == "\n":  # a blank line
        return _WHITESPACE.match(text, after).end(), True
    if after < len(text) and not text[after].isspace() and text[after] not in _CLOSERS and not _has_cjk_ending(term):
        return None
    tail = _TAIL.match(text, after)
    closers, space, next_word = tail.groups()
    return tail.end(2), _ends_sentence_here(text, term, at, closers, space, next_word)


def _long_text_spans(text: str, offset: int = 0) -> list[tuple[int, int]]:
    """``sentence_spans(text, offset)`` by :func:`_long_text_bounds`."""
    bounds = _long_text_bounds(text, offset)
    return list(zip(bounds, bounds[1:]))


def _long_text_bounds(text: str, offset: int = 0, codes: Any = None) -> list[int]:
    """``sentence_bounds(text, offset)`` with each candidate's ``_evaluate`` mostly answered with numpy.

    The candidates are ``_CANDIDATE``'s: maximal runs of ending characters and
    blank lines. A candidate is settled here only where ``_evaluate`` /
    ``_ends_sentence_here`` reach their result without looking further than
    these tables do: a blank line, a CJK ending, ``!``/``?``, a lowercase next
    word (after its opening quotes / brackets), ``..``/``…``, a period and closing
    quotes / brackets, or a lone ``.`` after a word that is none of the listed
    abbreviations (short ASCII words are looked up all at once; a word with a dot
    that does not end in a dot and one character is no dotted acronym; an unlisted
    ASCII initial is no boundary; a word with opening quotes / brackets and no dot
    is read without its leading ones, see :func:`_opener_words`). Every other candidate
    (a listed word or a possible dotted acronym before the period, openers up to
    the probe's end, more than
    ``_MAX_CLOSER_STEPS`` closers or openers, a
    whitespace run longer than ``_MAX_WHITESPACE_STEPS``, a next character outside
    the BMP) goes to ``_evaluate`` itself, so there is one rule set and this is its
    fast path.
    """
    import numpy as np

    tables = _scan_tables()
    if codes is None:
        codes = code_points(text)
    elif len(codes) != len(text):
        raise ValueError(f"codes hold {len(codes)} code points for a text of {len(text)} characters")
    size = len(codes)
    at, after, is_blank, has_cjk, has_bang = _candidate_arrays(text, codes, tables)

    # ``take`` rather than ``array[indexes]`` throughout: numpy's fancy indexing costs about twice
    # as much per element; ``mode="clip"`` reads the last character for a position at the end.
    following = codes.take(after, mode="clip")
    inside = after < size
    closer_follows = inside & tables.is_closer.take(following)
    skip = ~is_blank & inside & ~tables.is_space.take(following) & ~closer_follows & ~has_cjk
    unknown = np.zeros(len(at), dtype=bool)

    # ``closed``: past the closing quotes / brackets after an ending run (_TAIL's first
    # group; step by step: such runs are short).
    closed = after.copy()
    stepping = _step_over(closed, np.flatnonzero(~is_blank & closer_follows), codes, tables.is_closer,
                          _MAX_CLOSER_STEPS)
    unknown[stepping] = True  # still in closers: left to _evaluate

    # ``end``: past the whitespace after those (_TAIL's second group).
    end = closed.copy()
    stepping = _step_over(end, np.flatnonzero(~skip & ~unknown), codes, tables.is_space, _MAX_WHITESPACE_STEPS)
    unknown[stepping] = True  # still in whitespace: left to _evaluate

    # _ends_sentence_here's rules, in its order, for the candidates not settled yet.
    has_space = end > closed
    boundary = is_blank | has_cjk | (has_space & has_bang)
    open_ = ~skip & ~unknown & ~is_blank & ~has_cjk & has_space & ~has_bang & (end < size)
    # The next word's first character once its opening quotes / brackets are skipped
    # (``next_word.lstrip(_OPENERS)``; none when only openers come before whitespace or the end).
    word_at = end.copy()
    stepping = np.flatnonzero(open_ & tables.is_opener.take(codes.take(end, mode="clip")))
    for _ in range(_MAX_CLOSER_STEPS):
        positions = word_at[stepping]
        stepping = stepping[(positions < size) & tables.is_opener.take(codes.take(positions, mode="clip"))]
        if not len(stepping):
            break
        word_at[stepping] += 1
    unknown[stepping] = True  # still in openers: left to _evaluate
    next_char = np.where(word_at < size, codes.take(word_at, mode="clip"), ord(" "))
    beyond_table = next_char >= len(tables.is_lower)
    unknown |= open_ & beyond_table
    open_ &= ~unknown
    open_ &= ~tables.is_lower.take(np.where(beyond_table, 0, next_char))  # "approx. five": not a boundary
    single_dot = (after - at == 1) & (codes.take(at, mode="clip") == ord(".")) & (closed == after)
    boundary |= open_ & ~single_dot  # "...", "…" or a period and closers, before a capital
    open_ &= single_dot
    # A lone period before a capital: the word before it, probed up to _WORD_PROBE characters back.
    dots = np.flatnonzero(open_)
    back = at[dots, None] - np.arange(1, _WORD_PROBE + 1)[None, :]
    chars = codes.take(back, mode="clip")  # before the text's start: its first character
    is_break = (back < 0) | tables.is_space.take(chars)
    word_length = np.where(is_break.any(axis=1), is_break.argmax(axis=1), _WORD_PROBE)
    in_word = np.arange(_WORD_PROBE)[None, :] < word_length[:, None]
    openers = in_word & tables.is_opener.take(chars)
    has_opener = openers.any(axis=1)
    has_dot = (in_word & (chars == ord("."))).any(axis=1)
    marked = has_dot | has_opener
    # A word holding a dot but no opening quote / bracket (none to strip from its start, so
    # its last two characters are those probed) that does not end in "." then a letter
    # (an ASCII non-letter is certainly none): no dotted acronym, none of the listed words
    # (the dotted ones, "e.g" and "i.e", end so) and not an initial: the rules end the
    # sentence ("os.path. The", "3.2. The").
    dotted_plain = has_dot & ~has_opener & (word_length >= 2)
    folded = chars[:, 0] | 0x20
    ascii_non_letter = (chars[:, 0] < 0x80) & ~((folded >= ord("a")) & (folded <= ord("z")))
    dotted_plain &= (chars[:, 1] != ord(".")) | ascii_non_letter
    boundary[dots[dotted_plain]] = True
    lowered = chars + 32 * ((chars >= ord("A")) & (chars <= ord("Z")))
    # A word holding an opening quote / bracket but no dot ("connect().", "'NaN'.", "[a-z]."):
    # the rules read it without its leading openers, which is then no dotted acronym (one
    # ends in "." and a letter, so its dot would be probed).
    decided_opener = _opener_words(np.flatnonzero(has_opener & ~has_dot), chars, lowered, openers, word_length,
                                   dots, boundary)
    unknown[dots[marked & ~dotted_plain & ~decided_opener]] = True
    # No word, or one longer than every listed abbreviation: the rules end the sentence.
    boundary[dots[~marked & ((word_length == 0) | (word_length == _WORD_PROBE))]] = True
    short = ~marked & (word_length > 0) & (word_length < _WORD_PROBE)
    # A short ASCII word: lowercased (A-Z only, as str.lower does in ASCII) and packed into
    # one integer, then compared with the listed words' integers all at once.
    ascii_word = ~(in_word & (chars >= 0x80)).any(axis=1)
    listed = _is_listed(_word_keys(lowered, in_word))
    single_letter = (word_length == 1) & (lowered[:, 0] >= ord("a")) & (lowered[:, 0] <= ord("z"))
    decided = short & ascii_word
    unknown[dots[decided & listed]] = True  # the rules look at the next word ("no. 5", "Inc. The")
    # An initial that is not a listed word ("J. Smith"): not a boundary (boundary is already false).
    boundary[dots[decided & ~listed & ~single_letter]] = True
    short &= ~ascii_word  # other scripts: the same test in Python
    for index, length in zip(dots[short].tolist(), word_length[short].tolist()):
        start = int(at[index])
        word = text[start - length : start]
        if word.lower() in _LISTED_WORDS or (length == 1 and word.isalpha()):
            unknown[index] = True
        else:
            boundary[index] = True

    for index in np.flatnonzero(unknown).tolist():
        decision = _evaluate(text, int(at[index]), int(after[index]))
        if decision is None:
            skip[index] = True
        else:
            end[index], boundary[index] = decision

    # sentence_spans's loop over the decisions: stop at the first end at the text's
    # end; cut at each boundary's end that is past the previous cut.
    end, boundary = end[~skip], boundary[~skip]
    at_text_end = np.flatnonzero(end >= size)
    if len(at_text_end):
        end, boundary = end[: at_text_end[0]], boundary[: at_text_end[0]]
    cuts = end[boundary]
    if len(cuts):
        cuts = cuts[cuts > np.concatenate(([0], np.maximum.accumulate(cuts)[:-1]))]
    return _blank_start_attached(text, (np.concatenate(([0], cuts, [size])) + offset).tolist(), offset)


_last_code_points: tuple[str, Any] | None = None  # (text, its code points): the last text asked for


def code_points(text: str, keep: bool = True):
    """numpy unsigned integers (read-only): the code points of ``text``, lone surrogates included.

    As narrow as the text allows -- uint8 for ASCII, uint16 when every character is
    in the BMP, uint32 otherwise -- because the copy is the cost (a UTF-32 copy of a
    million BMP characters takes ~2-3 ms, a UTF-16 one ~0.5, ASCII a memcpy); callers
    compare and look up, and widen before arithmetic that could overflow.

    The last text's array is kept (by identity of ``text``, as
    ``TiktokenTokenizer.encode_text`` keeps its encoding): the segmenter and the span
    counter of one document both read it, and it is built once (one copy of
    the text). ``keep=False``: for a text made up
    on the way (:func:`sentence_bounds_each`), which is not to replace the kept
    document's array.
    """
    global _last_code_points
    import numpy as np

    last = _last_code_points
    if last is not None and last[0] is text:
        return last[1]
    if text.isascii():
        codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        utf16 = text.encode("utf-16-le", "surrogatepass")
        if len(utf16) == 2 * len(text):  # no surrogate pair: one unit per character (a lone surrogate too)
            codes = np.frombuffer(utf16, dtype=np.uint16)
        else:
            codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if keep:
        _last_code_points = (text, codes)
    return codes


def _step_over(positions, stepping, codes, is_class, max_steps: int, limits=None):
    """Advance ``positions[stepping]`` in place past characters of one class (``is_class``,
    a table over code points), at most ``max_steps`` each and never past ``limits`` (per
    position; the text's end by default); returns the indices still inside such a run
    after that many steps (the caller leaves them to the per-candidate rules).
    Step by step, not a search: the runs stepped over here are short (wider looks, a
    window of characters per step, measured slower on the chunker bench's workload)."""
    size = len(codes)
    for _ in range(max_steps):
        at = positions[stepping]
        limit = size if limits is None else limits[stepping]
        stepping = stepping[(at < limit) & is_class.take(codes.take(at, mode="clip"))]
        if not len(stepping):
            break
        positions[stepping] += 1
    return stepping


def _word_keys(lowered, in_word):
    """One int64 per row: its in-word ASCII code points, last character first, a byte each (+1, so
    a word's length is part of its key). ``lowered``: characters read backwards from a period."""
    import numpy as np

    shifts = 8 * np.arange(lowered.shape[1], dtype=np.int64)
    return (((lowered.astype(np.int64) + 1) * in_word) << shifts[None, :]).sum(axis=1)


def _opener_words(rows, chars, lowered, openers, word_length, dots, boundary):
    """Settle the lone periods after ``rows`` (words with an opener and no dot in the probe);
    returns a mask over all the probed words: True where settled (``boundary`` set for those
    that end a sentence). The rules read ``word.lstrip(_OPENERS)``:

    * its characters from the farthest probed one that is no opener on, so when that is the
      ``_WORD_PROBE``-th the word is longer than every listed one: a boundary;
    * with the word whole in the probe, nothing left (only openers, ``'"'.``): a boundary;
      a listed word (``(no.``) waits for the next word, as a plain one does; one ASCII
      letter (``(J.``) is an initial, no boundary; another ASCII word, a boundary.

    The rest (openers up to the probe's end, non-ASCII characters) go to the rules.
    """
    import numpy as np

    decided = np.zeros(len(chars), dtype=bool)
    if not len(rows):
        return decided
    kept = ~openers[rows] & (np.arange(_WORD_PROBE)[None, :] < word_length[rows, None])
    # Past the farthest character that is no opener: the stripped word's length.
    stripped = np.where(kept.any(axis=1), _WORD_PROBE - kept[:, ::-1].argmax(axis=1), 0)
    whole = word_length[rows] < _WORD_PROBE
    long_ = stripped == _WORD_PROBE  # its first character is the probe's last: 7 or more
    in_stripped = np.arange(_WORD_PROBE)[None, :] < stripped[:, None]
    ascii_ = ~(in_stripped & (chars[rows] >= 0x80)).any(axis=1)
    short = whole & (stripped > 0) & ascii_
    listed = short & _is_listed(_word_keys(lowered[rows], in_stripped))
    first = lowered[rows, 0]
    initial = short & (stripped == 1) & (first >= ord("a")) & (first <= ord("z"))
    ends = long_ | (whole & (stripped == 0)) | (short & ~listed & ~initial)
    boundary[dots[rows[ends]]] = True
    decided[rows[ends | (short & ~listed & initial)]] = True
    return decided


def _is_listed(keys):
    """Whether each ``_word_keys`` value is one of the listed words' (binary search: ~70 keys)."""
    import numpy as np

    listed = _listed_word_keys()
    found = np.searchsorted(listed, keys).clip(max=len(listed) - 1)
    return listed[found] == keys


@functools.cache
def _listed_word_keys():
    """``_word_keys`` of the listed abbreviations short enough to be probed."""
    import numpy as np

    words = [w for w in sorted(_LISTED_WORDS) if len(w) < _WORD_PROBE]
    backwards = np.zeros((len(words), _WORD_PROBE), dtype=np.int64)
    in_word = np.zeros((len(words), _WORD_PROBE), dtype=bool)
    for row, word in enumerate(words):
        backwards[row, : len(word)] = [ord(c) for c in reversed(word)]
        in_word[row, : len(word)] = True
    return np.sort(_word_keys(backwards, in_word))


def _candidate_arrays(text: str, codes, tables: "_Tables"):
    """``at, after, is_blank, has_cjk, has_bang`` of ``_CANDIDATE``'s matches, in text order (numpy).

    Runs of ending characters are found on the code points (a regex character
    class holding non-Latin-1 characters scans at ~40 ns per char); blank lines
    from the newlines (:func:`_blank_lines`).
    """
    import numpy as np

    # The ending characters: a superset found by comparisons (the ASCII endings, and every
    # code point from the lowest non-ASCII ending on), then the table on those few only (a
    # table look-up of every code point costs about twice as much).
    mask = codes >= _FIRST_NON_ASCII_ENDING
    for code in _ASCII_ENDING_CODES:
        mask |= codes == code
    hits = np.flatnonzero(mask)
    hits = hits[tables.is_ending.take(codes.take(hits))]
    blanks = _blank_lines(text, codes, tables)
    if len(hits):
        firsts = np.concatenate(([0], np.flatnonzero(np.diff(hits) != 1) + 1))
        starts = hits[firsts]
        afters = hits[np.concatenate((firsts[1:] - 1, [len(hits) - 1]))] + 1
        hit_codes = codes.take(hits)
        has_cjk = np.maximum.reduceat(tables.is_cjk_ending.take(hit_codes), firsts)
        has_bang = np.maximum.reduceat(tables.is_bang.take(hit_codes), firsts)
    else:
        starts = afters = np.zeros(0, dtype=np.int64)
        has_cjk = has_bang = np.zeros(0, dtype=bool)
    no_flags = np.zeros(len(blanks), dtype=bool)
    at = np.concatenate((starts, blanks[:, 0]))
    order = np.argsort(at, kind="stable")  # runs and blank lines never overlap (disjoint characters)
    return (
        at[order],
        np.concatenate((afters, blanks[:, 1]))[order],
        np.concatenate((np.zeros(len(starts), dtype=bool), ~no_flags))[order],
        np.concatenate((has_cjk, no_flags))[order],
        np.concatenate((has_bang, no_flags))[order],
    )


def _blank_lines(text: str, codes, tables: "_Tables"):
    """``_BLANK_LINE.finditer(text)``'s spans as an ``(n, 2)`` int64 array, found from the newlines.

    A blank line is two newlines with only other whitespace between. The regex takes
    them left to right without overlap, so of a run of blank lines sharing newlines
    (``"\\n\\n\\n\\n"``) it takes the first, third, ... A regex scan of a text holding
    non-Latin-1 characters costs ~2 ns a character; the newlines are a few percent of it.
    """
    import numpy as np

    newlines = np.flatnonzero(codes == ord("\n"))
    if len(newlines) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    ends = newlines[1:]
    gap_at = newlines[:-1] + 1  # stepped over whitespace up to the next newline (or the first other character)
    stepping = _step_over(gap_at, np.flatnonzero(gap_at < ends), codes, tables.is_space, _MAX_WHITESPACE_STEPS, ends)
    blank = gap_at == ends
    for index in stepping.tolist():  # whitespace longer than the steps took (or just ended)
        rest = text[gap_at[index] : ends[index]]
        blank[index] = not rest or rest.isspace()
    pairs = np.flatnonzero(blank)
    if len(pairs):
        # In a run of consecutive pairs, each after a taken one starts on its last newline.
        run_start = np.concatenate(([True], np.diff(pairs) != 1))
        first_of_run = pairs[run_start][np.cumsum(run_start) - 1]
        pairs = pairs[(pairs - first_of_run) % 2 == 0]
    return np.stack((newlines[pairs], newlines[pairs + 1] + 1), axis=1).astype(np.int64, copy=False)


class _Tables(NamedTuple):
    """Per code point: the character classes the rules test (``str`` methods and sets, precomputed)."""

    is_ending: Any
    is_cjk_ending: Any
    is_bang: Any  # ! or ?
    is_space: Any  # str.isspace, which is also regex \s; no code point above U+3000 is whitespace
    is_closer: Any
    is_opener: Any
    is_lower: Any  # str.islower over the Basic Multilingual Plane (beyond it: _evaluate)


@functools.cache
def _scan_tables() -> _Tables:
    import numpy as np

    def flags(chars: str):
        table = np.zeros(sys.maxunicode + 1, dtype=bool)
        table[[ord(c) for c in chars]] = True
        return table

    is_space = np.zeros(sys.maxunicode + 1, dtype=bool)
    is_space[: _LAST_SPACE + 1] = [chr(i).isspace() for i in range(_LAST_SPACE + 1)]
    return _Tables(
        is_ending=flags("".join(sorted(_ENDING_RUN_CHARACTERS))),
        is_cjk_ending=flags(_CJK_ENDINGS),
        is_bang=flags("!?"),
        is_space=is_space,
        is_closer=flags(_CLOSERS),
        is_opener=flags(_OPENERS),
        is_lower=np.array([chr(i).islower() for i in range(0x10000)], dtype=bool),
    )


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` as strings (with their trailing whitespace)."""
    return [text[s:e] for s, e in sentence_spans(text)]


def _has_cjk_ending(term: str) -> bool:
    return not term.isascii() and any(c in _CJK_ENDINGS for c in term)


def _ends_sentence_here(text: str, term: str, at: int, closers: str, space: str, next_word: str) -> bool:
    """Whether the ending run ``term`` at ``at`` (then ``closers``, ``space``, ``next_word``) ends a sentence."""
    if _has_cjk_ending(term):
        return True
    if not space:
        # "0.95", "file.txt", "?!x": punctuation inside a token.
        return False
    if term.strip(".…"):
        return True  # contains ! or ?
    following = next_word.lstrip(_OPENERS)
    if following[:1].islower():
        return False  # "approx. five", "wait... and then"
    if term != "." or closers:
        return True
    word = _word_before(text, at)
    lowered = word.lower()
    if lowered in _NEVER_FINAL:
        return False
    if lowered in _BEFORE_NUMBER:
        return not following[:1].isdigit()
    if len(word) == 1 and word.isalpha():
        return False  # an initial: "J. Smith"
    if lowered in _RARELY_FINAL or ("." in word and _DOTTED_ACRONYM.match(word)):
        return following.lower() in _SENTENCE_STARTERS
    return True


def _word_before(text: str, at: int) -> str:
    window = text[max(0, at - 40) : at]
    if not window or window[-1].isspace():
        return ""
    return window.rsplit(None, 1)[-1].lstrip(_OPENERS)


def sentence_end_possible(text: str, lo: int, hi: int) -> bool:
    """Whether a span of ``sentence_spans(text[:n])`` (any ``n > hi``; or ``text`` whole) may
    end, its trailing whitespace removed, at some ``k`` in ``[lo, hi]`` with
    ``ends_with_sentence_ending`` true of its text.

    ``False`` is certain. Such a ``k`` follows an ending character at some ``p < k``
    and only closers between, so ``p`` lies before ``hi`` and no earlier than the
    closers just before ``lo``. Either ``text[k]`` is whitespace or ``k ==
    len(text)`` (an ending, its closers, then whitespace or the end: one
    ``_SPACED_ENDING`` match), or the segmenter cut at ``k`` with no whitespace
    before the next character: a blank line is whitespace, and ``_ends_sentence_here``
    cuts without whitespace only after an ending run holding a CJK ending. That
    run ends at ``p`` and starts at or after the start of the run of ending
    characters through ``first - 1`` (the run through ``p`` reaches back to it
    when ``p`` is before ``lo``), so a CJK ending lies in [that start, ``hi``).
    ASCII text has no CJK ending: the first test alone decides.
    ``True`` only means possible. A cheap test (one or two regex searches) that
    lets a caller skip segmenting a window.
    """
    first = lo
    while first > 0 and text[first - 1] in _CLOSERS:
        first -= 1
    # Matches start at an ending character, so none ends before lo; the first ends earliest.
    match = _SPACED_ENDING.search(text, max(first - 1, 0), hi + 1)
    if match is not None and match.end() <= hi:
        return True
    if text.isascii():
        return False
    run_start = max(first - 1, 0)
    while run_start > 0 and text[run_start - 1] in _ENDING_RUN_CHARACTERS:
        run_start -= 1
    return _CJK_ENDING_CHARACTER.search(text, run_start, hi) is not None


def ends_with_sentence_ending(text: str) -> bool:
    """Whether ``text`` (ignoring trailing whitespace and closing quotes) ends a sentence."""
    stripped = text.rstrip().rstrip(_CLOSERS)
    return bool(stripped) and stripped[-1] in SENTENCE_ENDINGS + ("…",)

