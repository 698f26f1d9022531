"""The embedder's fast path: length-sorted batches under two limits, run by parallel workers.

Each speed option must give the vectors the model's own forward gives, in input order.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from chunking.embedding import _token_budget_batches, run_on_shared_cores, thread_waiting_clock

TEXTS = [
    "Bring a large pot of salted water to a rolling boil.",
    "Jupiter is the largest planet in the solar system.",
    "ok",
    "A much longer sentence about rivers, tides and the moon " * 12,
    "Galileo discovered the four largest moons with an early telescope in 1610.",
    "x",
    "Drain the pasta, toss it with the tomato sauce and grate parmesan on top.",
] * 9  # 63 texts: several batches of mixed widths


@pytest.mark.parametrize(
    ("lengths", "batch_size", "batch_tokens"),
    [
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 4, None),
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 100, 20),
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 2, 1000),
        ([50, 60], 10, 10),  # each text alone exceeds the budget: one text per batch
        ([4] * 10, 3, 8),
    ],
)
def test_batches_cover_every_text_once_within_both_limits(lengths, batch_size, batch_tokens):
    lengths = np.array(lengths)
    order = np.argsort(lengths, kind="stable")
    batches = list(_token_budget_batches(order, lengths, batch_size, batch_tokens))
    assert np.array_equal(np.concatenate(batches), order)
    for rows in batches:
        assert 1 <= len(rows) <= batch_size
        assert len(set(lengths[rows].tolist())) == 1  # one length: nothing padded
        if batch_tokens is not None and len(rows) > 1:
            assert len(rows) * lengths[rows].max() <= batch_tokens


def test_token_budget_binds_before_the_text_count():
    lengths = np.array([10] * 8)
    batches = list(_token_budget_batches(np.arange(8), lengths, 64, 30))
    assert [len(b) for b in batches] == [3, 3, 2]


@pytest.fixture(scope="module")
def embedder():
    from chunking.embedding import SentenceTransformerEmbedder

    # float32 whatever the CPU: these tests hold our sorted path to SentenceTransformer.encode,
    # which agree to 1e-5 only in float32 (on an AVX512-BF16 or AMX CPU "auto" is bfloat16, where
    # encode runs autocast over the float32 weights and the sorted path a bfloat16 copy of them).
    return SentenceTransformerEmbedder(batch_size=8, precision="float32")


def _embed(embedder, **settings):
    return _embed_texts(embedder, TEXTS, **settings)


def _embed_texts(embedder, texts, **settings):
    saved = {name: getattr(embedder, name) for name in settings}
    for name, value in settings.items():
        setattr(embedder, name, value)
    try:
        return embedder.embed(texts)
    finally:
        for name, value in saved.items():
            setattr(embedder, name, value)


@pytest.mark.model
def test_sorted_batches_equal_sentence_transformers_encode(embedder):
    reference = embedder._model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    for settings in (dict(workers=1), dict(workers=2), dict(batch_tokens=None), dict(batch_tokens=40)):
        assert np.abs(_embed(embedder, **settings) - reference).max() < 1e-5, settings


@pytest.mark.model
def test_workers_keep_input_order_and_restore_torch_threads(embedder):
    import torch

    threads = torch.get_num_threads()
    one = _embed(embedder, workers=1)
    assert embedder.threads_used == 1
    several = _embed(embedder, workers=3)
    assert 1 <= embedder.threads_used <= 9  # three workers, and up to six more on shared cores
    assert torch.get_num_threads() == threads
    assert np.abs(one - several).max() < 1e-5
    # Identical texts land in different batches and workers; they must get identical vectors.
    assert np.abs(several[0] - several[7]).max() < 1e-5
    assert np.abs(several[3] - several[3 + 7 * 8]).max() < 1e-5


@pytest.mark.model
def test_concurrent_embeds_from_two_threads_get_their_own_vectors(embedder):
    expected = _embed(embedder, workers=1)
    results: dict[int, np.ndarray] = {}
    errors: dict[int, BaseException] = {}

    def embed_reversed(key: int) -> None:
        try:
            results[key] = embedder.embed(TEXTS[::-1])
        except BaseException as exc:  # a thread's exception would otherwise only warn
            errors[key] = exc

    threads = [threading.Thread(target=embed_reversed, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results) == [0, 1]
    for vectors in results.values():
        assert np.abs(vectors[::-1] - expected).max() < 1e-5


def _threads_running(items, run=None, **options):
    """The items ``run_on_shared_cores`` ran, in the order they started, and the threads that ran them."""
    started: list[int] = []
    threads: set[int] = set()
    lock = threading.Lock()

    def record(item: int) -> None:
        with lock:
            started.append(item)
            threads.add(threading.get_ident())
        if run is not None:
            run(item)

    ran = run_on_shared_cores(record, items, **options)
    assert ran == len(threads)
    return started, threads


def _always_waiting() -> tuple[float, float]:
    """A thread that waited for a core all the time (a clock for run_on_shared_cores)."""
    now = time.perf_counter()
    return now, now


def _never_waiting() -> tuple[float, float]:
    return time.perf_counter(), 0.0


def test_workers_found_waiting_for_cores_are_joined_by_extra_threads():
    # Once 0.05 s of batches have been measured as all waiting, the two extra threads join.
    started, threads = _threads_running(
        list(range(48)), lambda _: time.sleep(0.02), workers=2, most=4, measured=0.05, clock=_always_waiting
    )
    assert sorted(started) == list(range(48))
    assert len(threads) == 4


def test_workers_that_hold_their_cores_run_alone():
    # As on quiet cores: no worker waits, so the extra threads never take a batch.
    started, threads = _threads_running(
        list(range(48)), lambda _: time.sleep(0.02), workers=2, most=4, measured=0.05, clock=_never_waiting
    )
    assert sorted(started) == list(range(48))
    assert len(threads) == 2


def test_the_waiting_clock_does_not_count_a_sleep_as_waiting_for_a_core():
    from chunking import embedding

    wall, waited = thread_waiting_clock()
    time.sleep(0.2)
    wall_after, waited_after = thread_waiting_clock()
    assert wall_after - wall >= 0.2
    assert 0 <= waited_after - waited <= wall_after - wall + 0.01
    if embedding._SCHEDSTAT is not None:
        # run_delay counts time runnable without a core, and a sleeping thread is not runnable
        # (the stand-in, wall - CPU time, would count the whole sleep).
        assert waited_after - waited < 0.1


def test_one_worker_takes_the_items_in_order():
    started, _ = _threads_running(list(range(10)), workers=1, most=1)
    assert started == list(range(10))


def test_the_first_error_stops_the_queue_and_is_raised():
    started: list[int] = []
    other_holds_five = threading.Event()

    def fail_at_four(item: int) -> None:
        started.append(item)
        if item == 4:
            # Fails once the other worker holds item 5, which lasts long enough for the
            # failure to be recorded: that worker finishes it and takes no other.
            other_holds_five.wait(5)
            raise ValueError("over the time budget")
        if item == 5:
            other_holds_five.set()
            time.sleep(0.2)

    with pytest.raises(ValueError, match="time budget"):
        run_on_shared_cores(fail_at_four, list(range(40)), 2, 2)
    assert sorted(started) == list(range(6))


def test_ctrl_c_while_workers_run_stops_them_and_is_raised():
    import os
    import signal

    started: list[int] = []

    def interrupt_at_three(item: int) -> None:
        started.append(item)
        if item == 3:
            os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread, waiting on the workers
        time.sleep(0.01)

    # Before the fix the extra threads, still waiting to be needed, kept the pool from shutting down.
    with pytest.raises(KeyboardInterrupt):
        run_on_shared_cores(interrupt_at_three, list(range(400)), 2, 4, clock=_never_waiting)
    assert len(started) < 400


def test_max_workers_is_checked_and_runs_sharing_cores_add_no_threads():
    from resources.embedding import EmbeddingModelResource

    assert EmbeddingModelResource().resolved_max_workers is None  # the embedder's default: three times workers
    shared = EmbeddingModelResource(threads="4", concurrent_runs=2)
    assert shared.resolved_max_workers == 4  # torch's threads = the workers
    assert EmbeddingModelResource(workers=3, concurrent_runs=2).resolved_max_workers == 3
    assert EmbeddingModelResource(max_workers=6, concurrent_runs=2).resolved_max_workers == 6
    assert EmbeddingModelResource(workers=2, parallel_steps=True).resolved_max_workers == 2


def test_the_multiprocess_executor_starts_no_extra_embedding_threads():
    from orchestration.definitions import build_project
    from orchestration.settings import Settings

    def resource(**values):
        return build_project(Settings(**values)).defs.resources["embedding"]

    assert resource().resolved_max_workers is None
    assert resource(executor="multiprocess", embedding_workers=2).resolved_max_workers == 2
    assert resource(executor="multiprocess", embedding_max_workers=5).resolved_max_workers == 5


# --- precision chosen by the CPU, and one forward per distinct text -------------------


def test_auto_precision_is_bfloat16_only_where_the_cpu_has_native_bfloat16(tmp_path):
    from chunking.embedding import auto_precision, cpu_flags

    assert auto_precision(frozenset({"sse4_2", "avx2", "fma"})) == "float32"
    assert auto_precision(frozenset({"avx2", "avx512f"})) == "float32"  # AVX-512 without BF16 emulates it
    assert auto_precision(frozenset({"avx512f", "avx512_bf16"})) == "bfloat16"
    assert auto_precision(frozenset({"amx_tile", "amx_bf16"})) == "bfloat16"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 amx_tile\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_bf16", "amx_tile"}
    assert cpu_flags(str(tmp_path / "absent")) == frozenset()  # not Linux: float32


def test_the_resource_keys_its_cache_by_the_resolved_precision(monkeypatch):
    import resources.embedding as resource_module
    from resources.embedding import EmbeddingModelResource

    monkeypatch.setattr(resource_module, "resolve_precision", lambda p: "bfloat16" if p == "auto" else p)
    assert EmbeddingModelResource().model_id == "all-MiniLM-L6-v2:bfloat16"
    assert EmbeddingModelResource(precision="float32").model_id == "all-MiniLM-L6-v2"
    monkeypatch.setattr(resource_module, "resolve_precision", lambda p: "float32" if p == "auto" else p)
    assert EmbeddingModelResource().model_id == "all-MiniLM-L6-v2"


def test_distinct_texts_keep_their_rows():
    from chunking.embedding import _distinct

    distinct, rows = _distinct(["a", "b", "a", "c", "b"])
    assert distinct == ["a", "b", "c"]
    assert rows.tolist() == [0, 1, 0, 2, 1]


@pytest.mark.model
@pytest.mark.parametrize("length_sorted", [True, False])
def test_a_repeated_text_goes_through_the_model_once(embedder, length_sorted):
    before = embedder.texts_embedded
    vectors = _embed(embedder, length_sorted=length_sorted)  # 63 texts, 7 distinct
    assert embedder.texts_embedded - before == len(set(TEXTS)) == 7
    reference = embedder._model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    assert vectors.shape == reference.shape
    assert np.abs(vectors - reference).max() < 1e-5


@pytest.mark.model
def test_int8_quantizes_the_linear_layers_and_stays_close_to_float32(embedder):
    import torch

    full = _embed(embedder, precision="float32")
    int8 = _embed(embedder, precision="int8")
    quantized = embedder._transformers["int8"]
    assert not any(type(m) is torch.nn.Linear for m in quantized.modules())  # every Linear replaced
    assert any(type(m) is torch.nn.Linear for m in embedder._mean_pooled.modules())  # the float32 model untouched
    cosine = (full * int8).sum(1)
    assert not np.allclose(full, int8, atol=1e-4)
    assert cosine.min() > 0.85 and np.median(cosine) > 0.95
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_batch_shapes_are_the_batches_embed_runs(embedder):
    """The bench's floor counts the model's arithmetic from these shapes: every distinct
    text once, its word pieces as the model reads them (truncated at max_seq_length),
    each batch of texts of one length and within both limits."""
    texts = TEXTS + ["word " * 400]  # truncated by the model to max_seq_length
    distinct = list(dict.fromkeys(texts))
    pieces = [min(embedder.count_model_tokens(t), embedder.max_seq_length) for t in distinct]
    shapes = embedder.batch_shapes(texts)
    assert sum(n for n, _, _ in shapes) == len(distinct) == 8
    assert sum(p for _, _, p in shapes) == sum(pieces)
    assert max(width for _, width, _ in shapes) == embedder.max_seq_length
    for n, width, real in shapes:
        assert n <= embedder.batch_size
        assert real == n * width  # one length per batch: no padding computed
        assert n == 1 or n * width <= embedder.batch_tokens
    before = embedder.texts_embedded
    embedder.embed(texts)
    assert embedder.texts_embedded - before == sum(n for n, _, _ in shapes)


class _SteppedClock:
    """A clock for chunking.limits that reads 0 until ``expire()``, then far past any budget."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def expire(self) -> None:
        self.now = 1e9


