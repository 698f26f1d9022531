"""A change of embedder (model, precision, embedded context) re-embeds the current chunks, and only
their embeddings: every stored vector reference names the embedder that made it (schema 6).

Before, `run`, the schedule and the sensor planned from the chunks' configuration and Dagster's
record of materialized partitions alone, so `embedding_precision = "int8"` or `embed_with_context`
changed nothing until `--force` (and vector search then found no vectors of the new model).
"""

import duckdb
from dagster import AssetKey

from orchestration.definitions import INGEST_JOB, build_project
from orchestration.schedules import chunk_refresh, plan_from_refresh
from resources.store import ChunkStore
from tests.assets.test_time_budgets import DOCS, run


def plan(settings, instance):
    project = build_project(settings)
    store = ChunkStore(settings.db_path)
    partitions = instance.get_dynamic_partitions("documents")
    materialized = {key: set(instance.get_materialized_partitions(key)) for key in project.graph_order}
    return plan_from_refresh(partitions, materialized, project.graph_order,
                             chunk_refresh(store, project.config_hashes, None, project.embed_versions))


def versions(settings):
    with duckdb.connect(settings.db_path, read_only=True) as con:
        return set(con.execute("SELECT DISTINCT doc_id, embed_version FROM chunk_embeddings "
                               "WHERE strategy = 'recursive'").fetchall())


def test_a_changed_embedder_reembeds_only_the_embeddings_then_nothing(settings, instance, docs_dir):
    (docs_dir / "slow.txt").write_text("Plain text of a third document, short and calm.", encoding="utf-8")
    settings = settings.model_copy(update={"enabled_strategies": ["recursive", "token"]})
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    before = build_project(settings).embed_versions
    assert versions(settings) == {(d, before["recursive"]) for d in DOCS}
    assert plan(settings, instance) == {}, "nothing changed: nothing to do"

    # Embedded with the title and heading path from now on: recursive's vectors only.
    context = settings.model_copy(update={"embed_with_context": ["recursive"]})
    after = build_project(context).embed_versions
    assert after["recursive"] != before["recursive"] and after["token"] == before["token"]
    planned = plan(context, instance)
    assert set(planned) == set(DOCS)
    assert all([k.to_user_string() for k in keys] == ["embeddings_recursive"] for keys in planned.values())

    job = build_project(context).defs.resolve_job_def(INGEST_JOB)
    for doc_id in DOCS:
        assert job.execute_in_process(instance=instance, partition_key=doc_id, asset_selection=planned[doc_id]).success
    assert versions(context) == {(d, after["recursive"]) for d in DOCS}
    assert plan(context, instance) == {}
    # Back to the plain text: embedded again (from the vectors' cache), then settled again.
    assert set(plan(settings, instance)) == set(DOCS)


def test_a_schema_5_file_takes_its_vectors_as_of_their_model(tmp_path):
    from resources import schema

    store = ChunkStore(tmp_path / "c.duckdb")
    store.initialize()
    store.record_read("a.txt", "/root", "a.txt", "sha", 3)
    with duckdb.connect(str(store.path)) as con:  # as schema 5 left it: no embed_version
        con.execute("INSERT INTO chunk_embeddings (doc_id, strategy, chunk_index, model_id, text_sha256) "
                    "VALUES ('a.txt', 'recursive', 0, 'm:float32', 'h0')")
        con.execute("ALTER TABLE chunk_embeddings DROP COLUMN embed_version")
        con.execute("UPDATE schema_info SET value = '5' WHERE key = 'schema_version'")
    assert store.stored_embed_versions() is None  # read-only callers: nothing to compare with
    store.initialize()  # the first write migrates
    with duckdb.connect(str(store.path), read_only=True) as con:
        assert con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall() == [
            (str(schema.SCHEMA_VERSION),)]
    assert store.stored_embed_versions() == {"recursive": {"a.txt": {"m:float32"}}}


def test_a_changed_tokenizer_encoding_plans_every_document_chunked_again(settings, instance, docs_dir):
    """The encoding cuts and counts the chunks, so it is part of their version: before, the stored
    chunks (cut and counted with cl100k_base) stayed current after `tokenizer_encoding = "o200k_base"`."""
    from chunking.strategies import config_hash

    settings = settings.model_copy(update={"enabled_strategies": ["recursive", "token"]})
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    assert plan(settings, instance) == {}
    default = build_project(settings).config_hashes
    # The default encoding adds nothing: the hashes of stores made before it was part of them still match.
    configs = {i.name: i.config for i in settings.strategy_instances()}
    assert default == {name: config_hash(config) for name, config in configs.items()}

    other = settings.model_copy(update={"tokenizer_encoding": "o200k_base"})
    project = build_project(other)
    assert all(project.config_hashes[s] == f"{default[s]}:o200k_base" for s in ("recursive", "token"))
    graph = project.defs.resolve_asset_graph()
    assert {s: graph.get(AssetKey(f"chunks_{s}")).code_version for s in ("recursive", "token")} == project.config_hashes
    planned = plan(other, instance)
    assert set(planned) == {"alpha.md", "sub/beta.txt"}
    assert all(sorted(k.to_user_string() for k in keys) == [
        "chunks_recursive", "chunks_token", "embeddings_recursive", "embeddings_token"] for keys in planned.values())
