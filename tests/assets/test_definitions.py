"""Every Definitions object loads, and carries what the design promises."""

from dagster import AssetKey, Definitions

from chunking.strategies import all_strategies, config_hash, get_strategy
from orchestration.definitions import build_project, defs
from orchestration.settings import Settings, load_settings


def test_module_definitions_load():
    Definitions.validate_loadable(defs)
    assert defs.resolve_job_def("ingest_job") is not None
    assert {s.name for s in defs.sensors} == {"documents_sensor", "automation_sensor"}
    assert {s.name for s in defs.schedules} == {"nightly_refresh"}


def test_every_registered_strategy_has_its_two_assets_and_checks():
    project = build_project(Settings())
    graph = project.defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    for spec in all_strategies():
        chunks, embeddings = AssetKey(f"chunks_{spec.name}"), AssetKey(f"embeddings_{spec.name}")
        assert chunks in keys and embeddings in keys
        assert graph.get(chunks).parent_keys == {AssetKey("parsed_documents")}
        assert graph.get(embeddings).parent_keys == {chunks}
        check_names = {k.name for k in graph.get(chunks).check_keys}
        assert {"token_cap", "no_empty_chunks", "coverage"} <= check_names
        assert graph.get(chunks).code_version == config_hash(spec.default_config())
    assert AssetKey("raw_documents") in keys and AssetKey("parsed_documents") in keys


def test_strategy_config_change_changes_only_its_code_version():
    base = build_project(Settings()).defs.resolve_asset_graph()
    tuned = build_project(Settings(strategies={"recursive": {"chunk_token_size": 300}})).defs.resolve_asset_graph()
    changed = {
        k for k in base.get_all_asset_keys() if base.get(k).code_version != tuned.get(k).code_version
    }
    assert changed == {AssetKey("chunks_recursive")}


def test_settings_from_toml_and_environment(tmp_path, monkeypatch):
    config = tmp_path / "chunkyard.toml"
    config.write_text('docs_root = "x"\n[strategies.recursive]\nchunk_token_size = 321\n', encoding="utf-8")
    monkeypatch.setenv("CHUNKYARD_DB", str(tmp_path / "db.duckdb"))
    monkeypatch.delenv("CHUNKYARD_DOCS", raising=False)
    settings = load_settings(config)
    assert settings.docs_root == "x" and settings.db_path == str(tmp_path / "db.duckdb")
    project = build_project(settings)
    assert project.config_hashes["recursive"] == config_hash(
        get_strategy("recursive").parse_config({"chunk_token_size": 321})
    )


def test_unknown_strategy_settings_are_rejected():
    import pytest

    with pytest.raises(ValueError, match="not enabled or not registered"):
        build_project(Settings(strategies={"nope": {}}))


def test_every_document_asset_is_partitioned_batched_and_in_the_duckdb_pool():
    for asset in defs.assets:
        assert asset.op.pool == "duckdb", asset.key  # DuckDB allows one writing process
        # Store-wide summaries, not per document: the statistics and the retrieval evaluation.
        if asset.key in (AssetKey("strategy_stats"), AssetKey("retrieval_eval")):
            assert asset.partitions_def is None
            continue
        assert asset.partitions_def.name == "documents"
        assert asset.backfill_policy.max_partitions_per_run == 25


def test_strategy_stats_follows_every_strategys_embeddings():
    graph = defs.resolve_asset_graph()
    assert graph.get(AssetKey("strategy_stats")).parent_keys == {
        AssetKey(f"embeddings_{spec.name}") for spec in all_strategies()
    }
