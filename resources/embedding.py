"""The embedding-model resource: sentence-transformers, local weights only."""

from __future__ import annotations

from functools import lru_cache

from dagster import ConfigurableResource
from pydantic import Field

from chunking.embedding import DEFAULT_MODEL, SentenceTransformerEmbedder


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
    normalize: bool = Field(default=True, description="L2-normalise vectors (cosine = dot product).")
    precision: str = Field(
        default="float32",
        description="float32, or bfloat16 (about 2x faster on CPUs with AMX; cosine to float32 > 0.999).",
    )

    def get_embedder(self) -> SentenceTransformerEmbedder:
        return _load(
            self.model, self.device, self.batch_size, self.normalize, self.precision, self.batch_tokens, self.workers
        )

    @property
    def model_id(self) -> str:
        # The cache key: normalisation and precision both change the vectors.
        suffix = ("" if self.normalize else ":raw") + ("" if self.precision == "float32" else f":{self.precision}")
        return f"{self.model}{suffix}"

    @property
    def dimension(self) -> int:
        return self.get_embedder().dimension

    @property
    def max_seq_length(self) -> int:
        """Word pieces the model reads; longer chunks are silently truncated by it."""
        return self.get_embedder().max_seq_length
