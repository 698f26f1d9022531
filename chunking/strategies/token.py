"""``token``: fixed token windows with token overlap (LightRAG's default chunker, F).

The plain baseline every peer ships: the text is encoded once, cut into windows
of ``chunk_token_size`` tokens that start every ``chunk_token_size -
chunk_overlap_token_size`` tokens, and each window is mapped back to the exact
source characters it covers. With ``split_by_character`` the text is first split
on that string; a segment within the cap is one chunk, a longer one is windowed
(or, with ``split_by_character_only``, is an error).

Offsets come from the tokens' UTF-8 byte lengths (tiktoken's rank table; for any
other tokenizer, each token decoded on its own, checked to add up to the text),
never from decoding a window and searching for it. A window boundary that falls
inside a character (byte-level BPE can split a multi-byte character over two
tokens) is moved back to the start of that character, so the character belongs
wholly to the later window and no text is lost or garbled.

Invariants a caller relies on::

    for c in chunk_token(doc, config, tokenizer):
        doc.text[c.char_start:c.char_end] == c.text          # exact, verbatim
        c.token_count == len(tokenizer.encode(c.text)) <= chunk_token_size

(the only exception to the cap: a single character whose own encoding is longer
than ``chunk_token_size`` tokens, possible only with caps of one to three tokens,
is emitted whole rather than lost). Every non-whitespace character is in a chunk,
except the ``split_by_character`` string itself: the text is split on it, as the
reference splits it (``str.split``), so a ``"。"`` separator is in no chunk.

Where we differ from the reference (``chunking.compat.lightrag.
chunking_by_token_size`` reproduces it, ``reference_windows=True``):

* The reference decodes each window, so a window cut inside a character yields
  U+FFFD; here the text is the source slice (compat keeps this fix too).
* The reference reports the window's token count; a chunk here reports the
  count of its own (stripped) text, and a window whose text re-encodes to more
  than the cap (BPE context at a cut) is shortened by a token until it fits (a
  window of one token still over it is cut by characters).
* The reference keeps starting windows every stride up to the last token, so
  its final windows can lie wholly inside the one before (pure duplicates);
  here windowing stops at the window that reaches the end. Windows that hold
  only whitespace are not emitted.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Iterator

from pydantic import Field, model_validator

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec, TokenBudgetConfig
from chunking.tokenizers import SpanCount, Tokenizer, count_tokens, span_counter


class TokenConfig(TokenBudgetConfig):
    """Configuration of the ``token`` strategy (LightRAG's F defaults)."""

    chunk_token_size: int = Field(1200, ge=1, description="Tokens per window; hard cap per chunk.")
    chunk_overlap_token_size: int = Field(100, ge=0, description="Tokens shared by adjacent windows.")
    split_by_character: str | None = Field(
        None, min_length=1, description="Split the text on this string first; over-cap segments are windowed."
    )
    split_by_character_only: bool = Field(
        False, description="With split_by_character: never window; a segment over the cap is an error."
    )

    @model_validator(mode="after")
    def _only_with_a_character(self) -> "TokenConfig":
        if self.split_by_character_only and self.split_by_character is None:
            # Without a character there is nothing to split on, and the flag would be ignored
            # (as LightRAG's chunking_by_token_size ignores it: chunking.compat.lightrag keeps that).
            raise ValueError("split_by_character_only needs split_by_character (the string to split on)")
        return self


class SegmentOverCapError(ValueError):
    """A ``split_by_character_only`` segment has more tokens than the cap."""

    def __init__(self, tokens: int, limit: int, start: int, preview: str) -> None:
        super().__init__(
            f"segment at char {start} has {tokens} tokens > chunk_token_size {limit} "
            f"(split_by_character_only forbids cutting it): {preview!r}"
        )
        self.chunk_tokens, self.chunk_token_limit, self.char_start, self.chunk_preview = tokens, limit, start, preview


@dataclass(frozen=True)
class TokenWindow:
    """One chunk of ``text``: ``text[start:end] == self.text``; ``window_tokens`` is the
    number of tokens of the encoding the window spans (the reference's count)."""

    start: int
    end: int
    text: str
    tokens: int
    window_tokens: int


class TokenOffsets:
    """Exact character offsets of every token boundary of one encoding of ``text``.

    ``char_at(i)`` is the character index where token ``i`` starts (``i == n``: the
    end), moved back to the start of the character when the boundary is inside one.
    With a tokenizer that offers ``encode_text`` (tiktoken), the offsets come from
    its numpy byte offsets, answered per look-up (no Python work per token); any
    other tokenizer's tokens are decoded one by one and checked to add up.
    """

    def __init__(self, text: str, tokenizer: Tokenizer) -> None:
        self.text = text
        encode_text = getattr(tokenizer, "encode_text", None)
        self._encoded = encode_text(text) if encode_text is not None else None
        if self._encoded is not None:
            self._token_ends = self._encoded.token_ends
            return
        tokens = tokenizer.encode(text)
        self._count = len(tokens)
        byte_lengths = _token_byte_lengths(tokenizer, tokens)
        total = sum(byte_lengths)
        expected = len(text.encode("utf-8"))
        if total != expected:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name', type(tokenizer).__name__)!r} does not give exact offsets: "
                f"its tokens add up to {total} UTF-8 bytes, the text has {expected}"
            )
        token_bytes = list(itertools.accumulate(byte_lengths, initial=0))
        if expected == len(text):  # ASCII: bytes are characters
            self._chars = token_bytes
            return
        # Byte offset where each character starts, then the end.
        char_bytes = list(itertools.accumulate(map(_utf8_length, text), initial=0))
        self._chars = [bisect.bisect_right(char_bytes, b) - 1 for b in token_bytes]

    def __len__(self) -> int:
        return len(self._encoded) if self._encoded is not None else self._count

    def char_at(self, token_index: int) -> int:
        if self._encoded is not None:
            return self._encoded.char_at_byte(int(self._token_ends[token_index - 1]) if token_index else 0)
        return self._chars[token_index]


