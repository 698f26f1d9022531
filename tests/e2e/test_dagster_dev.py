"""End to end: a real `dagster dev` on 127.0.0.1, driven over GraphQL, stopped by its own pid."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dagster import DagsterInstance

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
ASSETS = "{ assetsOrError { __typename ... on AssetConnection { nodes { key { path } } } } }"
RUN_STATUS = 'query Run($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    assert "errors" not in payload, payload
    return payload["data"]


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # server not up yet
            last_error = exc
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}: {last_error}")


@pytest.fixture
def dagster_dev(tmp_path, docs_dir):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster-instance.yaml", home / "dagster.yaml")
    config = tmp_path / "chunkyard.toml"
    config.write_text("[strategies.recursive]\nchunk_token_size = 60\nchunk_overlap_token_size = 10\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "CHUNKYARD_DOCS": str(docs_dir),
        "CHUNKYARD_DB": str(tmp_path / "chunkyard.duckdb"),
        "CHUNKYARD_CONFIG": str(config),
        "HF_HUB_OFFLINE": "1",
    }
    DagsterInstance.from_config(str(home)).add_dynamic_partitions("documents", ["alpha.md"])
    port = free_port()
    dagster = Path(sys.executable).parent / "dagster"
    log = open(tmp_path / "dagster_dev.log", "wb")
    # dagster dev started in the background ignores SIGINT unless the default handler is restored.
    proc = subprocess.Popen(
        ["setsid", "env", "--default-signal=INT", str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port),
         "-w", str(REPO_ROOT / "workspace.yaml")],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).status == 200,
                   180, "dagster dev to serve")
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # its own pid, not a guess by name or port
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def test_dagster_dev_lists_assets_and_runs_a_partition(dagster_dev, tmp_path):
    port, proc = dagster_dev
    assets = graphql(port, ASSETS)["assetsOrError"]["nodes"]
    keys = {"/".join(a["key"]["path"]) for a in assets}
    assert {"raw_documents", "parsed_documents", "chunks_recursive", "embeddings_recursive"} <= keys

    params = {
        "selector": {"repositoryLocationName": "chunkyard", "repositoryName": "__repository__", "jobName": "ingest_job"},
        "runConfigData": {},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "alpha.md"}]},
    }
    launched = graphql(port, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    def finished():
        status = graphql(port, RUN_STATUS, {"id": run_id})["runOrError"]["status"]
        return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

    status = wait_until(finished, 300, "the run to finish")
    assert status == "SUCCESS", (tmp_path / "dagster_dev.log").read_text(errors="replace")[-3000:]

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) is not None
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
