"""Fingerprint of every native strategy's output on ../shared/corpus: one sha256 to compare before and after a refactor.

Dumps, for every parseable document and every strategy, each chunk's text, offsets, token
count, pages, heading path, block ids and metadata as sorted-key JSON lines, and prints the
sha256 of the dump. ``semantic`` runs with a deterministic fake embedder (vectors from the
sha256 of each text), so the figure needs no model and is the same on every machine.

    PYTHONPATH=. .venv/bin/python bench/corpus_sha256.py /tmp/chunks.jsonl [strategy,strategy,...] [--size N --overlap M]

Default strategies: the six of the first wave (recursive, sentence, simple, sentence_window,
paragraph, semantic), so a fingerprint stays comparable when a strategy is added.
``--size N --overlap M`` sets ``chunk_token_size`` / ``chunk_overlap_token_size`` (the
common names, mapped per strategy) on every strategy that has a token cap, e.g. the
chunker bench's workload (400, 0); strategies without one run with their defaults.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from chunking import default_tokenizer
from chunking.parsers import is_sidecar_path, parse_document
from chunking.strategies import config_field_names, get_strategy

DEFAULT = ["recursive", "sentence", "simple", "sentence_window", "paragraph", "semantic"]


class HashEmbedder:
    """Unit vectors from the sha256 of each text: deterministic, no model."""

    model_id, dimension = "sha256-fake", 16

    def embed(self, texts):
        rows = [np.frombuffer(hashlib.sha256(t.encode("utf-8")).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
                for t in texts]
        vectors = np.array(rows, dtype=np.float32).reshape(len(texts), self.dimension)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1
        return vectors / norms


def config_for(spec, overrides: dict[str, int], table: dict | None = None):
    """``spec``'s config from ``table`` (its defaults without one) with the common size names in ``overrides`` it accepts."""
    accepted = set(config_field_names(spec))
    return spec.parse_config({**(table or {}), **{k: v for k, v in overrides.items() if k in accepted}})


def main(out_path: str, names: list[str], corpus: Path = Path("../shared/corpus"), overrides: dict | None = None,
         per_strategy: dict[str, dict] | None = None) -> str:
    """``per_strategy``: a config table per name (``chunkyard.toml``'s ``[strategies.NAME]``), under ``overrides``."""
    tokenizer, embedder = default_tokenizer(), HashEmbedder()
    tables = per_strategy or {}
    configs = {name: config_for(get_strategy(name), overrides or {}, tables.get(name)) for name in names}
    with open(out_path, "w", encoding="utf-8") as out:
        for path in sorted(corpus.rglob("*")):
            if not path.is_file() or is_sidecar_path(path) or (path.name == "README.md" and path.parent == corpus):
                continue
            rel = str(path.relative_to(corpus))
            try:
                doc = parse_document(path, rel)
            except Exception as exc:  # hostile files: the failure itself is part of the fingerprint
                out.write(json.dumps({"doc": rel, "error": type(exc).__name__}) + "\n")
                continue
            for name in names:
                spec = get_strategy(name)
                try:
                    chunks = spec.chunk(doc, configs[name], tokenizer, embedder)
                except Exception as exc:
                    out.write(json.dumps({"doc": rel, "strategy": name, "error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
                    continue
                for i, chunk in enumerate(chunks):
                    row = {"doc": rel, "strategy": name, "i": i, **chunk.model_dump(mode="json")}
                    out.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    return hashlib.sha256(Path(out_path).read_bytes()).hexdigest()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_path")
    parser.add_argument("strategies", nargs="?", default=",".join(DEFAULT))
    parser.add_argument("--size", type=int, help="chunk_token_size for every strategy with a token cap")
    parser.add_argument("--overlap", type=int, help="chunk_overlap_token_size likewise")
    parser.add_argument("--config-file", help="each strategy's config from this chunkyard.toml's [strategies.*] "
                        "tables, as the pipeline reads them (then --size/--overlap override)")
    args = parser.parse_args()
    sizes = {"chunk_token_size": args.size, "chunk_overlap_token_size": args.overlap}
    overrides = {k: v for k, v in sizes.items() if v is not None}
    names = args.strategies.split(",")
    per_strategy = None
    if args.config_file:
        from orchestration.settings import load_settings

        per_strategy = load_settings(args.config_file).strategies
    print(main(args.out_path, names, overrides=overrides, per_strategy=per_strategy))