@pytest.mark.model
@pytest.mark.parametrize(("settings", "expected_batches"),
                         [(dict(workers=1), 1), (dict(workers=2), None), (dict(length_sorted=False), 0)])
def test_a_document_over_its_time_budget_stops_between_model_batches(embedder, monkeypatch, settings, expected_batches):
    import chunking.embedding as embedding
    import chunking.limits as limits
    from chunking.packed_forward import packed_forward

    clock = _SteppedClock()
    monkeypatch.setattr(limits, "_clock", clock)
    transformer = embedder._transformer()
    batches_run = []

    def forward_then_expire(*args, **kwargs):  # the first batch uses up the budget
        batches_run.append(1)
        clock.expire()
        return transformer(*args, **kwargs)

    def packed_forward_then_expire(model, groups):  # the same for a pack of batches
        batches_run.append(1)
        clock.expire()
        return packed_forward(transformer, groups)

    monkeypatch.setattr(embedder, "_transformer", lambda: forward_then_expire)
    monkeypatch.setattr(embedding, "packed_forward", packed_forward_then_expire)
    texts = [f"{text} ({i})" for i, text in enumerate(TEXTS)]  # distinct: 8 batches of 8
    with limits.time_budget("slow.txt", "embed_timeout_s", "recursive embedding time", 5):
        if settings.get("length_sorted") is False:
            clock.expire()  # the model's own loop: checked between slices of batches, so before the first
        with pytest.raises(limits.LimitExceeded, match=r"slow.txt: recursive embedding time is over the limit of "
                                                       r"5 s \(raise limits.embed_timeout_s"):
            _embed_texts(embedder, texts, **settings)
    # Worker threads see the budget too (a thread pool does not carry the caller's context).
    if expected_batches is not None:
        assert len(batches_run) == expected_batches
    else:
        assert 1 <= len(batches_run) <= 2  # each of the two workers may have begun one batch
    # Outside a budget nothing is refused, whatever the clock says.
    assert _embed_texts(embedder, texts, **settings).shape == (len(texts), embedder.dimension)


