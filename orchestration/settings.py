"""Project settings: one optional ``chunkyard.toml``, environment overrides on top.

Strategy configs are definition-time settings, not run config: each strategy's
config hash is its chunks asset's code version, so changing a strategy's config
here marks exactly that strategy's chunks (and embeddings) stale in the UI.

    # chunkyard.toml
    docs_root = "examples/docs"
    db_path = "data/chunkyard.duckdb"
    [strategies.recursive]
    chunk_token_size = 800
    [limits]                 # the per-document budget (chunking.limits.DocumentLimits)
    max_chars = 5000000

Environment: CHUNKYARD_CONFIG (the file), CHUNKYARD_DOCS, CHUNKYARD_DB, CHUNKYARD_EXECUTOR.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chunking.embedding import DEFAULT_MODEL
from chunking.limits import DocumentLimits


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    docs_root: str = "examples/docs"
    db_path: str = "data/chunkyard.duckdb"
    sidecar_dir: str | None = None
    tokenizer_encoding: str = "cl100k_base"
    embedding_model: str = DEFAULT_MODEL
    embedding_batch_size: int = Field(64, ge=1)
    embedding_device: str = "cpu"
    embedding_precision: str = "float32"
    embedding_batch_tokens: int | None = Field(2048, ge=1)
    embedding_workers: int | None = Field(None, ge=1)
    # None: every registered strategy.
    enabled_strategies: list[str] | None = None
    strategies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Every document's budget; a document over any limit fails alone, naming the key.
    limits: DocumentLimits = Field(default_factory=DocumentLimits)
    # Search and evaluation (search/, assets/evaluation.py).
    eval_set: str = "eval/examples.jsonl"
    eval_mode: str = Field("vector", pattern="^(vector|keyword|hybrid)$")
    grounding_threshold: float = Field(0.7, ge=-1.0, le=1.0)
    # Strategies whose chunks are embedded with the document title and heading path prepended.
    embed_with_context: list[str] = Field(default_factory=list)
    # How a run executes its steps (orchestration/definitions.py): "in_process" (one process,
    # the default), "multiprocess" (a subprocess per step on this machine), or "celery"
    # (each step is a task on Dagster's celery workers, on any machine; deploy/README.md).
    executor: str = Field("in_process", pattern="^(in_process|multiprocess|celery)$")


def load_settings(path: str | Path | None = None) -> Settings:
    config_path = Path(path or os.environ.get("CHUNKYARD_CONFIG", "chunkyard.toml"))
    values: dict[str, Any] = {}
    if config_path.is_file():
        with open(config_path, "rb") as handle:
            values = tomllib.load(handle)
    if os.environ.get("CHUNKYARD_DOCS"):
        values["docs_root"] = os.environ["CHUNKYARD_DOCS"]
    if os.environ.get("CHUNKYARD_DB"):
        values["db_path"] = os.environ["CHUNKYARD_DB"]
    if os.environ.get("CHUNKYARD_EXECUTOR"):
        values["executor"] = os.environ["CHUNKYARD_EXECUTOR"]
    return Settings.model_validate(values)
