"""Packs of one-length batches through one forward: the model's own vectors, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import chunking.embedding as embedding
from chunking.packed_forward import exact_pack_rows, pack_batches, packable

# Many lengths, few texts of each: the batches are small, as a document's sentences make them;
# and one text of three word pieces ([CLS] x [SEP]) alone in its batch, too small to pack in float32.
TEXTS = [
    " ".join(f"word{i}" for i in range(n)) + ("." if n % 2 else " and more, said the river.")
    for n in range(1, 40)
] + ["Galileo saw the moons of Jupiter in 1610.", "ok", "Drain the pasta and toss it with the sauce."] * 3 + ["x"]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def embedder(request):
    if request.param == "bfloat16" and embedding.auto_precision() != "bfloat16":
        # Emulated there (7x float32's time), never chosen by "auto"; its kernels may differ.
        pytest.skip("this CPU has no native bfloat16 (AVX512-BF16 or AMX): auto never picks it here")
    return embedding.SentenceTransformerEmbedder(precision=request.param, workers=2, max_workers=2)


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
    smallest = embedder._exact_pack_rows()
    assert smallest is not None and 1 <= smallest <= 16


def test_packed_vectors_are_the_models_own_bit_for_bit(embedder, monkeypatch):
    calls = _spy_packs(monkeypatch)
    packed = embedder.embed(TEXTS)
    assert max(calls) > 1  # batches of several lengths went through one forward
    assert sum(calls) == len(embedder.batch_shapes(TEXTS))  # every batch, once
    monkeypatch.setattr(embedder, "packed", False)  # batch by batch, the model's own forward
    calls.clear()
    own = embedder.embed(TEXTS)
    assert calls == []
    assert np.array_equal(packed, own)


def test_packed_span_vectors_are_the_models_own_bit_for_bit(embedder, monkeypatch):
    windows = [(text, 0, len(text) // 2) for text in TEXTS] + [(text, len(text) // 3, len(text)) for text in TEXTS]
    calls = _spy_packs(monkeypatch)
    packed = embedder.embed_spans(windows)
    assert max(calls) > 1
    monkeypatch.setattr(embedder, "packed", False)
    assert np.array_equal(packed, embedder.embed_spans(windows))


def test_a_batch_too_small_to_pack_exactly_stays_alone(embedder, monkeypatch):
    # As if the probe had found batches under 40 word pieces inexact: those run as packs of one.
    monkeypatch.setitem(embedder._packed, embedder.precision, 40)
    calls = _spy_packs(monkeypatch)
    vectors = embedder.embed(TEXTS)
    shapes = embedder.batch_shapes(TEXTS)
    assert calls.count(1) >= sum(1 for _, _, pieces in shapes if pieces < 40)
    monkeypatch.setattr(embedder, "packed", False)
    assert np.array_equal(vectors, embedder.embed(TEXTS))


def test_each_worker_gets_a_pack_of_a_small_input(embedder, monkeypatch):
    # Four short texts of two lengths: one pack would leave the second core idle.
    calls = _spy_packs(monkeypatch)
    embedder.embed(["one two.", "three four.", "a longer sentence of words.", "another longer one of words."])
    assert calls == [1, 1]


def test_the_probe_finds_a_model_whose_rows_depend_on_the_pack():
    # int8: each matrix product scales all its rows together, so packing changes the vectors;
    # the probe must see that (the embedder never packs int8 anyway).
    int8 = embedding.SentenceTransformerEmbedder(precision="int8")
    assert packable(int8._transformer())
    assert exact_pack_rows(int8._transformer()) is None
    assert int8._exact_pack_rows() is None


def test_another_attention_is_not_packed(embedder):
    import copy

    model = copy.deepcopy(embedder._transformer())
    model.config._attn_implementation = "eager"
    assert not packable(model)


@pytest.mark.parametrize(
    ("batch_lengths", "tokens", "expected"),
    [
        # (texts, length) per batch -> packs as lists of batch indexes
        ([(4, 3), (2, 5), (1, 9)], 100, [[0, 1, 2]]),
        ([(4, 3), (2, 5), (1, 9)], 22, [[0, 1], [2]]),  # 12 + 10 fit, + 9 would not
        ([(4, 3), (2, 5), (1, 9)], 19, [[0], [1, 2]]),  # 12 + 10 would not fit; 10 + 9 do
        ([(1, 50), (1, 60), (2, 3)], 40, [[0], [1], [2]]),  # a batch over the budget alone
        ([(4, 3), (1, 3), (2, 5)], 100, [[0], [1], [2]]),  # 3 word pieces, under 4: alone
        ([(4, 3), (2, 5), (1, 3), (2, 4)], 100, [[0, 1], [2], [3]]),
    ],
)
def test_packs_keep_order_and_the_token_budget(batch_lengths, tokens, expected):
    lengths, batches, at = [], [], 0
    for texts, length in batch_lengths:
        batches.append(np.arange(at, at + texts))
        lengths += [length] * texts
        at += texts
    packs = pack_batches(batches, np.array(lengths), tokens, smallest=4)
    assert [[next(i for i, b in enumerate(batches) if b is rows) for rows in pack] for pack in packs] == expected
    for pack in packs:
        size = sum(len(rows) * lengths[rows[0]] for rows in pack)
        assert size <= tokens or len(pack) == 1
