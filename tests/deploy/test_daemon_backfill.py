"""deploy/ with its daemon, webserver and two celery workers: backfill, sensor, automation, schedule.

One purposeful, slow test. deploy/local_cluster.py starts PostgreSQL (Dagster's instance on
deploy/dagster.yaml, the DuckLake catalog, the celery broker), an S3-compatible server for the
lake's data files (moto, ``--s3``), two celery workers,
``dagster-webserver`` and ``dagster-daemon`` on deploy/workspace.yaml, as deploy/README.md
tells a user (``local_cluster.py --workers 2 --daemon --webserver PORT --s3``); as root (CI), each
worker on a host of its own (``--hosts``, deploy/hosts.py: a network namespace reaching
PostgreSQL and the object store by name over TCP), the daemon, the webserver and the runs
they launch on this machine, the server host. Through the
webserver's GraphQL (the calls the UI makes) the test stops the documents sensor and the
schedule, adds the six documents' partitions and launches a partition backfill of every
document asset; the daemon does the rest. Range size 2 (CHUNKYARD_DOCUMENTS_PER_RUN) and a
queue of 2 (CHUNKYARD_MAX_CONCURRENT_RUNS): three range runs, so the queue must hold one
back. Every run uses the celery executor (CHUNKYARD_EXECUTOR=celery): the daemon launches
the run, the run sends each step to the workers. The schedule's cron is every minute
(CHUNKYARD_SCHEDULE_CRON) instead of 02:00.

From the instance (PostgreSQL), the event log and the lake it proves that

* the backfill made three runs, each over its own range of two documents (disjoint, covering
  all six), each materializing only its own documents, every asset of every document once;
* every step of every run executed on a celery worker (the "Celery worker" of its engine
  event), and the backfill's steps on both workers;
* at most CHUNKYARD_MAX_CONCURRENT_RUNS runs were running at any moment, and at least two
  overlapped (RUN_START to RUN_SUCCESS events);
* every run succeeded and the lake holds every document's chunks once per strategy;
* declarative automation requested nothing for documents the backfill had in hand;
* then, with the documents sensor started again, one file edited and another only touched,
  the sensor (ticked by the daemon) requests one run for the edited document only,
  raw_documents, and declarative automation (the daemon's automation sensor) brings that
  document's parse, chunks and embeddings up to date: the lake holds its new text for every
  strategy, the other documents' chunks are unchanged;
* then, with two strategies' chunks of one document marked as made from older bytes (their
  doc_sha256, what the schedule's staleness reads) and the schedule started, the daemon's
  scheduler ticks at a minute boundary and its tick launches exactly the one run the plan
  asks for (that document, those strategies' chunks and embeddings), which succeeds; no
  other tick launches anything (ticks during the run leave the document to it), a tick after
  it is skipped, and the lake holds that document's chunks re-made from its current bytes
  (same texts), everything else unchanged;
* with hosts, the workers are ``chunkyard-w1@worker-1`` and ``chunkyard-w2@worker-2`` and each
  connected from its own address to Dagster's storage, the broker and the lake's catalog
  (PostgreSQL's connection log);
* nothing the cluster started outlives it (webserver, daemon, their code servers and runs,
  the workers, PostgreSQL, the hosts' namespaces).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_checks import (
    assert_every_document_once,
    celery_steps,
    cluster_instance,
    assert_workers_connected_from_their_hosts,
    lake_store,
    read_lake,
    still_running,
    workers_on_hosts,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "docs"
DOCS_PER_RUN = 2
MAX_CONCURRENT_RUNS = 2
EDITED = "field-guide.txt"
TOUCHED = "getting-started.md"
MARKER = "Quokkalighthouse"  # a word no example document contains
STALE = "copies/getting-started.md"  # whose chunks of two strategies the test marks stale for the schedule
SCHEDULE_CRON = "* * * * *"  # CHUNKYARD_SCHEDULE_CRON: a tick every minute instead of 02:00
WORKERS = 2
# Failure bounds only (the machine may be loaded); the test is done when the work is.
BACKFILL_TIMEOUT_S = 1200
FOLLOW_UP_TIMEOUT_S = 900
SCHEDULE_TIMEOUT_S = 900

REPOSITORY = {"repositoryName": "__repository__", "repositoryLocationName": "chunkyard"}
ERROR = "__typename ... on Error { message }"
SENSOR = f"""query ($selector: SensorSelector!) {{ sensorOrError(sensorSelector: $selector) {{
    {ERROR} ... on Sensor {{ sensorState {{ id status }} }} }} }}"""
STOP_SENSOR = f"""mutation ($id: String) {{ stopSensor(id: $id) {{
    {ERROR} ... on StopSensorMutationResult {{ instigationState {{ status }} }} }} }}"""
START_SENSOR = f"""mutation ($selector: SensorSelector!) {{ startSensor(sensorSelector: $selector) {{
    {ERROR} ... on Sensor {{ sensorState {{ status }} }} }} }}"""
SCHEDULE_SELECTOR = {**REPOSITORY, "scheduleName": "nightly_refresh"}
SCHEDULE = f"""query ($selector: ScheduleSelector!) {{ scheduleOrError(scheduleSelector: $selector) {{
    {ERROR} ... on Schedule {{ cronSchedule scheduleState {{ id status }} }} }} }}"""
STOP_SCHEDULE = f"""mutation ($id: String) {{ stopRunningSchedule(id: $id) {{
    {ERROR} ... on ScheduleStateResult {{ scheduleState {{ status }} }} }} }}"""
START_SCHEDULE = f"""mutation ($selector: ScheduleSelector!) {{ startSchedule(scheduleSelector: $selector) {{
    {ERROR} ... on ScheduleStateResult {{ scheduleState {{ status }} }} }} }}"""
ADD_PARTITION = f"""mutation ($repo: RepositorySelector!, $name: String!, $key: String!) {{
    addDynamicPartition(repositorySelector: $repo, partitionsDefName: $name, partitionKey: $key) {{ {ERROR} }} }}"""
LAUNCH_BACKFILL = f"""mutation ($params: LaunchBackfillParams!) {{ launchPartitionBackfill(backfillParams: $params) {{
    {ERROR} ... on LaunchBackfillSuccess {{ backfillId }} }} }}"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _documents_folder(root: Path) -> Path:
    """examples/docs plus two renamed copies with a line of their own: six documents, three ranges."""
    docs = root / "docs"
    shutil.copytree(EXAMPLES, docs)
    (docs / "copies").mkdir()
    for name in ("field-guide.txt", "getting-started.md"):
        text = (EXAMPLES / name).read_text(encoding="utf-8")
        (docs / "copies" / name).write_text(f"A second copy of {name}, kept under copies/.\n\n{text}", encoding="utf-8")
    return docs


