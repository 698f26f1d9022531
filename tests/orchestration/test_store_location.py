"""The CLI's line naming the store (`chunkyard run`'s summary, `chunkyard status`): the file, or the lake."""

from resources.store import ChunkStore, lake_config
from orchestration.status import format_status


def test_an_embedded_store_is_named_by_its_file(tmp_path):
    store = ChunkStore(tmp_path / "sub" / ".." / "chunkyard.duckdb")
    assert store.location() == f"database: {(tmp_path / 'chunkyard.duckdb').resolve()}"


def test_a_lake_is_named_by_its_catalog_and_data_never_by_its_anchor_file_or_password(tmp_path):
    lake = lake_config("ducklake", "postgres:dbname=chunkyard host=db port=5432 user=postgres password=s3cr3t",
                       "s3://bucket/chunkyard", s3_endpoint="http://objects:9000")
    store = ChunkStore(tmp_path / "chunkyard.duckdb", lake=lake)
    line = store.location()
    assert line == ("store: ducklake postgres:dbname=chunkyard host=db port=5432 user=postgres password=*** "
                    "(data s3://bucket/chunkyard at objects:9000)")
    assert "s3cr3t" not in line and "chunkyard.duckdb" not in line
    # `chunkyard status` leads with the same line, stored documents or not.
    assert format_status([], line).splitlines()[0] == line
