"""Helpers for the search tests: a small store written through ChunkStore, with a deterministic bag-of-words embedder.

The fake embedder makes vector search meaningful without loading a model: texts
that share words have a high cosine similarity.
"""

import hashlib
import re

import numpy as np
from chunking.model import Chunk, ParsedDocument
from resources.store import ChunkStore

MODEL_ID = "bag-of-words-test"
DIM = 64


def bag_of_words(texts):
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
        norm = np.linalg.norm(out[i])
        if norm:
            out[i] /= norm
    return out


def paragraph_chunks(text: str) -> list[Chunk]:
    """One chunk per blank-line paragraph, with exact offsets."""
    return [
        Chunk(text=m.group(0), char_start=m.start(), char_end=m.end(), token_count=len(m.group(0).split()),
              heading_path=["Top"])
        for m in re.finditer(r"\S(?:.*\S)?(?:\n(?!\n).*\S)*", text)
    ]


def sentence_chunks(text: str) -> list[Chunk]:
    return [
        Chunk(text=m.group(0), char_start=m.start(), char_end=m.end(), token_count=len(m.group(0).split()))
        for m in re.finditer(r"[^.\s][^.]*\.", text)
    ]


SPLITTERS = {"para": paragraph_chunks, "sent": sentence_chunks}


def put_document(store: ChunkStore, doc_id: str, text: str) -> None:
    sha = hashlib.sha256(text.encode()).hexdigest()
    doc = ParsedDocument.from_text(text, doc_id=doc_id, sha256=sha)
    store.record_read(doc_id, "/docs", doc_id, sha, len(text))
    store.replace_parsed(doc, "/docs", doc_id, len(text))
    for strategy, split in SPLITTERS.items():
        chunks = split(text)
        store.replace_chunks(doc_id, strategy, chunks, config_hash="test", doc_sha256=sha)
        vectors = bag_of_words([c.text for c in chunks])
        store.replace_embeddings(
            doc_id, strategy, MODEL_ID, [(i, c.text_sha256, v) for i, (c, v) in enumerate(zip(chunks, vectors))], {}
        )


DOCS = {
    "boats.txt": (
        "The harbour fills with boats before dark. Fishermen mend their nets on the quay.\n\n"
        "Wind turns every afternoon on the island. The ferry leaves at noon."
    ),
    "kitchen/bread.md": (
        "Bread needs flour, water, salt and yeast. Knead the dough for ten minutes.\n\n"
        "Bake the loaf in a hot oven until the crust sounds hollow."
    ),
    "kitchen/soup.md": "Soup starts with onions softened in butter. Add stock and simmer.",
}
