"""One database per Dagster instance and per folder of side outputs, whatever starts the work:
a run (from the UI, a sensor, the schedule), a sensor tick or a schedule tick
(``resources.ownership``; the CLI's own check is in test_runlock.py)."""

from pathlib import Path

import pytest
from dagster import DagsterInstance, SkipReason, build_sensor_context, materialize

from assets.documents import raw_documents
from orchestration.sensors import documents_sensor
from resources.documents import DocumentsFolder
from resources.ownership import INSTANCE_MARKER, OUTPUTS_MARKER, claim_for_store, store_conflict
from resources.store import ChunkStore, SourceRootConflict, StoreResource


@pytest.fixture
def other_database(tmp_path) -> Path:
    """Another database that exists, in a folder of its own."""
    path = tmp_path / "other" / "other.duckdb"
    ChunkStore(path).initialize()
    return path.resolve()


def claimed_by(marker: Path) -> str:
    return marker.read_text(encoding="utf-8").strip()


def test_a_run_claims_a_fresh_instance_and_is_refused_on_another_databases(tmp_path, instance, docs_dir,
                                                                            other_database):
    instance.add_dynamic_partitions("documents", ["alpha.md"])
    db = tmp_path / "db" / "chunkyard.duckdb"
    resources = {"documents": DocumentsFolder(root=str(docs_dir)), "store": StoreResource(path=str(db))}
    assert materialize([raw_documents], resources=resources, instance=instance, partition_key="alpha.md").success
    home = Path(instance.root_directory)
    assert claimed_by(home / INSTANCE_MARKER) == str(db.resolve())
    assert claimed_by(db.parent / OUTPUTS_MARKER) == str(db.resolve())

    # The other database, started on this instance (the UI's `make ui` with another CHUNKYARD_DB):
    # its run stops at its store resource, before any step, and says why.
    refused = {"documents": DocumentsFolder(root=str(docs_dir)), "store": StoreResource(path=str(other_database))}
    result = materialize([raw_documents], resources=refused, instance=instance, partition_key="alpha.md",
                         raise_on_error=False)
    assert not result.success
    failures = [e for e in result.all_events if e.is_failure]
    message = " ".join(str(e.event_specific_data) for e in failures)
    assert f"the Dagster instance {home} (DAGSTER_HOME) keeps the runs and document partitions of {db.resolve()}" in message
    assert not result.get_asset_materialization_events()
    assert ChunkStore(other_database).document("alpha.md") is None, "the refused run wrote nothing"
    assert claimed_by(home / INSTANCE_MARKER) == str(db.resolve())


def test_a_run_into_another_databases_folder_is_refused(tmp_path, instance, docs_dir, other_database):
    # Its own instance, but the other database's folder: its sidecars would share that folder.
    instance.add_dynamic_partitions("documents", ["alpha.md"])
    claim_for_store(DagsterInstance.ephemeral(), StoreResource(path=str(other_database)))
    intruder = other_database.parent / "second.duckdb"
    resources = {"documents": DocumentsFolder(root=str(docs_dir)), "store": StoreResource(path=str(intruder))}
    result = materialize([raw_documents], resources=resources, instance=instance, partition_key="alpha.md",
                         raise_on_error=False)
    assert not result.success
    assert not intruder.exists()
    assert not (Path(instance.root_directory) / INSTANCE_MARKER).exists(), "a refused claim writes no marker"


def test_an_ephemeral_instance_claims_only_the_folders(tmp_path):
    # An in-process instance (materialize() without one) is seen by no other process: no marker in its
    # temporary folder, but the side outputs' folder is claimed as by any run.
    instance = DagsterInstance.ephemeral()
    db = tmp_path / "db" / "chunkyard.duckdb"
    claim_for_store(instance, StoreResource(path=str(db)))
    assert not (Path(instance.root_directory) / INSTANCE_MARKER).exists()
    assert claimed_by(db.parent / OUTPUTS_MARKER) == str(db.resolve())


def lake_store(folder: Path, catalog: str | None = None) -> StoreResource:
    return StoreResource(path=str(folder / "local" / "chunkyard.duckdb"), mode="ducklake",
                         catalog=catalog or f"sqlite:{folder / 'catalog.sqlite'}", data_path=str(folder / "files"))


