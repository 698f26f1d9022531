"""The chunkyard verbs that only read (status, show, sql, strategies), the run report, progress lines.

A store is filled with the library and ChunkStore directly: no Dagster run is needed here.
"""

import io
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chunking import ParsedDocument, chunk_text
from chunking.tokenizers import CharTokenizer
from orchestration.cli import VERBS, main
from orchestration.progress import ProgressPrinter, RunProgress, render_plain
from orchestration.run_report import (
    EXIT_DOCUMENT_FAILED, EXIT_OK, EXIT_RUN_FAILED, FAILED, PASSED, WARN, RunTally, bare_cause, check_outcome,
    exit_code, stage_of,
)
from resources.store import ChunkStore

REPO_ROOT = Path(__file__).resolve().parents[2]
CHAR = CharTokenizer()
TEXT = "Hostile <script>alert(1)</script> text. " + " ".join(f"Sentence {i} is here." for i in range(30))


@pytest.fixture
def store(tmp_path):
    store = ChunkStore(tmp_path / "data" / "chunkyard.duckdb")
    store.initialize()
    doc = ParsedDocument.from_text(TEXT)
    doc = ParsedDocument(doc_id="notes/a.txt", text=doc.text, pages=doc.pages, source_name="a.txt", sha256="abc")
    store.replace_parsed(doc, "/docs", "notes/a.txt", len(TEXT))
    for strategy, config in (("recursive", {"chunk_token_size": 100, "chunk_overlap_token_size": 20}),
                             ("simple", {"max_object_length": 150})):
        chunks = chunk_text(doc.text, strategy=strategy, tokenizer=CHAR, **config)
        store.replace_chunks("notes/a.txt", strategy, chunks, config_hash="h", doc_sha256="abc")
    store.record_error("broken.pdf", "/docs", "broken.pdf", "def", 10, "broken.pdf: PDF is truncated: no %%EOF")
    return store


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_verb_has_help():
    assert {"run", "status", "show", "sql", "strategies"} <= set(VERBS)
    for verb in VERBS:
        proc = subprocess.run([sys.executable, "-m", "orchestration.cli", verb, "--help"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and f"usage: chunkyard {verb}" in proc.stdout, proc.stderr
    run_help = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--help"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=120).stdout
    assert "exit codes: 0 =" in run_help and "1 = at least one document failed in this run" in run_help


def test_status_shows_stored_counts_per_folder_and_strategy_and_failed_documents_once(store, capsys):
    code, out, _ = run_main(capsys, "status", "--db", str(store.path))
    assert code == 0
    assert "folder /docs: 2 documents (1 error, 1 parsed)" in out
    recursive = re.search(r"recursive\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out)
    with store.connect(read_only=True) as con:
        n, max_tokens = con.execute(
            "SELECT count(*), max(token_count) FROM chunks WHERE strategy = 'recursive'").fetchone()
    assert recursive and recursive.groups() == ("1", str(n), "0", str(max_tokens))
    assert "broken.pdf  PDF is truncated: no %%EOF" in out
    assert out.count("broken.pdf") == 1  # the file is named once, not "broken.pdf: broken.pdf: ..."


def test_status_documents_lists_ids_and_the_chunks_kept_from_an_earlier_parse(store, capsys):
    with store.connect(read_only=True) as con:
        (stored,) = con.execute("SELECT count(*) FROM chunks WHERE doc_id = 'notes/a.txt'").fetchone()
    code, out, _ = run_main(capsys, "status", "--documents", "--db", str(store.path))
    assert code == 0
    assert re.search(rf"notes/a\.txt\s+parsed\s+2\s+{stored}\s+0\s*$", out, re.M), out
    assert re.search(r"broken\.pdf\s+error\s+0\s+0\s+0\s+PDF is truncated", out), out
    # The document changes and its new bytes fail: its chunks are kept, no longer current.
    store.record_error("notes/a.txt", "/docs", "notes/a.txt", "new-sha", 10, "notes/a.txt: not UTF-8 text")
    code, out, _ = run_main(capsys, "status", "--documents", "--db", str(store.path))
    assert re.search(rf"notes/a\.txt\s+error\s+0\s+0\s+{stored}\s+not UTF-8 text", out), out
    code, out, _ = run_main(capsys, "status", "--db", str(store.path))
    assert f"kept from an earlier good parse, not current (not counted above, not searched): {stored} chunks of 1 document(s)" in out
    # show's hint names the command that lists the ids.
    code, _, err = run_main(capsys, "show", "nothing.md", "--db", str(store.path))
    assert code != 0 and "(chunkyard status --documents lists them)" in err


def test_status_and_sql_on_a_missing_database_say_so_and_create_nothing(tmp_path, capsys):
    missing = tmp_path / "none.duckdb"
    code, _, err = run_main(capsys, "status", "--db", str(missing))
    assert code == EXIT_RUN_FAILED and "no database at" in err and not missing.exists()


def test_sql_prints_a_table_and_is_read_only(store, capsys):
    code, out, _ = run_main(capsys, "sql", "SELECT strategy, count(*) AS n FROM chunks GROUP BY 1 ORDER BY 1",
                            "--db", str(store.path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["strategy", "n"] and set(lines[1]) <= {"-", " "}
    assert lines[2].split()[0] == "recursive" and lines[3].split()[0] == "simple" and lines[-1] == "(2 rows)"
    code, _, err = run_main(capsys, "sql", "DELETE FROM chunks", "--db", str(store.path))
    assert code == EXIT_RUN_FAILED and "read-only" in err.lower()
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0


def test_sql_limits_rows_and_says_so(store, capsys):
    code, out, _ = run_main(capsys, "sql", "SELECT * FROM range(10)", "--max-rows", "3", "--db", str(store.path))
    assert code == 0 and out.strip().endswith("(3 rows (more not shown; --max-rows N))")


def test_sql_cuts_long_cells_says_so_and_full_prints_them_whole(store, capsys):
    query = "SELECT repeat('x', 100) || 'END' AS long"
    code, out, _ = run_main(capsys, "sql", query, "--db", str(store.path))
    assert code == 0 and "END" not in out and "x…" in out and out.strip().endswith("(1 row; long cells cut: --full)")
    code, out, _ = run_main(capsys, "sql", query, "--full", "--db", str(store.path))
    assert code == 0 and "x" * 100 + "END" in out and out.strip().endswith("(1 row)")


def test_show_writes_the_viewer_beside_the_database_with_escaped_text(store, capsys, tmp_path):
    code, out, _ = run_main(capsys, "show", "a.txt", "--db", str(store.path))
    assert code == 0
    path = Path(out.strip().rsplit(" ", 1)[-1])
    assert path.parent == store.path.resolve().parent / "viewer"
    page = path.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page

    class Sections(HTMLParser):
        names: list = []

        def handle_starttag(self, tag, attrs):
            if tag == "section":
                self.names.append(dict(attrs)["data-strategy"])

    parser = Sections()
    parser.feed(page)
    assert parser.names == ["recursive", "simple"]

    out_file = tmp_path / "one.html"
    code, _, _ = run_main(capsys, "show", "notes/a.txt", "--strategy", "simple", "-o", str(out_file),
                          "--db", str(store.path))
    assert code == 0 and 'data-strategy="simple"' in out_file.read_text() and "recursive" not in out_file.read_text()
    code, _, err = run_main(capsys, "show", "notes/a.txt", "--strategy", "paragraph", "--db", str(store.path))
    assert code == EXIT_RUN_FAILED and "no chunks stored for paragraph; stored: recursive, simple" in err
    code, _, err = run_main(capsys, "show", "broken.pdf", "--db", str(store.path))
    assert code == EXIT_RUN_FAILED and "broken.pdf: nothing to show: its current bytes did not parse (PDF is truncated" in err
    store.record_read("notes/a.txt", "/docs", "notes/a.txt", "changed-sha", len(TEXT))  # read, not parsed yet
    code, _, err = run_main(capsys, "show", "notes/a.txt", "--db", str(store.path))
    assert code == EXIT_RUN_FAILED and "notes/a.txt: nothing to show yet: its current bytes are read but not parsed" in err


def test_strategies_lists_every_config_field_with_common_names(capsys):
    code, out, _ = run_main(capsys, "strategies", "--markdown")
    assert code == 0
    assert "| sentence | `max_tokens_per_section` | int | `500` |" in out
    assert "| sentence | `chunk_token_size` | int | `-` | common name for max_tokens_per_section |" in out
    assert "| semantic | `allow_recursive_fallback` | bool | `False` |" in out


def test_failure_cause_names_the_file_once_and_stages_are_named():
    assert bare_cause("broken.pdf", "broken.pdf: PDF is truncated") == "PDF is truncated"
    assert bare_cause("dir/broken.pdf", "broken.pdf: PDF is truncated") == "PDF is truncated"
    assert bare_cause("a.txt", "something else: x") == "something else: x"
    assert [stage_of(a) for a in ("raw_documents", "parsed_documents", "chunks_sentence", "embeddings_simple")] == [
        "read", "parse", "chunk sentence", "embed simple"]


def test_warn_checks_are_warn_not_failed_and_exit_codes_follow_this_run():
    assert check_outcome(True, False) == PASSED and check_outcome(True, True) == PASSED
    assert check_outcome(False, True) == WARN and check_outcome(False, False) == FAILED
    tally = RunTally()
    assert exit_code(tally, 0) == EXIT_OK == 0
    assert exit_code(tally, 1) == EXIT_DOCUMENT_FAILED == 1
    tally.failed_batches = 1
    assert exit_code(tally, 0) == EXIT_RUN_FAILED == 2


def test_plain_progress_prints_one_line_per_finished_step_with_rate_and_eta():
    now = [100.0]
    progress = RunProgress(total_documents=10, steps_per_run=2, started=100.0)
    out = io.StringIO()
    printer = ProgressPrinter(progress, out, tty=False, clock=lambda: now[0])
    progress.start_run(1, 2, 5)
    progress.step_started("parsed_documents")
    for doc in "abc":
        progress.document_done("parsed_documents", doc)
    assert progress.documents_done == 1.5  # 3 of 5 documents through 1 of 2 steps
    printer.redraw()  # not a TTY: draws nothing
    assert out.getvalue() == ""
    now[0] = 105.0
    printer.step_finished("parsed_documents", "done")
    progress.step_started("chunks_recursive")
    printer.step_finished("chunks_recursive", "FAILED")
    progress.end_run()
    lines = out.getvalue().splitlines()
    assert lines == [
        "  run 1/2 parsed_documents: done (5 documents); overall 2.5/10 documents, 2.0 s/doc, elapsed 00:05, ETA 00:15",
        "  run 1/2 chunks_recursive: FAILED (5 documents); overall 5.0/10 documents, 1.0 doc/s, elapsed 00:05, ETA 00:05",
    ]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert progress.documents_done == 5.0


def test_a_failed_batchs_re_run_of_one_document_adds_no_document():
    # First batch of 2 of 4 documents, one fails and is re-run alone: 2 of 4 done, not 3.
    progress = RunProgress(total_documents=4, steps_per_run=1, started=0.0)
    out = io.StringIO()
    printer = ProgressPrinter(progress, out, tty=False, clock=lambda: 4.0)
    progress.start_run(1, 1, 2)
    progress.step_started("parsed_documents")
    progress.document_done("parsed_documents", "good.md")
    printer.step_finished("parsed_documents", "done")
    progress.end_run()
    progress.start_run(1, 1, 1, retrying="broken.pdf")
    progress.step_started("parsed_documents")
    printer.step_finished("parsed_documents", "FAILED")
    progress.end_run()
    assert progress.documents_done == 2.0 and progress.total_documents == 4
    assert out.getvalue().splitlines()[-1].startswith(
        "  run 1/1 re-run of broken.pdf alone parsed_documents: FAILED (1 document); overall 2.0/4 documents")


def test_tty_progress_redraws_bars_in_place():
    progress = RunProgress(total_documents=4, steps_per_run=1, started=0.0)
    out = io.StringIO()
    printer = ProgressPrinter(progress, out, tty=True, clock=lambda: 2.0)
    progress.start_run(1, 1, 4)
    progress.step_started("parsed_documents")
    progress.document_done("parsed_documents", "a")
    printer.redraw()
    drawn = out.getvalue()
    assert drawn.startswith("\r\x1b[2Kdocuments   1.0/4 [######------------------] 2.0 s/doc  elapsed 00:02  ETA 00:06")
    assert "run 1/1 step 0/1 parsed_documents" in drawn and "[###---------] 1/4" in drawn


def test_render_plain_is_one_line():
    progress = RunProgress(total_documents=1, steps_per_run=1, started=0.0)
    progress.start_run(1, 1, 1)
    progress.step_finished("raw_documents", "skipped")
    assert "\n" not in render_plain(progress, progress.steps["raw_documents"], 1.0)


def _event(kind, step, data):
    from types import SimpleNamespace

    return SimpleNamespace(event_type=kind, step_key=step, event_specific_data=data)


def test_tally_reads_real_dagster_check_and_failure_events():
    from types import SimpleNamespace

    from dagster import AssetCheckEvaluation, AssetCheckSeverity, AssetKey, DagsterEventType, MetadataValue
    from dagster._core.events import StepFailureData
    from dagster._core.execution.plan.objects import UserFailureData
    from dagster_shared.error import SerializableErrorInfo

    def evaluation(asset, check, doc, passed, severity, description=None):
        return _event(DagsterEventType.ASSET_CHECK_EVALUATION, asset, AssetCheckEvaluation(
            asset_key=AssetKey(asset), check_name=check, passed=passed, partition=doc, severity=severity,
            description=description))

    events = [
        evaluation("embeddings_recursive", "within_model_max_sequence", "a.md", False, AssetCheckSeverity.WARN),
        evaluation("embeddings_recursive", "within_model_max_sequence", "b.md", True, AssetCheckSeverity.WARN),
        evaluation("parsed_documents", "parsed", "broken.pdf", False, AssetCheckSeverity.ERROR,
                   "broken.pdf: PDF is truncated"),
        # An unpartitioned summary of a range run is not a document's outcome.
        evaluation("parsed_documents", "parsed", None, False, AssetCheckSeverity.ERROR, "failed for 1 of 2"),
        _event(DagsterEventType.STEP_FAILURE, "parsed_documents", StepFailureData(
            error=None, user_failure_data=UserFailureData(
                label="intentional-failure", description="x.docx: not a zip archive",
                metadata={"document": MetadataValue.text("x.docx")}))),
        _event(DagsterEventType.STEP_FAILURE, "chunks_sentence", StepFailureData(
            error=SerializableErrorInfo("ValueError: boom\nmore", [], "ValueError"), user_failure_data=None)),
    ]
    tally = RunTally()
    tally.add_run(SimpleNamespace(success=False, run_id="0123456789", all_events=events))
    counts = tally.check_counts()
    assert counts["embeddings_recursive.within_model_max_sequence"] == {WARN: 1, PASSED: 1}
    assert counts["parsed_documents.parsed"] == {FAILED: 1}
    assert [f.line() for f in tally.all_failures()] == ["broken.pdf  [parse]  PDF is truncated", "x.docx  [parse]  not a zip archive"]
    assert tally.run_errors == [
        "run 01234567 step chunks_sentence: ValueError: boom (full trace: the run's logs in `make ui`)"]
    assert "a.md" not in tally.failures  # a WARN is not a failed document

    # A document refused at two stages shows both causes, each stage once, in the order seen
    # (a one-document run records its failed check, then its step fails with the same cause).
    refused = RunTally()
    refused.add_run(SimpleNamespace(success=True, run_id="y", all_events=[
        evaluation("chunks_semantic", "coverage", "big.txt", False, AssetCheckSeverity.ERROR,
                   "big.txt: semantic failed: DocumentLimitError: over limits.chunk_timeout_s"),
        evaluation("embeddings_recursive", "embeddings_complete", "big.txt", False, AssetCheckSeverity.ERROR,
                   "big.txt: recursive embedding time is over the limit (limits.embed_timeout_s)"),
        _event(DagsterEventType.STEP_FAILURE, "chunks_semantic", StepFailureData(
            error=None, user_failure_data=UserFailureData(
                label="intentional-failure", description="big.txt: semantic failed again",
                metadata={"document": MetadataValue.text("big.txt")}))),
    ]))
    assert [f.line() for f in refused.all_failures()] == [
        "big.txt  [chunk semantic]  semantic failed: DocumentLimitError: over limits.chunk_timeout_s",
        "big.txt  [embed recursive]  recursive embedding time is over the limit (limits.embed_timeout_s)"]

    # A one-partition run's results carry no partition of their own: they are the run's partition's.
    single = RunTally()
    run = SimpleNamespace(tags={"dagster/partition": "c.md"})
    single.add_run(SimpleNamespace(success=True, run_id="x", dagster_run=run, all_events=[
        evaluation("chunks_simple", "token_cap", None, True, AssetCheckSeverity.ERROR)]))
    assert single.checks == {("chunks_simple.token_cap", "c.md"): PASSED}
    from orchestration.run_report import single_partition_of

    ends = {"dagster/asset_partition_range_start": "d.md", "dagster/asset_partition_range_end": "d.md"}
    assert single_partition_of(ends) == "d.md"
    assert single_partition_of({**ends, "dagster/asset_partition_range_end": "e.md"}) is None


def test_readme_strategy_table_is_the_generated_one():
    from orchestration.cli import strategies_markdown, strategy_fields

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- strategies-table:start -->\n", 1)[1].split("\n<!-- strategies-table:end -->", 1)[0]
    assert table == strategies_markdown(strategy_fields()), "regenerate with: chunkyard strategies --markdown"


def test_a_lone_bad_document_is_a_document_failure_a_failed_batch_is_not():
    from orchestration.cli import batch_failed

    assert not batch_failed(True, ["a", "b"], {"a"})
    assert not batch_failed(False, ["bad.pdf"], {"bad.pdf"})  # its own run fails by design: exit 1
    assert batch_failed(False, ["a", "b"], {"a"})  # a batch does not fail for one document: a bug, exit 2
    assert batch_failed(False, ["good.md"], set())


def test_an_internal_error_is_one_line_and_exit_code_2(monkeypatch, capsys):
    from orchestration.cli import Verb

    def broken(args):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(VERBS, "boom", Verb("fails", lambda p: None, broken))
    code, out, err = run_main(capsys, "boom")
    assert code == 2 and err.strip() == "chunkyard boom: internal error: RuntimeError: disk on fire"