def _document_assets() -> list[list[str]]:
    from chunking.strategies import all_strategies

    names = ["raw_documents", "parsed_documents"]
    for spec in all_strategies():
        names += [f"chunks_{spec.name}", f"embeddings_{spec.name}"]
    return [[name] for name in names]


def _ok(result: dict, typename: str) -> dict:
    assert result["__typename"] == typename, result
    return result


def _sensor_selector(name: str) -> dict:
    return {**REPOSITORY, "sensorName": name}


def _wait(condition, timeout_s: float, what: str, cluster) -> None:
    """Poll ``condition`` until true; fail at once if the daemon died, with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cluster.check_alive("daemon")
        if condition():
            return
        time.sleep(2.0)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s; the daemon's log ends:\n{cluster.service_log('daemon', 60)}")


def _run_interval(instance, run_id: str) -> tuple[float, float]:
    """(RUN_START, RUN_SUCCESS or RUN_FAILURE) timestamps of a finished run, from its event log."""
    from dagster import DagsterEventType

    records = instance.all_logs(run_id, of_type={
        DagsterEventType.RUN_START, DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE})
    starts = [r.timestamp for r in records if r.dagster_event.event_type == DagsterEventType.RUN_START]
    ends = [r.timestamp for r in records if r.dagster_event.event_type != DagsterEventType.RUN_START]
    assert len(starts) == 1 and len(ends) == 1, (run_id, records)
    return starts[0], ends[0]


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (one ending as another starts: not overlapping)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = open_now = 0
    for _, step in edges:  # at equal times -1 sorts first
        open_now += step
        most = max(most, open_now)
    return most


def test_max_overlap():
    assert max_overlap([(0, 2), (1, 3), (2, 4)]) == 2
    assert max_overlap([(0, 1), (1, 2)]) == 1
    assert max_overlap([(0, 10), (1, 2), (3, 4), (1.5, 3.5)]) == 3


def _materialized_partitions(instance, run_id: str) -> list[tuple[str, str]]:
    """(asset name, partition) of every materialization in the run's event log."""
    from dagster import DagsterEventType

    return [(r.dagster_event.asset_key.to_user_string(), r.dagster_event.partition)
            for r in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)]


