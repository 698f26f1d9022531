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


def test_table_columns_line_up_by_terminal_width_with_cjk_and_combining_text():
    """`status --documents` put the columns after a CJK document id out of line (README audit, session 27):
    cells are padded by the columns they take on a terminal, not by their length."""
    from orchestration.status import display_width, format_table

    assert display_width("zh/检索分块简介.txt") == len("zh/.txt") + 2 * 6
    assert display_width("x\u0301y") == 2 and display_width("ＡＢ") == 4 and display_width("plain") == 5
    text = format_table(["document", "chunks"], [["zh/检索分块简介.txt", 3], ["notes/a.md", 12], ["e\u0301.md", 7]])
    header, rule, *lines = text.splitlines()
    # Every row's last column ends in the same terminal column as the header's.
    assert {display_width(row) for row in lines} == {display_width(header)} == {len(rule)}
