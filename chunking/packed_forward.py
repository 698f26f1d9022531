"""BERT's forward over several one-length batches at once, bit-for-bit the model's own.

The embedder's sorted path batches texts of one length each, so nothing is padded and a
text's vector does not depend on its batch. But texts spread over many lengths: the 1,684
sentences of the semantic bench make 141 such batches with a median of 279 word pieces,
and the chunks of the embeddings step (one to three per length) smaller ones still. A
matrix product over a few hundred rows costs more per row than one over 2,048 (~10-60%
here). Every part of a BERT layer but attention works on each word piece alone, so the
word pieces of several batches go through it as one matrix (a *pack*), and attention,
which mixes the word pieces of one text, runs on each batch alone, with the arguments the
model's own SDPA attention gets.

Exact, and checked rather than assumed: :func:`exact_pack_rows` runs a probe through both
forwards and the embedder packs only batches whose vectors agree bit for bit (a matrix
product of very few rows can take another kernel: in float32 here, batches under 4 word
pieces, which then stay out of packs; another attention implementation or a model of another
shape fails it, and the embedder then runs batch by batch as before). The pooler, which mean
pooling never reads, is not run.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def packable(model) -> bool:
    """Whether ``model`` has the layout :func:`packed_forward` reproduces: a Hugging Face
    ``BertModel`` encoder (absolute positions, SDPA attention, no decoder or cross-attention,
    no chunked feed-forward)."""
    try:
        from transformers import BertModel
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        return False
    if not isinstance(model, BertModel):
        return False
    config = model.config
    return (
        getattr(config, "_attn_implementation", None) == "sdpa"
        and not config.is_decoder
        and not getattr(config, "add_cross_attention", False)
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and not getattr(config, "chunk_size_feed_forward", 0)
        and not model.training
    )


def packed_forward(model, groups: Sequence) -> "torch.Tensor":  # noqa: F821 - torch is imported lazily
    """Last hidden states of ``groups`` (int64 tensors of word-piece ids, ``[texts, length]``
    each, no padding) as one ``[sum of texts * length, hidden]`` tensor, group after group,
    each text's word pieces in order. The steps are ``BertModel.forward``'s, in its order,
    so that every rounding is the same."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    embeddings = model.embeddings
    parts = []
    for ids in groups:
        texts, length = ids.shape
        positions = embeddings.position_ids[:, :length]
        token_types = embeddings.token_type_ids[:, :length].expand(texts, length)  # zeros, as the model's buffer
        vectors = embeddings.word_embeddings(ids) + embeddings.token_type_embeddings(token_types)
        vectors = vectors + embeddings.position_embeddings(positions)
        parts.append(vectors.reshape(texts * length, -1))
    hidden = embeddings.LayerNorm(torch.cat(parts) if len(parts) > 1 else parts[0])
    for layer in model.encoder.layer:
        attention = layer.attention.self
        heads, size = attention.num_attention_heads, attention.attention_head_size
        query, key, value = attention.query(hidden), attention.key(hidden), attention.value(hidden)
        mixed = torch.empty_like(query)
        at = 0
        for ids in groups:
            texts, length = ids.shape
            rows = slice(at, at + texts * length)
            # [texts, heads, length, size] with the strides the model's own view has.
            q, k, v = (x[rows].view(texts, length, heads, size).transpose(1, 2) for x in (query, key, value))
            # The model's SDPA call for a batch without padding: no mask, not causal.
            out = scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=attention.scaling,
                                               is_causal=False)
            mixed[rows] = out.transpose(1, 2).reshape(texts * length, -1)
            at += texts * length
        attended = layer.attention.output(mixed, hidden)
        hidden = layer.output(layer.intermediate(attended), attended)
    return hidden


# The probe: one text of each length up to _PROBE_SMALLEST word pieces (a matrix product of
# so few rows may take another kernel, whose rounding differs: float32 here, below 4 rows),
# then batches of several texts (a pack of ~700 word pieces: a third of the budget, for a
# probe that costs little at load).
_PROBE_SMALLEST = 16
_PROBE_BATCHES = ((2, 5), (3, 9), (4, 128))


def exact_pack_rows(model) -> int | None:
    """The fewest word pieces a batch must have for :func:`packed_forward` to give it exactly
    the model's own last hidden states inside a pack (``None``: never, or not a BERT).

    Found by a probe: a pack of one text of each length from 1 to 16 word pieces and of larger
    batches (~700 word pieces in all) through both forwards (~0.6 s of CPU in float32 here). Batches of fewer word pieces
    than the answer stay out of packs (each is a pack of its own: the model's own shapes); a
    mismatch of a larger batch means packing is never exact here.
    """
    import torch

    if not packable(model):
        return None
    vocab = model.config.vocab_size
    shapes = [(1, length) for length in range(1, _PROBE_SMALLEST + 1)] + list(_PROBE_BATCHES)
    # Word pieces spread over the vocabulary, not random: the probe is the same every time.
    groups = [
        (torch.arange(n * length, dtype=torch.int64).reshape(n, length) * 7919 + 1000 * (k + 1)) % vocab
        for k, (n, length) in enumerate(shapes)
    ]
    inexact = []
    with torch.inference_mode():
        packed = packed_forward(model, groups)
        at = 0
        for ids in groups:
            own = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            if not torch.equal(own.reshape(-1, own.shape[-1]), packed[at : at + ids.numel()]):
                inexact.append(ids.numel())
            at += ids.numel()
    if not inexact:
        return 1
    if max(inexact) >= _PROBE_SMALLEST:
        return None
    return max(inexact) + 1


def pack_batches(
    batches: Sequence[np.ndarray], lengths: np.ndarray, tokens: int, smallest: int = 1
) -> list[list[np.ndarray]]:
    """Consecutive ``batches`` (arrays of text indices, each of one length in ``lengths``)
    joined into packs of at most ``tokens`` word pieces; a batch alone over it, or of fewer
    than ``smallest`` word pieces (:func:`exact_pack_rows`), is a pack of its own."""
    packs: list[list[np.ndarray]] = []
    pack: list[np.ndarray] = []
    held = 0
    for rows in batches:
        size = len(rows) * int(lengths[rows[0]])
        if size < smallest:
            if pack:
                packs.append(pack)
                pack, held = [], 0
            packs.append([rows])
            continue
        if pack and held + size > tokens:
            packs.append(pack)
            pack, held = [], 0
        pack.append(rows)
        held += size
    if pack:
        packs.append(pack)
    return packs
