"""The nightly plan and the CLI's batching (pure logic; the CLI end to end is in tests/e2e)."""

import pytest
from dagster import AssetKey

from orchestration.cli import build_parser, contiguous_batches, run_batch_size
from orchestration.reconcile import diff_folder
from orchestration.schedules import plan_refresh

ORDER = [AssetKey(k) for k in ("raw_documents", "parsed_documents", "chunks_r", "embeddings_r", "chunks_s", "embeddings_s")]


def test_plan_refresh_missing_and_stale():
    everything = {k: {"a", "b", "c"} for k in ORDER}
    assert plan_refresh(["a", "b", "c"], everything, ORDER, {}) == {}
    missing_embedding = {**everything, AssetKey("embeddings_s"): {"a", "b"}}
    assert plan_refresh(["a", "b", "c"], missing_embedding, ORDER, {}) == {"c": [AssetKey("embeddings_s")]}
    stale = plan_refresh(["a", "b", "c"], everything, ORDER, {"r": {"b"}, "s": set()})
    assert stale == {"b": [AssetKey("chunks_r"), AssetKey("embeddings_r")]}
    # A document never parsed needs the whole graph.
    unparsed = {**everything, AssetKey("parsed_documents"): {"a", "b"}}
    assert plan_refresh(["a", "b", "c"], unparsed, ORDER, {}) == {"c": ORDER}


def test_contiguous_batches_respect_partition_order_and_size():
    keys = ["a", "b", "c", "d", "e", "f", "g"]
    assert contiguous_batches(keys, {"a", "b", "c", "d", "e"}, 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert contiguous_batches(keys, {"a", "c", "d", "g"}, 10) == [["a"], ["c", "d"], ["g"]]
    assert contiguous_batches(keys, set(), 3) == []


def test_diff_folder():
    changes = diff_folder({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "x", "d": "4"})
    assert changes.new == {"c": "3"} and changes.changed == {"b": "2"}
    assert changes.deleted == ["d"] and changes.unchanged == ["a"]
    assert changes.to_process == {"c": "3", "b": "2"}


def test_nightly_schedule_requests_missing_and_stale_documents(settings, instance, docs_dir):
    from dagster import build_schedule_context

    from orchestration.definitions import build_project
    from resources.store import ChunkStore, StoreResource

    project = build_project(settings)
    schedule = project.defs.resolve_schedule_def("nightly_refresh")
    instance.add_dynamic_partitions("documents", ["alpha.md", "sub/beta.txt"])
    job = project.defs.resolve_job_def("ingest_job")
    assert job.execute_in_process(instance=instance, partition_key="alpha.md").success

    # Entered and exited: the context enters an instance of its own, which sets Dagster's
    # current defs-state storage; left open, that storage outlives its instance and every
    # later definitions load in this process fails ("undefined DagsterInstance weakref").
    with build_schedule_context(
        instance=instance, resources={"store": StoreResource(path=settings.db_path)},
        repository_def=project.defs.get_repository_def(),
    ) as context:
        requests = list(schedule.evaluate_tick(context).run_requests)
        # beta was never materialized: it needs the whole graph; alpha is complete and fresh.
        assert [r.partition_key for r in requests] == ["sub/beta.txt"]
        assert list(requests[0].asset_selection) == project.graph_order

        # alpha's chunks go stale when its stored content hash moves on.
        with ChunkStore(settings.db_path).transaction() as con:
            con.execute("UPDATE documents SET sha256 = 'changed' WHERE doc_id = 'alpha.md'")
        requests = list(schedule.evaluate_tick(context).run_requests)
        stale = next(r for r in requests if r.partition_key == "alpha.md")
        assert {k.to_user_string() for k in stale.asset_selection} == {
            f"{kind}_{s}" for s in project.config_hashes for kind in ("chunks", "embeddings")
        }


def test_plan_refresh_leaves_documents_in_flight_to_their_run():
    nothing = {k: set() for k in ORDER}
    assert plan_refresh(["a", "b"], nothing, ORDER, {}, in_flight={"a"}) == {"b": ORDER}
    assert plan_refresh(["a", "b"], nothing, ORDER, {}, in_flight={"a", "b"}) == {}


def test_schedule_cron_setting_reaches_the_schedule_and_is_validated(settings, monkeypatch, tmp_path):
    import pytest

    from orchestration.definitions import build_project
    from orchestration.schedules import NIGHTLY_CRON
    from orchestration.settings import SettingsError, load_settings

    def nightly_cron(project_settings) -> str:
        return build_project(project_settings).defs.resolve_schedule_def("nightly_refresh").cron_schedule

    assert settings.schedule_cron == NIGHTLY_CRON == "0 2 * * *"  # unchanged for who sets nothing
    assert nightly_cron(settings) == NIGHTLY_CRON

    config = tmp_path / "chunkyard.toml"
    config.write_text('schedule_cron = "30 3 * * 1"\n', encoding="utf-8")
    assert load_settings(config).schedule_cron == "30 3 * * 1"
    monkeypatch.setenv("CHUNKYARD_SCHEDULE_CRON", "* * * * *")  # the environment wins over the file
    every_minute = load_settings(config)
    assert every_minute.schedule_cron == "* * * * *"
    assert nightly_cron(settings.model_copy(update={"schedule_cron": "* * * * *"})) == "* * * * *"

    for bad in ("61 * * * *", "every night", "* * * *"):
        monkeypatch.setenv("CHUNKYARD_SCHEDULE_CRON", bad)
        # One line naming the key and the variable that set it (SettingsError, a ValueError).
        with pytest.raises(SettingsError, match=r"^[^\n]*chunkyard.toml: schedule_cron \(CHUNKYARD_SCHEDULE_CRON\): "
                                                r"'[^']*' is not a cron string[^\n]*$"):
            load_settings(config)


def test_schedule_skips_a_document_a_running_run_already_targets(settings, instance, docs_dir):
    """A cron tick while an earlier tick's run is still running must not request the document again."""
    from dagster import DagsterRunStatus, build_schedule_context
    from dagster._core.storage.tags import PARTITION_NAME_TAG
    from dagster._core.test_utils import create_run_for_test

    from orchestration.definitions import build_project
    from resources.store import StoreResource

    project = build_project(settings)
    schedule = project.defs.resolve_schedule_def("nightly_refresh")
    instance.add_dynamic_partitions("documents", ["alpha.md", "sub/beta.txt"])
    with build_schedule_context(  # exited: see the test above
        instance=instance, resources={"store": StoreResource(path=settings.db_path)},
        repository_def=project.defs.get_repository_def(),
    ) as context:
        assert sorted(r.partition_key for r in schedule.evaluate_tick(context).run_requests) == ["alpha.md", "sub/beta.txt"]

        running = create_run_for_test(instance, job_name="ingest_job", status=DagsterRunStatus.STARTED,
                                      tags={PARTITION_NAME_TAG: "alpha.md"})
        assert [r.partition_key for r in schedule.evaluate_tick(context).run_requests] == ["sub/beta.txt"]

        instance.report_run_failed(running)  # finished (and alpha still missing): planned again
        assert sorted(r.partition_key for r in schedule.evaluate_tick(context).run_requests) == ["alpha.md", "sub/beta.txt"]


def test_run_batch_follows_the_backfill_range_size_unless_given(monkeypatch):
    parse = build_parser().parse_args
    monkeypatch.delenv("CHUNKYARD_DOCUMENTS_PER_RUN", raising=False)
    assert run_batch_size(parse(["run"]).batch) == 25
    monkeypatch.setenv("CHUNKYARD_DOCUMENTS_PER_RUN", "2")
    assert run_batch_size(parse(["run"]).batch) == 2
    assert run_batch_size(parse(["run", "--batch", "7"]).batch) == 7
    monkeypatch.setenv("CHUNKYARD_DOCUMENTS_PER_RUN", "none")
    with pytest.raises(ValueError, match="CHUNKYARD_DOCUMENTS_PER_RUN='none'"):
        run_batch_size(parse(["run"]).batch)
    for bad in ("0", "-3", "x"):
        with pytest.raises(SystemExit):
            parse(["run", "--batch", bad])


def test_a_named_configuration_file_must_exist(tmp_path, monkeypatch, capsys):
    # A typo in CHUNKYARD_CONFIG silently ran everything under the library defaults (and re-chunked
    # and re-embedded the whole folder): now an error naming the file, before anything runs.
    import pytest

    from orchestration.cli import main
    from orchestration.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="no configuration file at .*rec100.tom$"):
        load_settings(tmp_path / "rec100.tom")
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(tmp_path / "rec100.tom"))
    with pytest.raises(SettingsError, match="^CHUNKYARD_CONFIG: no configuration file at"):
        load_settings()
    assert main(["status"]) == 2
    assert capsys.readouterr().err.strip() == (f"chunkyard status: CHUNKYARD_CONFIG: no configuration file at "
                                               f"{tmp_path / 'rec100.tom'}")


