"""The embedding-model resource: sentence-transformers, local weights only."""

from __future__ import annotations

import os
from functools import lru_cache

from dagster import ConfigurableResource
from pydantic import Field

from chunking.embedding import DEFAULT_MODEL, SentenceTransformerEmbedder, resolve_precision


@lru_cache(maxsize=4)
def _load(
    model: str,
    device: str,
    batch_size: int,
    normalize: bool,
    precision: str,
    batch_tokens: int | None,
    workers: int | None,
) -> SentenceTransformerEmbedder:
    # Loading weights takes seconds: once per process and configuration.
    return SentenceTransformerEmbedder(
        model,
        device=device,
        batch_size=batch_size,
        normalize=normalize,
        precision=precision,
        batch_tokens=batch_tokens,
        workers=workers,
    )


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def parse_threads(value: object) -> str | int:
    """``embedding_threads`` read: ``"auto"`` (any case) or a whole number >= 1 (an int or its digits).

    Raises ValueError naming ``embedding_threads`` and both accepted forms otherwise.
    """
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    digits = isinstance(value, str) and value.strip().isdigit()
    if (isinstance(value, int) and not isinstance(value, bool) or digits) and int(value) >= 1:
        return int(value)
    raise ValueError(f"embedding_threads: expected \"auto\" or a whole number of threads >= 1, got {value!r}")


def resolve_threads(threads: object, cores: int, concurrent_runs: int) -> int:
    """Torch intra-op threads for one run's process: a whole number as given, or for ``auto``
    the run's share of the cores, ``cores // concurrent_runs`` (at least 1), so runs sharing a
    machine do not oversubscribe it (R runs on C cores each taking C threads run R*C threads
    on C cores). Raises ValueError naming ``embedding_threads`` (see :func:`parse_threads`).
    """
    if concurrent_runs < 1:
        raise ValueError(f"concurrent runs must be at least 1, got {concurrent_runs}")
    parsed = parse_threads(threads)
    return max(1, cores // concurrent_runs) if parsed == "auto" else parsed


class EmbeddingModelResource(ConfigurableResource):
    """A sentence-transformers model by name or local path (default: bundled all-MiniLM-L6-v2)."""

    model: str = Field(default=DEFAULT_MODEL, description="Model name or local directory.")
    device: str = Field(default="cpu", description="torch device.")
    batch_size: int = Field(default=64, ge=1, description="Most texts per batch.")
    batch_tokens: int | None = Field(
        default=2048, ge=1, description="Most padded tokens per batch (texts are batched by length)."
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        description="Batches run side by side on this many threads, one torch thread each (None: torch's count).",
    )
    max_workers: int | None = Field(
        default=None,
        ge=1,
        description="Most threads when the batches find the cores shared with other work (None: three "
        "times workers; workers itself when concurrent_runs > 1 or parallel_steps, where our own processes share "
        "the cores by design).",
    )
    parallel_steps: bool = Field(
        default=False,
        description="Steps of one run embed side by side in processes of their own (the multiprocess and "
        "celery executors).",
    )
    threads: str = Field(
        default="auto",
        description="Torch intra-op threads while this process embeds: a whole number, or auto = the cores "
        "divided by concurrent_runs (settings key embedding_threads).",
    )
    concurrent_runs: int = Field(
        default=1, ge=1,
        description="Runs that share this machine's cores at once (lake mode: the instance's "
        "CHUNKYARD_MAX_CONCURRENT_RUNS; the embedded store runs one at a time).",
    )
    normalize: bool = Field(default=True, description="L2-normalise vectors (cosine = dot product).")
    precision: str = Field(
        default="auto",
        description="auto (bfloat16 on CPUs with AVX512-BF16 or AMX, else float32), float32, or bfloat16 "
        "(about 2x faster than float32 with AMX, ~7x slower without native bfloat16; cosine to float32 > 0.999).",
    )

    @property
    def resolved_threads(self) -> int:
        """``threads`` with ``auto`` resolved against this machine's cores and ``concurrent_runs``."""
        return resolve_threads(self.threads, available_cores(), self.concurrent_runs)

    def get_embedder(self) -> SentenceTransformerEmbedder:
        """The model (loaded once per process and configuration), with torch's intra-op thread
        count set to :attr:`resolved_threads` (process-wide: torch has one pool; set on every
        call, so it holds whatever else in the process changed it)."""
        threads = self.resolved_threads
        import torch  # the model's own import; here only after the setting is known to be valid

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        embedder = _load(
            self.model, self.device, self.batch_size, self.normalize, self.resolved_precision, self.batch_tokens,
            self.workers,
        )
        # Not a key of the loaded model: a setting of how it runs, set on every call as the threads are.
        embedder.max_workers = self.resolved_max_workers
        return embedder

    @property
    def resolved_max_workers(self) -> int | None:
        """``max_workers``, or when unset and our own runs or steps share the cores, no more than
        ``workers``: each would find the others' threads on its cores and add its own, 2x
        oversubscribing the machine for no larger share (their threads are all of it)."""
        if self.max_workers is not None or (self.concurrent_runs == 1 and not self.parallel_steps):
            return self.max_workers
        return self.workers or self.resolved_threads

    @property
    def resolved_precision(self) -> str:
        """``precision`` with ``auto`` resolved for this CPU (what the model runs in)."""
        return resolve_precision(self.precision)

    @property
    def model_id(self) -> str:
        # The cache key: normalisation and precision both change the vectors, so
        # ``auto`` keys by what it resolved to (float32 vectors are shared either way).
        precision = self.resolved_precision
        suffix = ("" if self.normalize else ":raw") + ("" if precision == "float32" else f":{precision}")
        return f"{self.model}{suffix}"

    @property
    def embedder_identity(self) -> str:
        """The embedder as configured, the same on every host: the model, ``:raw`` when not normalised,
        and the precision unless ``auto`` (which each CPU resolves its own way: a planner and a worker
        on different CPUs must not find each other's vectors stale). What a stored vector reference
        names (``chunk_embeddings.embed_version``, with the embedded context's suffix)."""
        return (f"{self.model}{'' if self.normalize else ':raw'}"
                + ("" if self.precision == "auto" else f":{self.precision}"))

    @property
    def dimension(self) -> int:
        return self.get_embedder().dimension

    @property
    def max_seq_length(self) -> int:
        """Word pieces the model reads; longer chunks are silently truncated by it."""
        return self.get_embedder().max_seq_length
