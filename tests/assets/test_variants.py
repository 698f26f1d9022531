"""Named variants (``[variants.<name>]``): one more instance of a registered strategy, under its own name."""

import pytest
from dagster import AssetKey, Definitions

from chunking.strategies import config_hash, get_strategy
from orchestration.definitions import build_project
from orchestration.settings import Settings, load_settings
from search.context import EmbedContext

SW_RETRIEVAL = """
[strategies.sentence_window]
chunk_size = 200
[variants.sw_small]
strategy = "sentence_window"
embed_with_context = true
chunk_size = 100
overlap = 50
min_size = 20
"""


def test_a_variant_from_toml_has_its_own_assets_checks_and_code_version(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text(SW_RETRIEVAL, encoding="utf-8")
    project = build_project(load_settings(config))
    Definitions.validate_loadable(project.defs)
    graph = project.defs.resolve_asset_graph()
    chunks, embeddings = AssetKey("chunks_sw_small"), AssetKey("embeddings_sw_small")
    assert graph.get(chunks).parent_keys == {AssetKey("parsed_documents")}
    assert graph.get(embeddings).parent_keys == {chunks}
    assert {"token_cap", "coverage"} <= {k.name for k in graph.get(chunks).check_keys}
    assert {"embeddings_complete"} <= {k.name for k in graph.get(embeddings).check_keys}
    # Its own config (not the [strategies.sentence_window] table), its own context flag.
    variant_config = get_strategy("sentence_window").parse_config({"chunk_size": 100, "overlap": 50, "min_size": 20})
    assert graph.get(chunks).code_version == project.config_hashes["sw_small"] == config_hash(variant_config)
    assert project.config_hashes["sentence_window"] != project.config_hashes["sw_small"]
    assert graph.get(embeddings).code_version.endswith("+context")
    assert not graph.get(AssetKey("embeddings_sentence_window")).code_version.endswith("+context")
    # Downstream like any strategy: the statistics, the evaluation, and the ingest job.
    for summary in ("strategy_stats", "retrieval_eval"):
        assert embeddings in graph.get(AssetKey(summary)).parent_keys
    assert project.graph_order[-2:] == [chunks, embeddings]


def test_variants_follow_the_enabled_strategies_in_file_order():
    settings = Settings(enabled_strategies=["recursive"], variants={
        "b_second": {"strategy": "paragraph"}, "a_first": {"strategy": "recursive", "chunk_token_size": 50, "chunk_overlap_token_size": 5}})
    assert [i.name for i in settings.strategy_instances()] == ["recursive", "b_second", "a_first"]
    assert [i.spec.name for i in settings.strategy_instances()] == ["recursive", "paragraph", "recursive"]


@pytest.mark.parametrize("variants, message", [
    ({"sw": {"strategy": "sentence_windows"}}, r"variants\.sw\.strategy: unknown strategy 'sentence_windows'"),
    ({"recursive": {"strategy": "recursive"}}, r"variants\.recursive: 'recursive' is a registered strategy's name"),
    ({"token": {"strategy": "recursive"}}, r"variants\.token: 'token' is a registered strategy's name"),
    ({"Big-Name": {"strategy": "recursive"}}, r"variants\.Big-Name: a variant name is lower-case letters"),
    ({"sw": {"strategy": "sentence_window", "chunk_sise": 3}}, r"variants\.sw: .*no config field\(s\) 'chunk_sise'"),
    ({"rec": {"strategy": "recursive", "chunk_token_size": 10, "chunk_overlap_token_size": 10}},
     r"variants\.rec: Value error, chunk_overlap_token_size \(10\) must be smaller"),
    ({"sw": {"strategy": "sentence_window", "chunk_size": "big"}}, r"variants\.sw\.chunk_size: Input should be"),
    ({"rec": {"embed_with_context": True}}, r"variants\.rec\.strategy\s+Field required"),
])
def test_a_bad_variant_fails_naming_its_key(variants, message):
    with pytest.raises(ValueError, match=message):
        Settings(variants=variants)


def test_a_bad_variant_in_the_file_fails_at_load(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text('[variants.x1]\nstrategy = "nope"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"variants\.x1\.strategy: unknown strategy 'nope'; registered: recursive"):
        load_settings(config)


def test_embed_with_context_does_not_take_a_variant():
    settings = Settings(embed_with_context=["sw"], variants={"sw": {"strategy": "sentence_window"}})
    with pytest.raises(ValueError, match=r"not enabled or not registered: \['sw'\].*its own embed_with_context"):
        build_project(settings)


def test_neighbour_context_flows_from_the_toml_to_the_embeddings_assets(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text('embed_with_context = ["paragraph"]\n'
                      'search_skip_covered = 0.5\n'
                      '[embed_neighbours]\nparagraph = 128\nrecursive = 64\n'
                      + SW_RETRIEVAL + "embed_neighbours = 256\n", encoding="utf-8")
    settings = load_settings(config)
    instances = {i.name: i.embed_context for i in settings.strategy_instances()}
    assert instances["sw_small"] == EmbedContext(headings=True, neighbour_tokens=256)
    assert instances["paragraph"] == EmbedContext(headings=True, neighbour_tokens=128)
    assert instances["recursive"] == EmbedContext(headings=False, neighbour_tokens=64)
    assert not instances["sentence_window"]
    project = build_project(settings)
    graph = project.defs.resolve_asset_graph()
    model = graph.get(AssetKey("embeddings_sentence_window")).code_version
    assert graph.get(AssetKey("embeddings_sw_small")).code_version == model + "+context+neighbours256"
    assert graph.get(AssetKey("embeddings_paragraph")).code_version == model + "+context+neighbours128"
    assert graph.get(AssetKey("embeddings_recursive")).code_version == model + "+neighbours64"
    # and the evaluation scores the overlap-aware top k, under its own history label
    assert graph.get(AssetKey("retrieval_eval")).metadata["mode"] == "vector,skip_covered=0.5"


@pytest.mark.parametrize("values, message", [
    ({"variants": {"sw": {"strategy": "sentence_window", "embed_neighbours": -1}}},
     r"variants\.sw\.embed_neighbours\s+Input should be greater than or equal to 0"),
    ({"embed_neighbours": {"paragraph": -5}}, r"embed_neighbours\.paragraph\s+Input should be greater than or equal"),
    ({"search_skip_covered": 0}, r"search_skip_covered\s+Input should be greater than 0"),
    ({"search_skip_covered": 1.5}, r"search_skip_covered\s+Input should be less than or equal to 1"),
])
def test_bad_context_and_skip_settings_fail_naming_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        Settings(**values)


def test_coarse_to_fine_search_flows_from_the_toml_to_the_eval_asset(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text('search_within = "sw_small"\nsearch_within_depth = 12\nsearch_within_rank = "rrf"\n'
                      + SW_RETRIEVAL, encoding="utf-8")
    settings = load_settings(config)
    assert settings.search_options() == {"skip_covered": None, "within": "sw_small", "within_depth": 12,
                                         "within_rank": "rrf"}
    graph = build_project(settings).defs.resolve_asset_graph()
    assert graph.get(AssetKey("retrieval_eval")).metadata["mode"] == "vector,within=sw_small@12/rrf"
    assert Settings().search_options()["within"] is None  # off by default


@pytest.mark.parametrize("values, message", [
    ({"search_within": "nope"}, r"search_within: 'nope' is not an enabled strategy or variant; one of: recursive"),
    ({"search_within": "semantic", "enabled_strategies": ["recursive"]}, r"search_within: 'semantic' is not"),
    ({"search_within": "sentence", "search_within_depth": 0},
     r"search_within_depth\s+Input should be greater than or equal to 1"),
    ({"search_within": "sentence", "search_within_rank": "best"}, r"search_within_rank\s+Input should be 'fine'"),
])
def test_bad_coarse_to_fine_settings_fail_naming_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        Settings(**values)


def test_embed_neighbours_names_only_enabled_strategies():
    settings = Settings(enabled_strategies=["recursive"], embed_neighbours={"paragraph": 64})
    with pytest.raises(ValueError, match=r"not enabled or not registered: \['paragraph'\]"):
        settings.strategy_instances()


def test_late_chunking_flows_from_the_toml_to_the_embeddings_assets(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text('embed_with_context = ["sentence"]\nembed_late_tiled = ["simple"]\n'
                      '[embed_late]\nsentence = 256\nsimple = 128\n[embed_late_blend]\nsentence = 0.5\n'
                      + SW_RETRIEVAL + "embed_late = 192\nembed_late_tiled = true\nembed_late_blend = 0.3\n",
                      encoding="utf-8")
    settings = load_settings(config)
    instances = {i.name: i.embed_context for i in settings.strategy_instances()}
    assert instances["sentence"] == EmbedContext(headings=True, late_tokens=256, late_blend=0.5)
    assert instances["simple"] == EmbedContext(late_tokens=128, late_tiled=True)
    assert instances["sw_small"] == EmbedContext(headings=True, late_tokens=192, late_tiled=True, late_blend=0.3)
    graph = build_project(settings).defs.resolve_asset_graph()
    model = graph.get(AssetKey("embeddings_sentence_window")).code_version
    # Another blend weight is another vector: the code version marks the embeddings stale.
    assert graph.get(AssetKey("embeddings_sentence")).code_version == model + "+context+late256+blend0.5"
    assert graph.get(AssetKey("embeddings_simple")).code_version == model + "+late128tiled"
    assert graph.get(AssetKey("embeddings_sw_small")).code_version == model + "+context+late192tiled+blend0.3"


def test_late_chunking_and_neighbours_on_one_strategy_are_refused_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"embed_late and embed_neighbours both set for \['paragraph'\]"):
        Settings(embed_late={"paragraph": 256}, embed_neighbours={"paragraph": 64})
    with pytest.raises(ValueError, match=r"embed_late_tiled names \['simple'\] without an \[embed_late\] window"):
        Settings(embed_late_tiled=["simple"])
    with pytest.raises(ValueError, match=r"embed_late_blend names \['simple'\] without an \[embed_late\] window"):
        Settings(embed_late_blend={"simple": 0.5})
    with pytest.raises(ValueError, match=r"embed_late_blend for \['simple'\]: a weight in \[0, 1\)"):
        Settings(embed_late={"simple": 256}, embed_late_blend={"simple": 1.5})
    with pytest.raises(ValueError, match=r"variants\.sw_small: .*late_blend needs late_tokens"):
        Settings(variants={"sw_small": {"strategy": "sentence_window", "embed_late_blend": 0.5}})
    with pytest.raises(ValueError, match=r"variants\.sw_small: .*late_tiled needs late_tokens"):
        Settings(variants={"sw_small": {"strategy": "sentence_window", "embed_late_tiled": True}})
    with pytest.raises(ValueError, match=r"variants\.sw_small: embed_late / embed_neighbours.*: late chunking"):
        Settings(variants={"sw_small": {"strategy": "sentence_window", "embed_late": 256, "embed_neighbours": 64}})
    with pytest.raises(ValueError, match=r"not enabled or not registered: \['nope'\]"):
        Settings(embed_late={"nope": 256}).strategy_instances()
    with pytest.raises(ValueError):
        Settings(embed_late={"paragraph": -1})
