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
megabytes and its mistakes are predictable. (Long texts are scanned for candidate
endings with numpy, which finds the same candidates several times faster than a
regex character class holding non-Latin-1 characters.)
"""

from __future__ import annotations

import functools
import re
import sys

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
# then matched in place.
_CANDIDATE = re.compile("[.!?…" + _CJK_ENDINGS + "]+|\n[^\\S\n]*\n")
_BLANK_LINE = re.compile("\n[^\\S\n]*\n")
# From this length on, candidates are located with numpy: Python's regex scans a
# character class holding non-Latin-1 characters at ~40 ns per char.
_VECTOR_SCAN_CHARS = 4096
# After an ending run: closers, whitespace, then the next word (as far as the rules look).
_TAIL = re.compile("([" + re.escape(_CLOSERS) + "]*)(\\s*)(\\S{0,40})")
_WHITESPACE = re.compile(r"\s*")

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
_DOTTED_ACRONYM = re.compile(r"^(?:[^\W\d_]\.)+[^\W\d_]$")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Contiguous ``(start, end)`` sentence spans that concatenate back to ``text``."""
    if not isinstance(text, str):
        raise TypeError(f"sentence_spans expects str, got {type(text).__name__}")
    if not text:
        return []
    size = len(text)
    cuts: list[int] = []
    for at, after in _candidates(text):
        term = text[at:after]
        if term[0] == "\n":  # a blank line
            end = _WHITESPACE.match(text, after).end()
            is_boundary = True
        else:
            if after < size and not text[after].isspace() and text[after] not in _CLOSERS and not _has_cjk_ending(term):
                continue  # "0.95", "os.path": punctuation inside a token
            tail = _TAIL.match(text, after)
            end = tail.end(2)
            closers, space, next_word = tail.groups()
            is_boundary = _ends_sentence_here(text, term, at, closers, space, next_word)
        if end >= size:
            break
        if is_boundary and (not cuts or end > cuts[-1]):
            cuts.append(end)
    bounds = [0, *cuts, len(text)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _candidates(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every match of ``_CANDIDATE`` in ``text``, in order.

    Long texts are scanned with numpy (the same maximal runs of ending characters,
    plus the blank lines), and runs that the caller would skip at once -- no CJK
    ending and followed by an ASCII character that is neither whitespace nor a
    closer, as in "0.95" -- are left out here.
    """
    if len(text) < _VECTOR_SCAN_CHARS:
        return [m.span() for m in _CANDIDATE.finditer(text)]
    import numpy as np

    is_ending, is_cjk_ending, ascii_inside_token = _scan_tables()
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    hits = np.flatnonzero(is_ending[codes])
    runs: list[tuple[int, int]] = []
    if len(hits):
        gaps = np.flatnonzero(np.diff(hits) != 1) + 1
        starts = hits[np.concatenate(([0], gaps))]
        ends = hits[np.concatenate((gaps - 1, [len(hits) - 1]))] + 1
        has_cjk = np.maximum.reduceat(is_cjk_ending[codes[hits]], np.concatenate(([0], gaps)))
        following = codes[np.minimum(ends, len(codes) - 1)]
        inside_token = (ends < len(codes)) & (following < 128) & ascii_inside_token[np.minimum(following, 127)]
        keep = ~inside_token | has_cjk
        runs = list(zip(starts[keep].tolist(), ends[keep].tolist()))
    blanks = [m.span() for m in _BLANK_LINE.finditer(text)]
    return sorted(runs + blanks) if blanks else runs


@functools.cache
def _scan_tables():
    """Per code point: is an ending, is a CJK ending; per ASCII char: continues a token."""
    import numpy as np

    is_ending = np.zeros(sys.maxunicode + 1, dtype=bool)
    is_ending[[ord(c) for c in ".!?…" + _CJK_ENDINGS]] = True
    is_cjk_ending = np.zeros(sys.maxunicode + 1, dtype=bool)
    is_cjk_ending[[ord(c) for c in _CJK_ENDINGS]] = True
    inside_token = np.array([not chr(i).isspace() and chr(i) not in _CLOSERS for i in range(128)], dtype=bool)
    return is_ending, is_cjk_ending, inside_token


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


def ends_with_sentence_ending(text: str) -> bool:
    """Whether ``text`` (ignoring trailing whitespace and closing quotes) ends a sentence."""
    stripped = text.rstrip().rstrip(_CLOSERS)
    return bool(stripped) and stripped[-1] in SENTENCE_ENDINGS + ("…",)

