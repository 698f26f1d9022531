"""Packs of one-length batches through one forward: the model's own vectors, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import chunking.embedding as embedding
from chunking.packed_forward import matches_model_forward, pack_batches, packable

# Many lengths, few texts of each: the batches are small, as a document's sentences make them.
TEXTS = [
    " ".join(f"word{i}" for i in range(n)) + ("." if n % 2 else " and more, said the river.")
    for n in range(1, 40)
] + ["Galileo saw the moons of Jupiter in 1610.", "ok", "Drain the pasta and toss it with the sauce."] * 3


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def embedder(request):
    if request.param == "bfloat16" and embedding.auto_precision() != "bfloat16":
        # Emulated there (7x float32's time), never chosen by "auto"; its kernels may differ.
        pytest.skip("this CPU has no native bfloat16 (AVX512-BF16 or AMX): auto never picks it here")
    return embedding.SentenceTransformerEmbedder(precision=request.param, workers=2)


def _assert_same_vectors(packed: np.ndarray, own: np.ndarray, precision: str) -> None:
    """bfloat16: bit for bit. float32: within the ~1e-7 by which a float32 vector moves with
    its matrix's row count whatever is done (a text of three word pieces alone, three rows,
    takes another kernel than in a pack); test_embedder holds a batch to the same bound."""
    if precision == "bfloat16":
        assert np.array_equal(packed, own)
    else:
        assert float(np.abs(packed - own).max()) <= 1e-6


def _spy_packs(monkeypatch) -> list[int]:
    """Record how many batches each packed forward ran together."""
    calls: list[int] = []
    real = embedding.packed_forward

    def spy(model, groups):
        calls.append(len(groups))
        return real(model, groups)

    monkeypatch.setattr(embedding, "packed_forward", spy)
    return calls


def test_the_bundled_model_packs_exactly(embedder):
    assert packable(embedder._transformer())
    assert embedder._packs_exactly()


def test_packed_vectors_are_the_models_own_bit_for_bit(embedder, monkeypatch):
    calls = _spy_packs(monkeypatch)
    packed = embedder.embed(TEXTS)
    assert max(calls) > 1  # batches of several lengths went through one forward
    assert sum(calls) == len(embedder.batch_shapes(TEXTS))  # every batch, once
    monkeypatch.setitem(embedder._packed, embedder.precision, False)  # batch by batch, the model's own forward
    calls.clear()
    own = embedder.embed(TEXTS)
    assert calls == []
    _assert_same_vectors(packed, own, embedder.precision)


def test_packed_span_vectors_are_the_models_own_bit_for_bit(embedder, monkeypatch):
    windows = [(text, 0, len(text) // 2) for text in TEXTS] + [(text, len(text) // 3, len(text)) for text in TEXTS]
    calls = _spy_packs(monkeypatch)
    packed = embedder.embed_spans(windows)
    assert max(calls) > 1
    monkeypatch.setitem(embedder._packed, embedder.precision, False)
    _assert_same_vectors(packed, embedder.embed_spans(windows), embedder.precision)


def test_each_worker_gets_a_pack_of_a_small_input(embedder, monkeypatch):
    # Four short texts of two lengths: one pack would leave the second core idle.
    calls = _spy_packs(monkeypatch)
    monkeypatch.setattr(embedder, "max_workers", 2)
    embedder.embed(["one two.", "three four.", "a longer sentence of words.", "another longer one of words."])
    assert len(calls) == 2
    assert embedder.threads_used == 2


def test_the_probe_finds_a_model_whose_rows_depend_on_the_pack():
    # int8: each matrix product scales all its rows together, so packing changes the vectors;
    # the probe must see that (the embedder never packs int8 anyway).
    int8 = embedding.SentenceTransformerEmbedder(precision="int8")
    assert packable(int8._transformer())
    assert not matches_model_forward(int8._transformer())
    assert not int8._packs_exactly()


def test_another_attention_is_not_packed(embedder):
    import copy

    model = copy.deepcopy(embedder._transformer())
    model.config._attn_implementation = "eager"
    assert not packable(model)
    assert not matches_model_forward(model)


@pytest.mark.parametrize(
    ("batch_lengths", "tokens", "expected"),
    [
        # (texts, length) per batch -> packs as lists of batch indexes
        ([(4, 3), (2, 5), (1, 9)], 100, [[0, 1, 2]]),
        ([(4, 3), (2, 5), (1, 9)], 22, [[0, 1], [2]]),  # 12 + 10 fit, + 9 would not
        ([(4, 3), (2, 5), (1, 9)], 19, [[0], [1, 2]]),  # 12 + 10 would not fit; 10 + 9 do
        ([(1, 50), (1, 60), (2, 3)], 40, [[0], [1], [2]]),  # a batch over the budget alone
    ],
)
def test_packs_keep_order_and_the_token_budget(batch_lengths, tokens, expected):
    lengths, batches, at = [], [], 0
    for texts, length in batch_lengths:
        batches.append(np.arange(at, at + texts))
        lengths += [length] * texts
        at += texts
    packs = pack_batches(batches, np.array(lengths), tokens)
    assert [[next(i for i, b in enumerate(batches) if b is rows) for rows in pack] for pack in packs] == expected
    for pack in packs:
        size = sum(len(rows) * lengths[rows[0]] for rows in pack)
        assert size <= tokens or len(pack) == 1