def test_an_unknown_device_or_encoding_is_refused_when_the_settings_are_read(tmp_path):
    # Both loaded, then failed every chunk and embedding step (the device blamed on the network).
    import pytest

    from orchestration.settings import SettingsError, load_settings

    config = tmp_path / "c.toml"
    config.write_text('embedding_device = "gpu"\ntokenizer_encoding = "nope"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match=r"tokenizer_encoding: 'nope' is not a tiktoken encoding; known: "
                                            r".*cl100k_base.*; embedding_device: 'gpu' is not a device"):
        load_settings(config)
    config.write_text('embedding_device = "cuda:1"\ntokenizer_encoding = "o200k_base"\n', encoding="utf-8")
    settings = load_settings(config)
    assert (settings.embedding_device, settings.tokenizer_encoding) == ("cuda:1", "o200k_base")


def test_enabled_strategies_must_be_registered_and_named_once(tmp_path):
    import pytest

    from orchestration.settings import SettingsError, load_settings

    config = tmp_path / "c.toml"
    for listed, message in (('["token", "token"]', r"\['token'\] named more than once"),
                            ('["token", "nope"]', r"\['nope'\] not registered; one of: .*recursive")):
        config.write_text(f"enabled_strategies = {listed}\n", encoding="utf-8")
        with pytest.raises(SettingsError, match=f"enabled_strategies: {message}"):
            load_settings(config)


def test_embedding_max_workers_below_the_workers_is_refused():
    import pytest

    from orchestration.settings import Settings

    with pytest.raises(ValueError, match=r"embedding_max_workers \(2\) is below embedding_workers \(4\)"):
        Settings(embedding_workers=4, embedding_max_workers=2)
    assert Settings(embedding_workers=2, embedding_max_workers=4).embedding_max_workers == 4