def _latest_materialization_time(instance, asset: list[str], partition: str) -> float:
    from dagster import AssetKey, AssetRecordsFilter

    result = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1, ascending=False)
    return result.records[0].timestamp if result.records else 0.0


def _all_runs_finished(instance) -> bool:
    from dagster import DagsterRunStatus, RunsFilter

    unfinished = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                  DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
    return not instance.get_runs(RunsFilter(statuses=unfinished))


def _failure_report(instance, run, cluster_root: Path) -> str:
    """A failed run's tags and selection, its error events' messages, and the end of each worker's log."""
    from dagster import DagsterEventType

    errors = [f"  {record.dagster_event.event_type_value} {record.dagster_event.step_key or ''}: "
              f"{record.dagster_event.message or ''} {getattr(record.dagster_event.event_specific_data, 'error', '') or ''}"
              for record in instance.all_logs(run.run_id, of_type={
                  DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE, DagsterEventType.ENGINE_EVENT})
              if record.dagster_event.event_type != DagsterEventType.ENGINE_EVENT
              or "error" in (record.dagster_event.message or "").lower()]
    logs = [f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            for log in sorted((cluster_root / "worker_logs").glob("*.log"))]
    selection = sorted(key.to_user_string() for key in run.asset_selection or [])
    return "\n".join([f"run {run.run_id} {run.status}: tags {run.tags}, assets {selection}", *errors, *logs])


def _schedule_ticks(instance, name: str) -> list:
    """Every tick of schedule ``name`` in the instance's schedule storage (PostgreSQL), oldest first."""
    from dagster._core.scheduler.instigation import InstigatorType

    states = [state for state in instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE)
              if state.name == name]
    assert len(states) == 1, states
    return sorted(instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id),
                  key=lambda tick: tick.timestamp)