def _utf8_length(ch: str) -> int:
    code = ord(ch)
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _token_byte_lengths(tokenizer: Tokenizer, tokens: list[int]) -> list[int]:
    table = getattr(tokenizer, "token_byte_lengths", None)
    if table is not None:
        lengths = table()
        return [int(lengths[t]) for t in tokens]
    # Any other tokenizer: a token's bytes are those of its own decoding (exact for
    # tokenizers whose tokens are whole characters; checked against the total).
    return [len(tokenizer.decode([t]).encode("utf-8")) for t in tokens]


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without outer whitespace (``str.isspace``, the definition ``str.strip`` uses)."""
    piece = text[start:end]
    stripped = piece.lstrip()
    start += len(piece) - len(stripped)
    return start, start + len(stripped.rstrip())


def token_windows(
    text: str,
    tokenizer: Tokenizer,
    chunk_token_size: int = 1200,
    chunk_overlap_token_size: int = 100,
    *,
    reference_windows: bool = False,
    base: int = 0,
) -> Iterator[TokenWindow]:
    """Windows of ``text`` (offsets shifted by ``base``), stripped, in order.

    ``reference_windows=True`` is LightRAG's loop exactly: a window starts at every
    multiple of the stride, whitespace-only windows are yielded (with empty text)
    and ``tokens`` is the window's token count. Otherwise windowing stops at the
    window that reaches the end, whitespace-only windows are skipped and ``tokens``
    is the exact count of the window's text, shortened to fit the cap.
    """
    if chunk_overlap_token_size < 0:
        raise ValueError(f"chunk_overlap_token_size must be non-negative, got {chunk_overlap_token_size}")
    if chunk_overlap_token_size >= chunk_token_size:
        raise ValueError(
            f"chunk_overlap_token_size ({chunk_overlap_token_size}) must be < chunk_token_size ({chunk_token_size})"
        )
    offsets = TokenOffsets(text, tokenizer)
    # Exact counts of the windows' own text, from the same encoding where the tokenizer allows.
    count = span_counter(tokenizer, text)
    n = len(offsets)
    step = chunk_token_size - chunk_overlap_token_size
    if reference_windows:
        for first in range(0, n, step):
            last = min(first + chunk_token_size, n)
            start, end = _stripped(text, offsets.char_at(first), offsets.char_at(last))
            yield TokenWindow(base + start, base + end, text[start:end], last - first, last - first)
        return
    first = 0
    while first < n:
        last = min(first + chunk_token_size, n)
        start, end = _stripped(text, offsets.char_at(first), offsets.char_at(last))
        tokens = count(start, end)
        while tokens > chunk_token_size and last - first > 1:
            # BPE context at a cut made the slice longer than its window: give back a token.
            last -= 1
            start, end = _stripped(text, offsets.char_at(first), offsets.char_at(last))
            tokens = count(start, end)
        if tokens > chunk_token_size and end - start > 1:
            # One token, over the cap once stripped (" café" is one token, "café" two): no token
            # to give back, so its text is cut by characters; only a single character may pass the cap.
            for piece_start, piece_end, piece_tokens in _within_cap_by_characters(text, start, end, chunk_token_size, count):
                yield TokenWindow(base + piece_start, base + piece_end, text[piece_start:piece_end], piece_tokens, 1)
        elif end > start:
            yield TokenWindow(base + start, base + end, text[start:end], tokens, last - first)
        if last >= n:
            return
        first = max(last - chunk_overlap_token_size, first + 1)


def _within_cap_by_characters(text: str, start: int, end: int, cap: int, count: SpanCount) -> Iterator[tuple[int, int, int]]:
    """``text[start:end]`` (stripped) cut into the longest stripped pieces within ``cap`` tokens, in
    order, as ``(start, end, tokens)``; a single character over the cap is a piece of its own."""
    while start < end:
        stop = start + 1
        while stop < end and count(*_stripped(text, start, stop + 1)) <= cap:
            stop += 1
        piece_start, piece_end = _stripped(text, start, stop)
        if piece_end > piece_start:
            yield piece_start, piece_end, count(piece_start, piece_end)
        start = stop


def split_token_size(
    text: str,
    tokenizer: Tokenizer,
    chunk_token_size: int = 1200,
    chunk_overlap_token_size: int = 100,
    split_by_character: str | None = None,
    split_by_character_only: bool = False,
    *,
    reference_windows: bool = False,
) -> list[TokenWindow]:
    """LightRAG's F on ``text``: windows, or segments of ``split_by_character`` windowed when over the cap.

    Raises :class:`SegmentOverCapError` for an over-cap segment when
    ``split_by_character_only``. ``reference_windows``: see :func:`token_windows`.
    """
    if not split_by_character:
        return list(token_windows(text, tokenizer, chunk_token_size, chunk_overlap_token_size,
                                  reference_windows=reference_windows))
    out: list[TokenWindow] = []
    at = 0
    for segment in text.split(split_by_character):
        tokens = count_tokens(tokenizer, segment)
        if tokens <= chunk_token_size or split_by_character_only:
            if tokens > chunk_token_size:
                raise SegmentOverCapError(tokens, chunk_token_size, at, segment[:120])
            start, end = _stripped(text, at, at + len(segment))
            if end > start or reference_windows:
                exact = tokens if (start, end) == (at, at + len(segment)) else count_tokens(tokenizer, text[start:end])
                out.append(TokenWindow(start, end, text[start:end], tokens if reference_windows else exact, tokens))
        else:
            out.extend(token_windows(segment, tokenizer, chunk_token_size, chunk_overlap_token_size,
                                     reference_windows=reference_windows, base=at))
        at += len(segment) + len(split_by_character)
    return out


def chunk_token(doc: ParsedDocument, config: TokenConfig, tokenizer: Tokenizer, embedder: object = None) -> list[Chunk]:
    """The ``token`` strategy on the document's parsed text."""
    try:
        windows = split_token_size(
            doc.text,
            tokenizer,
            config.chunk_token_size,
            config.chunk_overlap_token_size,
            config.split_by_character,
            config.split_by_character_only,
        )
    except SegmentOverCapError as exc:
        raise ValueError(f"document {doc.doc_id!r}: {exc}") from exc
    chunks = [Chunk.of({"text": w.text, "char_start": w.start, "char_end": w.end, "token_count": w.tokens})
              for w in windows]
    return attach_provenance(doc, chunks)


SPEC = StrategySpec(
    name="token",
    config_model=TokenConfig,
    chunk=chunk_token,
    description="LightRAG F: fixed token windows with token overlap, exact offsets from token byte lengths; optional split by a character first.",
)
