"""LightRAG sidecar files: written by chunkyard, read back identically; foreign
sidecars beside a document are used and validated."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from chunking.limits import DocumentLimits
from chunking.parsers import DocumentError, document_problems, is_sidecar_path, parse_bytes, parse_document
from chunking.sidecar import (
    blocks_jsonl_lines,
    read_blocks_jsonl,
    read_tables_json,
    sidecar_basename,
    write_sidecars,
)

MD = "# Report\nSee table:\n\n| X | Y |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\n## Part\nBody.\n"
HTML = (b"<html><head><title>T</title></head><body><h1>Top</h1><p>Intro</p>"
        b"<table><thead><tr><th colspan='2'>H</th></tr></thead><tr><td>a</td><td>b</td></tr></table>"
        b"<h2>Sub</h2><p>More</p></body></html>")


@pytest.mark.parametrize(("data", "name"), [(MD.encode(), "report.md"), (HTML, "page.html")])
def test_written_sidecar_reads_back_identically(tmp_path: Path, data: bytes, name: str):
    doc = parse_bytes(data, name, f"folder/{name}")
    blocks_path, tables_path = write_sidecars(doc, tmp_path)
    assert blocks_path.name == f"{sidecar_basename(doc.doc_id)}.blocks.jsonl"
    assert tables_path.name.endswith(".tables.json")
    assert read_blocks_jsonl(blocks_path) == doc.blocks
    assert read_tables_json(tables_path) == doc.tables
    assert doc.tables  # both fixtures carry a table


def test_blocks_jsonl_lines_follow_format_1_0():
    doc = parse_bytes(MD.encode(), "report.md", "report")
    lines = blocks_jsonl_lines(doc)
    meta = json.loads(lines[0])
    assert meta["type"] == "meta" and meta["format"] == "lightrag" and meta["version"] == "1.0"
    assert meta["document_hash"] == "sha256:" + hashlib.sha256(MD.encode()).hexdigest()
    assert meta["blocks"] == len(doc.blocks) == len(lines) - 1
    assert meta["table_file"] is True and meta["doc_title"] == "Report" and meta["doc_id"] == "report"
    assert {"document_name", "document_format", "equation_file", "drawing_file", "asset_dir", "parse_engine",
            "parse_time"} <= set(meta)
    first = json.loads(lines[1])
    assert list(first) == ["type", "blockid", "format", "content", "heading", "parent_headings", "level",
                           "session_type", "table_slice", "positions"]
    assert first["content"].startswith("# Report\nSee table:\n<table id=\"tb-")
    assert first["format"] == "plain_text" and first["table_slice"] == "none"
    assert json.loads(lines[2])["parent_headings"] == ["Report"]


def test_sidecar_basename_is_safe_and_keeps_distinct_ids_apart():
    assert sidecar_basename("report.pdf") == "report.pdf"
    assert "/" not in sidecar_basename("a/b.pdf")
    assert sidecar_basename("a/b") != sidecar_basename("a_b")
    assert sidecar_basename("../../etc/passwd").startswith("etc_passwd-")


def test_readers_tolerate_bad_lines_and_missing_tables(tmp_path: Path):
    path = tmp_path / "x.blocks.jsonl"
    path.write_text('{"type":"meta"}\nnot json\n{"type":"content","content":"# A\\nbody","heading":"A","level":1}\n'
                    '{"type":"content","content":42}\n', encoding="utf-8")
    (block,) = read_blocks_jsonl(path)
    assert (block.heading, block.level, block.content, block.char_start) == ("A", 1, "# A\nbody", None)
    assert read_tables_json(tmp_path / "missing.tables.json") == {}
    (tmp_path / "bad.tables.json").write_text("{oops")
    assert read_tables_json(tmp_path / "bad.tables.json") == {}


def _foreign_sidecar(folder: Path, data: bytes, *, header: str = '[["X", "Y"]]', doc_hash: str | None = None) -> None:
    meta = {"type": "meta", "format": "lightrag", "version": "1.0",
            "document_hash": "sha256:" + (doc_hash or hashlib.sha256(data).hexdigest()), "parse_engine": "mineru"}
    tag = '<table id="tb-ext-0001" format="json">[["X","Y"],["1","2"]]</table>'
    lines = [meta,
             {"type": "content", "blockid": "b1", "format": "plain_text", "content": "# Report\nSee table:\n" + tag,
              "heading": "Report", "parent_headings": [], "level": 1, "positions": [{"type": "bbox", "page_idx": 0}]},
             {"type": "content", "blockid": "b2", "format": "plain_text", "content": "## Later\nOn page two.",
              "heading": "Later", "parent_headings": ["Report"], "level": 2,
              "positions": [{"type": "bbox", "page_idx": 1}]}]
    (folder / "report.blocks.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    tables = {"version": "1.0", "tables": {"tb-ext-0001": {"id": "tb-ext-0001", "format": "json", "table_header": header}}}
    (folder / "report.tables.json").write_text(json.dumps(tables), encoding="utf-8")


def test_sidecar_beside_document_replaces_our_parse(tmp_path: Path):
    data = b"%PDF-1.4 not parsed by us at all"
    (tmp_path / "report.pdf").write_bytes(data)
    _foreign_sidecar(tmp_path, data)
    doc = parse_document(tmp_path / "report.pdf", "report.pdf")
    assert document_problems(doc) == []
    assert doc.format == "pdf" and doc.metadata["parse_engine"] == "mineru"
    assert [b.block_id for b in doc.blocks] == ["b1", "b2"]
    assert [b.heading_path for b in doc.blocks] == [["Report"], ["Report", "Later"]]
    assert [doc.text[b.char_start:b.char_end] for b in doc.blocks] == [b.content for b in doc.blocks]
    assert [p.text for p in doc.pages] == [doc.blocks[0].content + "\n\n", doc.blocks[1].content]
    assert doc.tables["tb-ext-0001"]["table_header"] == '[["X", "Y"]]'


def test_stale_or_corrupt_sidecar_is_a_document_error(tmp_path: Path):
    data = b"plain words"
    (tmp_path / "report.txt").write_bytes(data)
    _foreign_sidecar(tmp_path, data, doc_hash="0" * 64)
    with pytest.raises(DocumentError, match="stale"):
        parse_document(tmp_path / "report.txt", "r")
    _foreign_sidecar(tmp_path, data, header="<thead><tr><th>X</th></tr></thead>")
    with pytest.raises(DocumentError, match="table tb-ext-0001 is json but its table_header is not"):
        parse_document(tmp_path / "report.txt", "r")
    (tmp_path / "report.blocks.jsonl").write_text('{"type": "meta"}\n')
    # A sidecar without a document hash is used only when the user opted in.
    with pytest.raises(DocumentError, match="no content blocks"):
        parse_document(tmp_path / "report.txt", "r", limits=DocumentLimits(trust_unhashed_sidecars=True))


def test_a_sidecar_of_a_namesake_document_is_ignored_not_stale(tmp_path: Path):
    # report.md and report.txt both look for report.blocks.jsonl; it describes report.md.
    described, other = b"# Words the sidecar describes", b"Other words, in report.txt"
    (tmp_path / "report.md").write_bytes(described)
    (tmp_path / "report.txt").write_bytes(other)
    _foreign_sidecar(tmp_path, described)
    assert parse_document(tmp_path / "report.md", "report.md").metadata["parse_engine"] == "mineru"
    doc = parse_document(tmp_path / "report.txt", "report.txt")  # before: "sidecar is stale"
    assert doc.text == other.decode() and "parse_engine" not in doc.metadata
    assert doc.metadata["sidecar_ignored"] == "report.blocks.jsonl: it describes report.md, which shares this " \
                                              "document's name"
    # A hash of no document beside it is still stale.
    (tmp_path / "report.md").write_bytes(b"# Edited since the sidecar was made")
    with pytest.raises(DocumentError, match="stale"):
        parse_document(tmp_path / "report.txt", "report.txt")


def test_a_tables_sidecar_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path: Path):
    import os

    data = b"plain words"
    (tmp_path / "report.txt").write_bytes(data)
    _foreign_sidecar(tmp_path, data)
    (tmp_path / "report.tables.json").unlink()
    os.mkfifo(tmp_path / "report.tables.json")  # opening it would block until the parse timeout
    outcome: list[BaseException | None] = []

    def parse() -> None:
        try:
            parse_document(tmp_path / "report.txt", "r")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    reader = threading.Thread(target=parse, daemon=True)
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive():  # blocked opening the FIFO: give it a writer so the thread ends
        os.close(os.open(tmp_path / "report.tables.json", os.O_WRONLY))
        reader.join()
        pytest.fail("the parse opened the named pipe and waited for a writer")
    assert isinstance(outcome[0], DocumentError) and "report.tables.json is not a regular file" in str(outcome[0])


def test_chunkyard_sidecar_beside_document_round_trips_blocks(tmp_path: Path):
    data = HTML
    (tmp_path / "page.html").write_bytes(data)
    own = parse_bytes(data, "page.html", "page")
    blocks_path, tables_path = write_sidecars(own, tmp_path / "out")
    (tmp_path / "page.blocks.jsonl").write_bytes(blocks_path.read_bytes())
    (tmp_path / "page.tables.json").write_bytes(tables_path.read_bytes())
    via_sidecar = parse_document(tmp_path / "page.html", "page")
    # Read from the sidecar, not parsed again from the HTML (which would give the same blocks).
    assert via_sidecar.metadata["sidecar"] == "page.blocks.jsonl" and "sidecar" not in own.metadata
    assert via_sidecar.text == own.text  # the structured layout is reproduced exactly
    assert [b.model_dump() for b in via_sidecar.blocks] == [b.model_dump() for b in own.blocks]
    assert via_sidecar.tables == own.tables


def test_sidecar_files_are_not_documents(tmp_path: Path):
    assert is_sidecar_path("a/report.blocks.jsonl")
    assert not is_sidecar_path("report.json") and not is_sidecar_path("tables.json")
    (tmp_path / "report.PDF").write_bytes(b"%PDF-1.4")  # "report.PDF" reads "report.tables.json"
    (tmp_path / "report.tables.json").write_text('{"version": "1.0", "tables": {}}')
    assert is_sidecar_path(tmp_path / "report.tables.json")
    with pytest.raises(DocumentError, match="a LightRAG sidecar, not a document"):
        parse_document(tmp_path / "report.tables.json", "report.tables.json")
    # Beside its blocks sidecar, with the document gone, it is still a sidecar (not ingested as JSON).
    (tmp_path / "orphan.blocks.jsonl").write_text("{}\n")
    (tmp_path / "orphan.tables.json").write_text('{"version": "1.0", "tables": {}}')
    assert is_sidecar_path(tmp_path / "orphan.tables.json")


def test_a_tables_json_no_document_would_read_is_a_json_document(tmp_path: Path):
    from resources.documents import scan_folder

    (tmp_path / "prices.tables.json").write_text('{"apples": 3}', encoding="utf-8")
    assert not is_sidecar_path(tmp_path / "prices.tables.json")
    assert sorted(scan_folder(tmp_path)) == ["prices.tables.json"]
    assert parse_document(tmp_path / "prices.tables.json", "prices.tables.json").text == '{"apples": 3}'
    # Once a document of that name is beside it, it is that document's sidecar.
    (tmp_path / "prices.md").write_text("# Prices\n", encoding="utf-8")
    assert sorted(scan_folder(tmp_path)) == ["prices.md"]
    # The parse looks up exactly "<stem>.tables.json": another case is never read as the sidecar.
    (tmp_path / "prices.TABLES.JSON").write_text('{"pears": 2}', encoding="utf-8")
    assert sorted(scan_folder(tmp_path)) == ["prices.TABLES.JSON", "prices.md"]


def test_a_listed_folder_answers_as_the_disk_does_without_touching_it(tmp_path: Path):
    """scan_folder passes each folder's names (FolderNames): one pass over them, not a listing of
    the folder per *.tables.json, which a folder of thousands of them would make quadratic."""
    from chunking.parsers import FolderNames

    names = ["a.tables.json", "a.blocks.jsonl", "b.tables.json", "b.Docx", "c.tables.json", "d.tables.json",
             "d.tables.json.bak", "e.blocks.jsonl"]
    for name in names:
        (tmp_path / name).write_text("{}")
    listed = FolderNames(names)
    for name in names:
        assert is_sidecar_path(tmp_path / name, listed) == is_sidecar_path(tmp_path / name), name
    assert [n for n in names if is_sidecar_path(Path("/nowhere") / n, listed)] == [
        "a.tables.json", "a.blocks.jsonl", "b.tables.json", "e.blocks.jsonl"]
