"""The embeddings step reuses the vectors the semantic strategy computed for chunks
that are exactly one of its sentences: the model sees each text once per run."""

import duckdb
import numpy as np

from orchestration.definitions import build_project
from orchestration.settings import Settings
from tests.assets.test_pipeline import metadata_of, register, run_one

# Short sentences on changing topics; a low percentile puts a break after most of them.
TOPICS = """Bring a large pot of salted water to a rolling boil. Drain the pasta and toss it with sauce.
Jupiter is the largest planet in the solar system. Its moons were seen by Galileo in 1610.
The court dismissed the appeal on procedural grounds. The judge ordered costs against the claimant.
Tomatoes ripen faster in a paper bag with a banana. Store basil at room temperature in water.
The probe entered orbit after a seven year journey. Saturn's rings are mostly water ice.
"""


def _settings(tmp_path, embed_context=()):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "topics.txt").write_text(TOPICS, encoding="utf-8")
    return Settings(
        docs_root=str(docs),
        db_path=str(tmp_path / "chunkyard.duckdb"),
        sidecar_dir=str(tmp_path / "parsed"),
        enabled_strategies=["semantic"],
        strategies={"semantic": {"chunk_token_size": 60, "breakpoint_threshold_amount": 30}},
        embed_with_context=list(embed_context),
    )


def _sentences_and_chunks(db_path):
    with duckdb.connect(db_path, read_only=True) as con:
        return con.execute(
            "SELECT text, text_sha256 FROM chunks WHERE strategy = 'semantic' ORDER BY chunk_index"
        ).fetchall()


def test_one_sentence_chunks_are_not_embedded_again(tmp_path, instance):
    settings = _settings(tmp_path)
    project = build_project(settings)
    embedder = project.defs.resources["embedding"].get_embedder()
    register(instance, "topics.txt")
    before = embedder.texts_embedded
    result = run_one(project, instance, "topics.txt")
    assert result.success
    embedded = embedder.texts_embedded - before

    from chunking.strategies.semantic import sentence_units

    text = TOPICS
    sentences = {text[s:e].strip() for s, e in sentence_units(text)}
    chunks = _sentences_and_chunks(settings.db_path)
    single = [t for t, _ in chunks if t in sentences]
    assert 0 < len(single) < len(chunks)  # both kinds present, so the count below means something

    meta = metadata_of(result, "embeddings_semantic")
    assert meta["cache_hits"] == len(single)
    assert meta["new_embeddings"] == len(chunks) - len(single)
    # The model saw every sentence once (chunking) and every multi-sentence chunk once (embedding).
    assert embedded == len(sentences) + len({t for t, _ in chunks} - sentences)

    # Exact reuse: the stored vector of a one-sentence chunk is the vector of its text.
    with duckdb.connect(settings.db_path, read_only=True) as con:
        stored = dict(con.execute(
            "SELECT text_sha256, embedding FROM embeddings WHERE strategy = 'semantic'").fetchall())
    for chunk_text, sha in chunks:
        assert np.abs(np.array(stored[sha]) - embedder.embed([chunk_text])[0]).max() < 1e-5


def test_with_context_embedding_nothing_is_seeded(tmp_path, instance):
    settings = _settings(tmp_path, embed_context=["semantic"])
    project = build_project(settings)
    register(instance, "topics.txt")
    result = run_one(project, instance, "topics.txt")
    assert result.success
    chunks = _sentences_and_chunks(settings.db_path)
    meta = metadata_of(result, "embeddings_semantic")
    assert meta["cache_hits"] == 0 and meta["new_embeddings"] == len(chunks)
    with duckdb.connect(settings.db_path, read_only=True) as con:
        # Only the context-embedded texts are stored: no orphan sentence vectors.
        assert con.execute("SELECT count(*) FROM embedding_vectors").fetchone()[0] == len(chunks)