@pytest.mark.model
@pytest.mark.parametrize(("precision", "tolerance"), [("float32", 1e-6), ("bfloat16", 0.0)])
def test_a_text_gets_the_same_vector_whatever_shares_its_batch(embedder, precision, tolerance):
    """The vector stored for a chunk must not depend on the run that computed it (one document
    or many, the chunk step or the embeddings step). Padded to a longer neighbour's width, a
    text's bfloat16 vector (the default on AVX512-BF16 CPUs) moved by up to ~2e-3; batches of
    one length make it bit for bit the vector it gets alone. float32 moves by ~1e-7 with the
    batch's row count whatever is done, which no use of a vector can see."""
    from chunking.embedding import auto_precision

    if precision == "bfloat16" and auto_precision() != "bfloat16":
        # Emulated there (7x float32's time), never chosen by "auto"; its kernels may differ.
        pytest.skip("this CPU has no native bfloat16 (AVX512-BF16 or AMX): auto never picks it here")
    texts = [" ".join(["Chunk overlap is cheap insurance"] + ["against facts that straddle a boundary"] * (i % 7)
                      + [f"number {i}."]) for i in range(40)]
    saved = embedder.precision
    embedder.precision = precision
    try:
        together = embedder.embed(texts)
        alone = np.stack([embedder.embed([text])[0] for text in texts])
    finally:
        embedder.precision = saved
    assert float(np.abs(together - alone).max()) <= tolerance