def test_a_lake_claims_its_instance_and_folders_as_a_database_does(tmp_path, instance, monkeypatch):
    """Lake mode was not checked: two lakes (or a lake and a database file) on one instance deleted and
    ran each other's partitions. A lake is named by its data path, not by how a host reaches its catalog."""
    home = Path(instance.root_directory)
    first = lake_store(tmp_path / "one")
    (tmp_path / "one" / "files").mkdir(parents=True)  # the lake exists
    claim_for_store(instance, first)
    owner = f"ducklake\t{(tmp_path / 'one' / 'files').resolve()}"
    assert claimed_by(home / INSTANCE_MARKER) == owner
    assert claimed_by(tmp_path / "one" / "local" / OUTPUTS_MARKER) == owner
    monkeypatch.chdir(tmp_path)  # the same lake by relative paths: the same owner
    claim_for_store(instance, lake_store(Path("one")))
    # The same lake through another catalog address (another host of a cluster): the same owner.
    elsewhere = lake_store(tmp_path / "one", catalog="postgres:dbname=lake host=db password=hunter2")
    assert store_conflict(instance, elsewhere) is None
    claim_for_store(instance, elsewhere)
    assert "hunter2" not in claimed_by(home / INSTANCE_MARKER)

    for other in (lake_store(tmp_path / "two"), StoreResource(path=str(tmp_path / "db" / "chunkyard.duckdb"))):
        message = store_conflict(instance, other)
        assert message.startswith(f"the Dagster instance {home} (DAGSTER_HOME) keeps the runs and document "
                                  f"partitions of the lake with data at {(tmp_path / 'one' / 'files').resolve()}; "
                                  f"it will not take")
        with pytest.raises(SourceRootConflict):
            claim_for_store(instance, other)
    # In its own instance, a second lake writing its outputs into the first's folder is refused too.
    intruder = StoreResource(**{**lake_store(tmp_path / "two").model_dump(), "path": first.path})
    assert "holds the side outputs" in store_conflict(DagsterInstance.ephemeral(), intruder)
    # Object storage is named by its URL.
    remote = StoreResource(**{**lake_store(tmp_path / "s3").model_dump(), "data_path": "s3://bucket/lake"})
    claim_for_store(DagsterInstance.ephemeral(), remote)
    assert claimed_by(tmp_path / "s3" / "local" / OUTPUTS_MARKER) == "ducklake\ts3://bucket/lake"
    for spelled in ("s3://bucket/lake/", "S3://bucket/lake"):  # the same bucket and prefix
        same = StoreResource(**{**remote.model_dump(), "data_path": spelled})
        assert store_conflict(DagsterInstance.ephemeral(), same) is None

    # Its data folder deleted, the first lake is gone: its claim is taken over.
    (tmp_path / "one" / "files").rmdir()
    claim_for_store(instance, lake_store(tmp_path / "two"))
    assert claimed_by(home / INSTANCE_MARKER) == f"ducklake\t{(tmp_path / 'two' / 'files').resolve()}"


def test_the_sensor_skips_an_instance_another_database_claimed(tmp_path, instance, docs_dir, other_database):
    home = Path(instance.root_directory)
    (home / INSTANCE_MARKER).write_text(f"{other_database}\n", encoding="utf-8")
    db = tmp_path / "db" / "chunkyard.duckdb"
    resources = {"documents": DocumentsFolder(root=str(docs_dir)), "store": StoreResource(path=str(db))}
    result = documents_sensor(build_sensor_context(instance=instance, resources=resources))
    assert isinstance(result, SkipReason)
    assert f"keeps the runs and document partitions of {other_database}" in result.skip_message
    assert instance.get_dynamic_partitions("documents") == []
    assert claimed_by(home / INSTANCE_MARKER) == str(other_database)
    assert not (db.parent / OUTPUTS_MARKER).exists()

    # Its owner deleted, the instance is this database's: the tick claims it and requests runs.
    other_database.unlink()
    result = documents_sensor(build_sensor_context(instance=instance, resources=resources))
    assert {r.partition_key for r in result.run_requests} == {"alpha.md", "sub/beta.txt"}
    assert claimed_by(home / INSTANCE_MARKER) == str(db.resolve())


def test_the_nightly_schedule_skips_an_instance_another_database_claimed(settings, instance, other_database):
    from dagster import build_schedule_context

    from orchestration.definitions import build_project

    project = build_project(settings)
    schedule = project.defs.resolve_schedule_def("nightly_refresh")
    instance.add_dynamic_partitions("documents", ["alpha.md", "sub/beta.txt"])
    home = Path(instance.root_directory)
    with build_schedule_context(
        instance=instance, resources={"store": StoreResource(path=settings.db_path)},
        repository_def=project.defs.get_repository_def(),
    ) as context:
        assert len(schedule.evaluate_tick(context).run_requests) == 2  # unclaimed: both need the whole graph
        (home / INSTANCE_MARKER).write_text(f"{other_database}\n", encoding="utf-8")
        tick = schedule.evaluate_tick(context)
        assert not tick.run_requests
        assert f"keeps the runs and document partitions of {other_database}" in tick.skip_message


def test_a_lakes_claim_on_the_instance_holds_across_hosts(tmp_path, instance):
    """The hosts of a cluster each have their own $DAGSTER_HOME over one Dagster database: a lake's claim
    is also kept in that database (its key-value storage), so another lake is refused from any host."""
    from resources.ownership import INSTANCE_KEY

    home = Path(instance.root_directory)
    first = lake_store(tmp_path / "one")
    (tmp_path / "one" / "files").mkdir(parents=True)
    claim_for_store(instance, first)
    owner = f"ducklake\t{(tmp_path / 'one' / 'files').resolve()}"
    assert instance.run_storage.get_cursor_values({INSTANCE_KEY}) == {INSTANCE_KEY: owner}
    (home / INSTANCE_MARKER).unlink()  # another host: a DAGSTER_HOME of its own, no marker file in it

    second = lake_store(tmp_path / "two")
    message = store_conflict(instance, second)
    assert message.startswith("the Dagster instance's storage, which all its hosts share, keeps the runs and "
                              f"document partitions of the lake with data at {(tmp_path / 'one' / 'files').resolve()}")
    with pytest.raises(SourceRootConflict, match="its own Dagster database"):
        claim_for_store(instance, second)
    assert not (home / INSTANCE_MARKER).exists(), "a refused claim writes no marker"
    claim_for_store(instance, first)  # the lake itself, from any host: fine
    # Gone for good (its data folder deleted): taken over, in the storage too.
    (tmp_path / "one" / "files").rmdir()
    claim_for_store(instance, second)
    assert instance.run_storage.get_cursor_values({INSTANCE_KEY}) == {
        INSTANCE_KEY: f"ducklake\t{(tmp_path / 'two' / 'files').resolve()}"}
