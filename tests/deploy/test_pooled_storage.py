"""deploy/dagster.yaml's Dagster storage: dagster-postgres with one pooled connection per process.

dagster-postgres alone opens a PostgreSQL connection per storage call (NullPool). The test
runs the same small partitioned job with per-partition check results (what a chunkyard
range run writes, in miniature) on the instance deploy/dagster.yaml configures and on
plain dagster-postgres storage, each in its own database of one PostgreSQL, and counts
the sessions PostgreSQL opened for each (pg_stat_database.sessions). It also checks that
a run worker's instance (rebuilt from the instance ref) gets the pooled storages too, and
that the runs' events are all there (nothing lost by the pooling).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = [f"doc{i}" for i in range(6)]


def _job():
    from dagster import AssetKey, Definitions, asset, define_asset_job, in_process_executor

    from assets.checks import CheckDef, CheckOutcome, check_specs, emit_partition_results
    from assets.partitions import documents_partitions as docs
    key = AssetKey("pieces")
    checks = (CheckDef("nonempty", "Some rows."), CheckDef("bounded", "Not too many rows."))

    @asset(partitions_def=docs, check_specs=check_specs(key, checks))
    def pieces(context):
        # What a chunkyard step emits for its range: per-partition metadata and check results.
        outcomes = {pk: [CheckOutcome("nonempty", True), CheckOutcome("bounded", True)] for pk in context.partition_keys}
        metadata = {pk: {"rows": len(pk)} for pk in context.partition_keys}
        yield from emit_partition_results(context, key, checks, outcomes, metadata, shared_metadata={"shared": 1})

    defs = Definitions(assets=[pieces], jobs=[define_asset_job("pieces_job", selection=[pieces],
                                                                    executor_def=in_process_executor)])
    return docs, defs.resolve_job_def("pieces_job")


def _sessions(server, database: str) -> int:
    out = server.psql(f"SELECT sessions FROM pg_stat_database WHERE datname = '{database}';")
    return int(next(line.strip() for line in out.splitlines() if line.strip().isdigit()))


def _home(root: Path, name: str, storage_yaml: str) -> Path:
    home = root / name
    home.mkdir()
    (home / "dagster.yaml").write_text(storage_yaml, encoding="utf-8")
    return home


def _run_once(home: Path, url: str, monkeypatch, sessions) -> tuple[object, list, int]:
    """Run the job over every partition on the instance at ``home``: the storage types a run worker's
    instance gets, the run's events, and the sessions (``sessions()``) the run itself opened."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    monkeypatch.setenv("CHUNKYARD_DAGSTER_PG_URL", url)
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        docs, job = _job()
        instance.add_dynamic_partitions(docs.name, PARTITIONS)
        before = sessions()
        result = job.execute_in_process(instance=instance,
                                        tags={"dagster/asset_partition_range_start": PARTITIONS[0],
                                              "dagster/asset_partition_range_end": PARTITIONS[-1]})
        opened = sessions() - before
        assert result.success
        events = instance.all_logs(result.run_id)
        # What a run worker builds: the instance again from its ref.
        with DagsterInstance.from_ref(instance.get_ref()) as worker:
            types = (type(worker.run_storage), type(worker.event_log_storage), type(worker.schedule_storage))
        return types, events, opened


@pytest.mark.e2e
def test_deploy_instance_pools_its_postgres_connections(cluster_root, monkeypatch):
    import pgserver
    from dagster import DagsterEventType
    from dagster_postgres.event_log import PostgresEventLogStorage
    from dagster_postgres.run_storage import PostgresRunStorage
    from dagster_postgres.schedule_storage import PostgresScheduleStorage

    server = pgserver.get_server(cluster_root / "pg", cleanup_mode="stop")
    try:
        for database in ("pooled", "plain"):
            server.psql(f"CREATE DATABASE {database};")
        socket = cluster_root / "pg"
        url = lambda db: f"postgresql+psycopg2://postgres:@/{db}?host={socket}"  # noqa: E731
        deploy_yaml = (REPO_ROOT / "deploy" / "dagster.yaml").read_text(encoding="utf-8")
        # Only the storage matters here; the queued coordinator needs its env var, so keep the default one.
        storage_only = deploy_yaml.split("\n# Runs wait in a queue")[0] + "\n"
        plain_yaml = "storage:\n  postgres:\n    postgres_url:\n      env: CHUNKYARD_DAGSTER_PG_URL\n"

        pooled_types, pooled_events, pooled_sessions = _run_once(
            _home(cluster_root, "pooled_home", storage_only), url("pooled"), monkeypatch, lambda: _sessions(server, "pooled"))
        _, plain_events, plain_sessions = _run_once(
            _home(cluster_root, "plain_home", plain_yaml), url("plain"), monkeypatch, lambda: _sessions(server, "plain"))
    finally:
        server.cleanup()
        shutil.rmtree(cluster_root / "pg", ignore_errors=True)

    assert [t.__name__ for t in pooled_types] == [
        "PooledPostgresRunStorage", "PooledPostgresEventLogStorage", "PooledPostgresScheduleStorage"]
    assert all(issubclass(t, base) for t, base in zip(
        pooled_types, (PostgresRunStorage, PostgresEventLogStorage, PostgresScheduleStorage)))
    # The same events stored either way: a materialization and two check results per partition (and
    # the range's summary results).
    def kinds(events):
        return sorted(e.dagster_event.event_type_value for e in events if e.dagster_event is not None
                      and e.dagster_event.event_type in (DagsterEventType.ASSET_MATERIALIZATION,
                                                         DagsterEventType.ASSET_CHECK_EVALUATION))
    assert kinds(pooled_events) == kinds(plain_events)
    assert kinds(pooled_events).count("ASSET_MATERIALIZATION") == len(PARTITIONS)
    assert kinds(pooled_events).count("ASSET_CHECK_EVALUATION") >= 2 * len(PARTITIONS)
    # dagster-postgres alone: a connection per storage call; pooled: a handful for the whole run.
    assert plain_sessions > 100, plain_sessions
    assert pooled_sessions <= 10, (pooled_sessions, plain_sessions)