def _session_members(session_id: int) -> list[int]:
    """Live processes whose session is ``session_id`` (each service runs in its own session)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.e2e
@pytest.mark.model
def test_backfill_runs_as_queued_range_runs_then_sensor_and_automation(tmp_path, cluster_root, monkeypatch):
    from dagster import DagsterRunStatus, RunsFilter
    from dagster._core.execution.backfill import BulkActionStatus
    from dagster._core.storage.tags import (
        ASSET_PARTITION_RANGE_END_TAG,
        ASSET_PARTITION_RANGE_START_TAG,
        AUTOMATION_CONDITION_TAG,
        BACKFILL_ID_TAG,
        PARTITION_NAME_TAG,
        RUN_KEY_TAG,
        SCHEDULE_NAME_TAG,
        SENSOR_NAME_TAG,
    )
    from dagster._core.scheduler.instigation import TickStatus

    from assets.partitions import DOCUMENTS_PARTITIONS_NAME
    from deploy.local_cluster import MAX_CONNECTIONS, LocalCluster

    # The documents folder every machine mounts: outside the cluster's own folder, which hosts do not see.
    docs = _documents_folder(tmp_path)
    documents = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.is_file())
    assert len(documents) == 6 and EDITED in documents
    assert STALE in documents and STALE not in (EDITED, TOUCHED)
    document_assets = _document_assets()
    stale_strategies = [name[0].removeprefix("chunks_") for name in document_assets if name[0].startswith("chunks_")][:2]
    # The schedule's plan for STALE: those two strategies' chunks and embeddings, in graph order.
    stale_assets = [f"{kind}_{strategy}" for strategy in stale_strategies for kind in ("chunks", "embeddings")]
    run_env = {
        "CHUNKYARD_DB": str(tmp_path / "outputs" / "chunkyard.duckdb"),
        "CHUNKYARD_DOCS": str(docs),
        "CHUNKYARD_DOCUMENTS_PER_RUN": str(DOCS_PER_RUN),
        "CHUNKYARD_SCHEDULE_CRON": SCHEDULE_CRON,
    }
    # CHUNKYARD_EXECUTOR=celery (LocalCluster's with workers): every step of every run goes to a worker.
    # The lake's data files in object storage (moto's S3-compatible server, local_cluster.py --s3),
    # as a cluster of several machines would keep them; the catalog stays in PostgreSQL.
    # Each worker on a host of its own where this runs as root (CI does): deploy/hosts.py. The
    # daemon, the webserver and the runs they launch stay on this machine, the server host.
    hosts = workers_on_hosts()
    cluster = LocalCluster(cluster_root, workers=WORKERS, max_concurrent_runs=MAX_CONCURRENT_RUNS,
                           webserver_port=_free_port(), extra_env=run_env, s3=True, hosts=hosts)
    sessions: list[int] = []
    # Seconds from the start at each stage, printed at the end (pytest -s shows them): where the time goes.
    started = time.monotonic()
    marks: dict[str, float] = {}

    def mark(stage: str) -> None:
        marks[stage] = round(time.monotonic() - started, 1)

    with cluster:
        mark("postgres + workers + webserver up")
        assert cluster.env["CHUNKYARD_EXECUTOR"] == "celery"
        # Room for every process's connections (100 ran out here: a worker died, its run hung).
        assert cluster.max_connections() >= MAX_CONNECTIONS
        worker_names = cluster.wait_for_workers()
        if hosts:
            namespaces = [cluster.network.namespace(name) for name in cluster.network.names]
        postgres_pid = cluster.server.get_pid()
        assert cluster.env["CHUNKYARD_STORE_DATA_PATH"] == "s3://chunkyard/chunkyard"
        s3_pid = cluster.s3_server.proc.pid
        sessions.append(cluster.service_procs["webserver"].pid)
        sessions += [proc.pid for proc in cluster.worker_procs]

        # -- through the webserver, as a user in the UI: sensor off, partitions, backfill --------
        state = _ok(cluster.graphql(SENSOR, {"selector": _sensor_selector("documents_sensor")})["sensorOrError"],
                    "Sensor")["sensorState"]
        assert state["status"] == "RUNNING"  # its default: it would ingest the folder itself
        stopped = _ok(cluster.graphql(STOP_SENSOR, {"id": state["id"]})["stopSensor"], "StopSensorMutationResult")
        assert stopped["instigationState"]["status"] == "STOPPED"
        # The schedule too (running by default, every minute here): it would plan the new documents itself.
        schedule = _ok(cluster.graphql(SCHEDULE, {"selector": SCHEDULE_SELECTOR})["scheduleOrError"], "Schedule")
        assert schedule["cronSchedule"] == SCHEDULE_CRON  # CHUNKYARD_SCHEDULE_CRON reached the definitions
        assert schedule["scheduleState"]["status"] == "RUNNING"
        _ok(cluster.graphql(STOP_SCHEDULE, {"id": schedule["scheduleState"]["id"]})["stopRunningSchedule"],
            "ScheduleStateResult")
        for key in documents:
            _ok(cluster.graphql(ADD_PARTITION, {"repo": REPOSITORY, "name": DOCUMENTS_PARTITIONS_NAME, "key": key})[
                "addDynamicPartition"], "AddDynamicPartitionSuccess")
        backfill_id = _ok(cluster.graphql(LAUNCH_BACKFILL, {"params": {
            "partitionNames": documents, "assetSelection": [{"path": a} for a in document_assets]}})[
            "launchPartitionBackfill"], "LaunchBackfillSuccess")["backfillId"]

        mark("backfill submitted")
        cluster.start_daemon()
        mark("daemon up")
        sessions.append(cluster.service_procs["daemon"].pid)
        with cluster_instance(cluster.env, monkeypatch) as instance:
            assert type(instance.run_storage).__name__ == "PooledPostgresRunStorage"  # deploy/dagster.yaml
            assert instance.run_coordinator.get_run_queue_config().max_concurrent_runs == MAX_CONCURRENT_RUNS
            terminal = {BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED,
                        BulkActionStatus.COMPLETED, BulkActionStatus.FAILED, BulkActionStatus.CANCELED}
            _wait(lambda: instance.get_backfill(backfill_id).status in terminal, BACKFILL_TIMEOUT_S,
                  "the backfill finishing", cluster)
            mark("backfill done")
            assert instance.get_backfill(backfill_id).status == BulkActionStatus.COMPLETED_SUCCESS
            backfill_runs = instance.get_runs(RunsFilter(tags={BACKFILL_ID_TAG: backfill_id}))
            partition_order = list(instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME))
            backfill_intervals = [_run_interval(instance, run.run_id) for run in backfill_runs]
            ranges = {}
            materialized: list[tuple[str, str]] = []
            for run in backfill_runs:
                first = partition_order.index(run.tags[ASSET_PARTITION_RANGE_START_TAG])
                last = partition_order.index(run.tags[ASSET_PARTITION_RANGE_END_TAG])
                ranges[run.run_id] = partition_order[first:last + 1]
                own = _materialized_partitions(instance, run.run_id)
                assert {doc for _, doc in own} == set(ranges[run.run_id]), (run.run_id, ranges[run.run_id], own)
                materialized += own
            lake_after_backfill = read_lake(cluster.env, tmp_path)

            # -- the sensor, ticked by the daemon, and declarative automation ---------------------
            edit_started = time.time()
            with open(docs / EDITED, "a", encoding="utf-8") as handle:
                handle.write(f"\n\nA late note: the {MARKER} stands where the cliff path ends.\n")
            os.utime(docs / TOUCHED)  # a new mtime, the same bytes: the sensor must not ask for it
            _ok(cluster.graphql(START_SENSOR, {"selector": _sensor_selector("documents_sensor")})["startSensor"],
                "Sensor")
            _wait(lambda: all(_latest_materialization_time(instance, asset, EDITED) > edit_started
                              for asset in document_assets),
                  FOLLOW_UP_TIMEOUT_S, f"every asset of {EDITED} materialized again", cluster)
            mark("edited document refreshed")
            _wait(lambda: _all_runs_finished(instance), FOLLOW_UP_TIMEOUT_S, "every run finishing", cluster)
            mark("every run finished")
            lake_after_edit = read_lake(cluster.env, tmp_path)

            # -- the schedule, ticked by the daemon: two strategies' chunks of STALE from older bytes --
            with lake_store(cluster.env, tmp_path) as store:  # re-run if a late automation run's write conflicts
                store.write_transaction(lambda con: con.execute(
                    "UPDATE chunks SET doc_sha256 = 'older-bytes' WHERE doc_id = ? "
                    "AND strategy IN (SELECT unnest(?::VARCHAR[]))", [STALE, stale_strategies]))
            lake_made_stale = read_lake(cluster.env, tmp_path)
            schedule_started = time.time()
            started_schedule = _ok(cluster.graphql(START_SCHEDULE, {"selector": SCHEDULE_SELECTOR})["startSchedule"],
                                   "ScheduleStateResult")
            assert started_schedule["scheduleState"]["status"] == "RUNNING"

            def schedule_runs() -> list:
                return list(instance.get_runs(RunsFilter(tags={SCHEDULE_NAME_TAG: "nightly_refresh"})))

            def schedule_settled() -> bool:
                """The schedule's run(s) finished and a later tick found nothing to do (or a run failed)."""
                runs = schedule_runs()
                if any(run.is_finished and run.status != DagsterRunStatus.SUCCESS for run in runs):
                    return True  # the assertions below say which
                if not runs or not all(run.is_finished for run in runs):
                    return False
                last_end = max(_run_interval(instance, run.run_id)[1] for run in runs)
                return any(tick.status == TickStatus.SKIPPED and tick.timestamp > last_end
                           for tick in _schedule_ticks(instance, "nightly_refresh"))

            _wait(schedule_settled, SCHEDULE_TIMEOUT_S, "the schedule's tick, its run and a later tick", cluster)
            mark("schedule's run done, a later tick skipped")
            _ok(cluster.graphql(STOP_SCHEDULE, {"id": schedule["scheduleState"]["id"]})["stopRunningSchedule"],
                "ScheduleStateResult")
            _wait(lambda: _all_runs_finished(instance), FOLLOW_UP_TIMEOUT_S, "every run finishing", cluster)
            ticks = _schedule_ticks(instance, "nightly_refresh")
            scheduled_runs = schedule_runs()
            all_records = instance.get_run_records()
            all_runs = [record.dagster_run for record in all_records]
            created = {record.dagster_run.run_id: record.create_timestamp.timestamp() for record in all_records}
            all_intervals = [_run_interval(instance, run.run_id) for run in all_runs]
            scheduled_materialized = [_materialized_partitions(instance, run.run_id) for run in scheduled_runs]
            step_workers, steps_succeeded = celery_steps(instance, all_runs)
            lake_after_schedule = read_lake(cluster.env, tmp_path)
            bucket_files = [key for key in cluster.s3_server.keys("chunkyard/") if key.endswith(".parquet")]
            # Why a run failed, while its events and the workers' logs still exist.
            failures = {run.run_id: _failure_report(instance, run, cluster.root)
                        for run in all_runs if run.status != DagsterRunStatus.SUCCESS}
        if hosts:  # PostgreSQL's log goes with the cluster: read it now
            assert_workers_connected_from_their_hosts(cluster, worker_names)

    mark("cluster stopped")
    # Where the time goes (pytest -s shows it): the stages, and each run's start and end.
    first_start = min(start for start, _ in all_intervals)
    print("stages, s since the test started:", marks, file=sys.stderr)
    print("runs (start s, end s, launched by, partition or range start):", sorted(
        (round(start - first_start), round(end - first_start),
         run.tags.get(SENSOR_NAME_TAG) or run.tags.get(SCHEDULE_NAME_TAG)
         or ("backfill" if BACKFILL_ID_TAG in run.tags else "-"),
         run.tags.get(PARTITION_NAME_TAG) or run.tags.get(ASSET_PARTITION_RANGE_START_TAG) or "-")
        for run, (start, end) in zip(all_runs, all_intervals)), file=sys.stderr)
    print("schedule ticks (s since the schedule started, status, runs):",
          [(round(tick.timestamp - schedule_started), tick.status.value, len(tick.run_ids)) for tick in ticks],
          file=sys.stderr)

    # -- the backfill --------------------------------------------------------------------------
    assert len(backfill_runs) == len(documents) // DOCS_PER_RUN == 3
    assert all(run.status == DagsterRunStatus.SUCCESS for run in backfill_runs)
    assert sorted(doc for docs_of_run in ranges.values() for doc in docs_of_run) == documents, ranges
    assert all(len(r) == DOCS_PER_RUN for r in ranges.values()), ranges
    assert sorted(materialized) == sorted({("/".join(a), d) for a in document_assets for d in documents}), (
        "every asset of every document materialized exactly once by the backfill")
    assert max_overlap(backfill_intervals) >= 2, f"no two range runs overlapped: {backfill_intervals}"
    assert_every_document_once(lake_after_backfill, set(documents))
    # The daemon's runs wrote the lake's chunks and vectors as Parquet files in the bucket.
    assert any(key.startswith("chunkyard/main/chunks/") for key in bucket_files), bucket_files
    assert any(key.startswith("chunkyard/main/embedding_vectors/") for key in bucket_files), bucket_files

    # -- the queue's limit, over every run the daemon launched ----------------------------------
    assert not failures, "\n\n".join(failures.values())
    assert max_overlap(all_intervals) <= MAX_CONCURRENT_RUNS, all_intervals

    # -- automation stayed out of the backfill's documents; the sensor asked for the edit only ---
    backfill_ids = {run.run_id for run in backfill_runs}
    others = [run for run in all_runs if run.run_id not in backfill_ids and created[run.run_id] < schedule_started]
    sensor_runs = [run for run in others if run.tags.get(SENSOR_NAME_TAG) == "documents_sensor"]
    assert len(sensor_runs) == 1, [(r.tags, r.asset_selection) for r in sensor_runs]
    assert sensor_runs[0].tags[PARTITION_NAME_TAG] == EDITED
    assert {key.to_user_string() for key in sensor_runs[0].asset_selection} == {"raw_documents"}
    partitioned = [run for run in others if PARTITION_NAME_TAG in run.tags]
    assert {run.tags[PARTITION_NAME_TAG] for run in partitioned} == {EDITED}, [
        (r.tags.get(PARTITION_NAME_TAG), r.tags.get(SENSOR_NAME_TAG)) for r in partitioned]
    follow_ups = [run for run in partitioned if run is not sensor_runs[0]]
    assert follow_ups and all(run.tags.get(AUTOMATION_CONDITION_TAG) for run in follow_ups), [
        r.tags for r in follow_ups]
    assert all(created[run.run_id] > edit_started for run in partitioned)

    # -- the lake: the edited document's new text in every strategy, the others untouched --------
    assert_every_document_once(lake_after_edit, set(documents))
    for (doc_id, strategy), texts in lake_after_edit.texts.items():
        if doc_id == EDITED:
            assert any(MARKER in text for text in texts), strategy
        else:
            assert texts == lake_after_backfill.texts[(doc_id, strategy)], (doc_id, strategy)
    assert not any(MARKER in t for texts in lake_after_backfill.texts.values() for t in texts)

    # -- every step of every run ran on a celery worker; the backfill's range runs used both ----
    assert steps_succeeded, "no step succeeded"
    missing = steps_succeeded - set(step_workers)
    assert not missing, f"steps that did not run on a celery worker: {sorted(missing)[:5]}"
    assert set(step_workers.values()) <= set(worker_names), (step_workers, worker_names)
    backfill_workers = {worker for (run_id, _), worker in step_workers.items() if run_id in backfill_ids}
    assert backfill_workers == set(worker_names) and len(worker_names) == WORKERS, (backfill_workers, worker_names)

    # -- the schedule: its cron tick launched the one run its plan asks for, and no more --------
    assert lake_made_stale.chunk_doc_sha[(STALE, stale_strategies[0])] == {"older-bytes"}  # the premise
    assert len(scheduled_runs) == 1, [(r.run_id, r.tags) for r in scheduled_runs]
    scheduled = scheduled_runs[0]
    assert scheduled.status == DagsterRunStatus.SUCCESS
    assert scheduled.tags[PARTITION_NAME_TAG] == STALE
    assert scheduled.tags[RUN_KEY_TAG].startswith("nightly:") and scheduled.tags[RUN_KEY_TAG].endswith(f":{STALE}")
    assert sorted(key.to_user_string() for key in scheduled.asset_selection) == sorted(stale_assets)
    assert sorted(scheduled_materialized[0]) == sorted((asset, STALE) for asset in stale_assets)
    assert created[scheduled.run_id] > schedule_started
    assert {tick.status for tick in ticks} <= {TickStatus.SUCCESS, TickStatus.SKIPPED}, [
        (tick.status, tick.tick_data.error) for tick in ticks]
    launching = [tick for tick in ticks if tick.run_ids]
    assert len(launching) == 1 and list(launching[0].run_ids) == [scheduled.run_id], [
        (tick.status, tick.run_ids) for tick in ticks]
    assert launching[0].status == TickStatus.SUCCESS and launching[0].timestamp > schedule_started
    # Nothing else was asked for STALE (or any document) while the schedule ran: the sensor saw no
    # change and automation nothing new; ticks during the run left STALE to it (in flight).
    after_schedule = [run for run in all_runs if created[run.run_id] > schedule_started and PARTITION_NAME_TAG in run.tags]
    assert [run.run_id for run in after_schedule] == [scheduled.run_id], [r.tags for r in after_schedule]

    # -- the lake after the schedule's run: STALE's two strategies re-chunked from its current bytes --
    assert_every_document_once(lake_after_schedule, set(documents))
    assert lake_after_schedule.document_sha == lake_after_edit.document_sha
    for pair, texts in lake_after_schedule.texts.items():
        assert texts == lake_after_edit.texts[pair], pair  # the same bytes make the same chunks
        assert lake_after_schedule.chunk_doc_sha[pair] == lake_after_edit.chunk_doc_sha[pair], pair
    assert all(lake_after_edit.chunk_doc_sha[(STALE, s)] == {lake_after_edit.document_sha[STALE]}
               for s in stale_strategies)

    # -- nothing started by the cluster is left running ----------------------------------------
    assert not still_running([postgres_pid, s3_pid] + [pid for session in sessions for pid in _session_members(session)])
    if hosts:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(namespace in listed for namespace in namespaces), listed
