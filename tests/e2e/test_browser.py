"""The UI as a person meets it: `make ui`'s own command, a real `dagster dev` (`dg dev`), headless Chromium.

One module-scoped UI server over a small folder that a batched CLI run has already
processed (three documents of different chunk counts, one run). The tests then
read the server's first lines, and click through it in Debian's chromium driven
by selenium through /usr/bin/chromedriver (Selenium Manager is never asked to
download anything). Screenshots go to $CHUNKYARD_SCREENSHOTS or a temp folder,
printed at the end; CHUNKYARD_UPDATE_README_SCREENSHOTS=1 also copies the two the
README shows into docs/screenshots/.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

# pytest puts tests/e2e on sys.path (rootdir-relative, no __init__.py): one copy of these helpers.
from test_dagster_dev import free_port, graphql, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
README_SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
STRATEGY = "recursive"
CHUNKS_ASSET = f"chunks_{STRATEGY}"
CHECKED_DOC = "short.md"  # its own row count (1) differs from the batch's total
RELAUNCHED_DOC = "medium.txt"
pytestmark = pytest.mark.e2e

PARAGRAPH = (
    "The harbour wall was rebuilt in stone after the storm, and the fishermen moved their nets "
    "to the northern quay while the work went on. "
)
DOCUMENTS = {
    "short.md": "# Short\n\nOne small paragraph about tides.\n",
    "medium.txt": "\n\n".join([PARAGRAPH] * 4),
    "sub/long.md": "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n{PARAGRAPH * 2}" for i in range(8)),
}
CONFIG = f"""
enabled_strategies = ["{STRATEGY}"]
[strategies.{STRATEGY}]
chunk_token_size = 40
chunk_overlap_token_size = 5
"""

RUNS_FOR_PARTITION = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) { __typename ... on Runs { results { runId status startTime } } }
}
"""

# The flags that work in this container: no sandbox (root), no GPU, and nothing that
# reaches the network on its own (QUIC, component updates, sync, background fetches).
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1600,1000",
)


@dataclass
class UiServer:
    port: int
    proc: subprocess.Popen
    log_path: Path
    db_path: Path
    startup_lines: list[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def ui_command(port: int) -> list[str]:
    """The exact command `make ui` runs (from the Makefile's UI_COMMAND), with this venv and port."""
    venv = Path(sys.executable).parent.parent
    printed = subprocess.run(
        ["make", "-s", "--no-print-directory", "ui-command", f"VENV={venv}", f"PORT={port}"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return shlex.split(printed)


def chunk_counts(db_path: Path) -> dict[str, int]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "SELECT doc_id, count(*) FROM chunks WHERE strategy = ? GROUP BY doc_id", [STRATEGY]
        ).fetchall()
    return dict(rows)


def document_state(db_path: Path) -> dict[str, tuple[datetime, int, int]]:
    """doc_id -> (documents.updated_at, chunks, embeddings) for the test's strategy."""
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            """
            SELECT d.doc_id, d.updated_at,
                   (SELECT count(*) FROM chunks c WHERE c.doc_id = d.doc_id AND c.strategy = ?),
                   (SELECT count(*) FROM embeddings e WHERE e.doc_id = d.doc_id AND e.strategy = ?)
            FROM documents d
            """,
            [STRATEGY, STRATEGY],
        ).fetchall()
    return {doc: (updated, chunks, embeddings) for doc, updated, chunks, embeddings in rows}


def read_when_unlocked(read, what: str):
    """DuckDB refuses a reader while a run's writer holds the file: retry until it lets go."""
    return wait_until(read, 60, what)


def stop(proc: subprocess.Popen) -> None:
    """Stop dagster by its own pid (SIGINT, its clean shutdown), then its process group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """A batched CLI run over three documents, then the UI on a free port over the same instance."""
    root = tmp_path_factory.mktemp("ui")
    docs = root / "docs"
    for name, text in DOCUMENTS.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text, encoding="utf-8")
    (root / "chunkyard.toml").write_text(CONFIG)
    db_path = root / "chunkyard.duckdb"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(root / "dagster_home"),
        "CHUNKYARD_DOCS": str(docs),
        "CHUNKYARD_DB": str(db_path),
        "CHUNKYARD_CONFIG": str(root / "chunkyard.toml"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    cli = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
    assert "3 to process in 1 run(s)" in cli.stdout, cli.stdout  # one batched run, not one per document

    port = free_port()
    log_path = root / "ui.log"
    log = open(log_path, "wb")
    # A background dagster ignores SIGINT unless the default handler is restored; setsid gives it
    # its own process group, so a hung shutdown can be killed without touching anything else.
    proc = subprocess.Popen(
        ["setsid", "env", "--default-signal=INT", *ui_command(port)],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: "Serving dagster-webserver" in log_path.read_text(errors="replace"),
                   240, "the UI to serve")
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).status == 200,
                   60, "the UI to answer")
        lines = log_path.read_text(errors="replace").splitlines()
        serving = next(i for i, line in enumerate(lines) if "Serving dagster-webserver" in line)
        yield UiServer(port, proc, log_path, db_path, lines[: serving + 1])
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory, request):
    folder = Path(os.environ.get("CHUNKYARD_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    # Printed past pytest's output capture, so it shows when the tests pass too.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nbrowser screenshots: {folder}")


# Decided at collection, before the module's UI server is started for nothing. CI (CI=true)
# runs as root, so `make browser` can install the browser there: a missing one is a failure
# there, not a skip that would leave CI green without the UI test.
BROWSER_MISSING = (
    None
    if CHROMIUM.exists() and CHROMEDRIVER.exists() and importlib.util.find_spec("selenium")
    else f"{CHROMIUM}, {CHROMEDRIVER} or selenium is missing: `make browser` installs Debian's chromium and "
    "chromium-driver (needs apt-get as root); selenium is in the [test] extra"
)
needs_browser = pytest.mark.skipif(
    BROWSER_MISSING is not None and not os.environ.get("CI"), reason=str(BROWSER_MISSING)
)


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    # An explicit driver path means Selenium Manager is not consulted; SE_OFFLINE stops it
    # from fetching anything should a future selenium consult it anyway.
    os.environ["SE_OFFLINE"] = "true"
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def test_ui_command_starts_without_misleading_warnings(ui_server):
    startup = "\n".join(ui_server.startup_lines)
    assert ui_server.startup_lines, ui_server.log_path.read_text(errors="replace")[-3000:]
    # `dagster dev` is superseded by `dg dev` in 1.13 ("SupersessionWarning ... Use 'dg dev' instead").
    assert "supersed" not in startup.lower(), startup
    # "Found a dagster instance configuration value (dagster.yaml) in the current folder, but your
    # DAGSTER_HOME ... will not be used": the repository no longer ships a dagster.yaml in the folder
    # the UI starts from.
    assert "DAGSTER_HOME" not in startup and "will not be used" not in startup, startup
    # And the instance in DAGSTER_HOME is the one the UI serves: it shows the CLI's batched run,
    # and the strategy_stats run the CLI ended with.
    runs = graphql(ui_server.port, RUNS_FOR_PARTITION, {"filter": {}})["runsOrError"]["results"]
    assert [run["status"] for run in runs] == ["SUCCESS", "SUCCESS"], runs


# -- the browser ---------------------------------------------------------------------------------


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_for_text(driver, text: str, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: text in page_text(d), f"{text!r} never appeared")


def click_button(scope, label: str, prefix: bool = False, timeout: float = 30) -> None:
    """Click the button labelled ``label``; the UI re-renders as data arrives, so a button
    found a moment ago may be replaced before the click: look it up again until it works."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:
        try:
            for button in scope.find_elements(By.CSS_SELECTOR, "button"):
                text = button.text.strip()
                if text == label or (prefix and text.startswith(label)):
                    button.click()
                    return
        except StaleElementReferenceException:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no button {label!r}")
        time.sleep(0.2)


def metadata_value(driver, label: str) -> str:
    """The value cell beside a label in a metadata table (the partition's latest materialization)."""
    from selenium.webdriver.common.by import By

    cell = driver.find_element(By.XPATH, f"//td[normalize-space()='{label}']/following-sibling::td[1]")
    return cell.text.strip()


def open_lineage(driver, ui: UiServer, shots: Path) -> None:
    """The lineage link `chunkyard run` prints and the README gives, in a fresh browser profile
    (the `browser` fixture's): every asset node is shown at once, with no click or key press."""
    from orchestration import definitions
    from orchestration.cli import asset_group_names, lineage_url

    url = lineage_url(ui.base, asset_group_names(definitions.build_definitions(ui_settings(ui))))
    driver.get(url)
    wait_for_text(driver, "Global asset lineage")
    wait_for_text(driver, "Materialize all")
    try:
        # Asset nodes of every group (a collapsed group shows only its name and asset count);
        # embeddings_recursive's label is cut short in its node ("embeddi…_recursive").
        for asset in ("raw_documents", "parsed_documents", CHUNKS_ASSET, "strategy_stats", "retrieval_eval"):
            wait_for_text(driver, asset)
    finally:
        driver.save_screenshot(str(shots / "lineage.png"))


def ui_settings(ui: UiServer):
    """The settings the UI server was started with (its folder's chunkyard.toml)."""
    from orchestration.settings import load_settings

    return load_settings(ui.db_path.parent / "chunkyard.toml")


def open_partition(driver, ui: UiServer, shots: Path, doc: str) -> int:
    driver.get(f"{ui.base}/assets/{CHUNKS_ASSET}?view=partitions&partition={doc}")
    wait_for_text(driver, "dagster/row_count")
    driver.save_screenshot(str(shots / "chunks-partition.png"))
    return int(metadata_value(driver, "dagster/row_count"))


def open_check_partitions(driver, ui: UiServer, shots: Path, check: str, doc: str) -> str:
    """The check's Partitions tab: the status counts, then one document's result."""
    from selenium.webdriver.common.by import By

    driver.get(f"{ui.base}/assets/{CHUNKS_ASSET}?view=checks&checkDetail={check}")
    wait_for_text(driver, "Execution history")
    tabs = [b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == "Partitions"]
    tabs[-1].click()  # the first "Partitions" is the asset's own tab
    wait_for_text(driver, "Passed (")
    # The partition list under its filter box (the same name is also a chip in the selector above).
    driver.find_element(
        By.XPATH, f"//input[contains(@placeholder, 'Filter by partition')]/following::*[normalize-space(text())='{doc}'][1]"
    ).click()
    wait_for_text(driver, "Latest execution", 30)
    driver.save_screenshot(str(shots / "check-partition.png"))
    return page_text(driver)


def launch_one_document(driver, ui: UiServer, doc: str) -> None:
    """Global lineage -> Materialize all -> Custom: one partition -> Launch 1 run, all by clicks."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{ui.base}/asset-groups")
    wait_for_text(driver, "Materialize all")
    click_button(driver, "Materialize all", prefix=True)
    dialog = WebDriverWait(driver, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=dialog]"))
    WebDriverWait(driver, 60).until(lambda d: "Select a partition" in dialog.text)
    dialog.find_element(By.XPATH, ".//*[contains(text(), 'Select a partition')]").click()
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.XPATH, f"//*[@title='{doc}']")).click()
    # Close the partition list by clicking the dialog's title, then launch.
    dialog.find_element(By.XPATH, ".//*[contains(text(), 'Launch runs to materialize')]").click()
    WebDriverWait(driver, 30).until(lambda d: "Launch 1 run" in dialog.text)
    click_button(driver, "Launch 1 run")  # looked up in the page: the dialog re-renders
    WebDriverWait(driver, 60).until(lambda d: not d.find_elements(By.CSS_SELECTOR, "[role=dialog]"),
                                    "the launch dialog never closed")


def open_strategy_stats(driver, ui: UiServer, shots: Path) -> str:
    """The strategy_stats asset's latest materialization: per-strategy figures and the histogram."""
    driver.get(f"{ui.base}/assets/strategy_stats")
    wait_for_text(driver, f"{STRATEGY}/tokens_p50")
    driver.save_screenshot(str(shots / "strategy-stats.png"))
    return page_text(driver)


def finished_runs_for(ui: UiServer, doc: str, after: float) -> list[dict] | None:
    """The runs of one document created since `after`, once there is one and all have finished.

    All of them, not the first to finish: were the automation sensor to add a run of the same
    document, DuckDB is read only after every writer of that document is done.
    """
    runs = graphql(ui.port, RUNS_FOR_PARTITION,
                   {"filter": {"tags": [{"key": "dagster/partition", "value": doc}],
                               "createdAfter": after}})["runsOrError"]["results"]
    finished = all(run["status"] in ("SUCCESS", "FAILURE", "CANCELED") for run in runs)
    return runs if runs and finished else None


@pytest.fixture
def browser_installed():
    if BROWSER_MISSING is not None:  # only reached under CI=true: elsewhere needs_browser skips
        pytest.fail(f"CI must run the browser test: {BROWSER_MISSING}")


@needs_browser
def test_browser_shows_each_document_and_reruns_one(browser_installed, ui_server, browser, screenshots):
    ui = ui_server
    graphql(ui.port, "mutation { setNuxSeen }")  # the community dialog would cover the page
    own_counts = chunk_counts(ui.db_path)
    assert len(set(own_counts.values())) == 3, own_counts  # three different chunk counts
    assert own_counts[CHECKED_DOC] != sum(own_counts.values())

    open_lineage(browser, ui, screenshots)

    assert open_partition(browser, ui, screenshots, CHECKED_DOC) == own_counts[CHECKED_DOC], (
        f"{CHECKED_DOC}'s partition shows a row count other than its own {own_counts[CHECKED_DOC]} "
        f"(the batch's total is {sum(own_counts.values())})"
    )

    check_page = open_check_partitions(browser, ui, screenshots, "token_cap", CHECKED_DOC)
    assert re.search(r"Passed \(3\)", check_page) and re.search(r"Missing \(0\)", check_page), check_page
    assert f"\n{CHECKED_DOC}\nPassed\n" in check_page, check_page  # the detail's title and status

    before = read_when_unlocked(lambda: document_state(ui.db_path), "the database before the launch")
    launched_at = time.time()
    launch_one_document(browser, ui, RELAUNCHED_DOC)
    runs = wait_until(lambda: finished_runs_for(ui, RELAUNCHED_DOC, launched_at), 300,
                      f"the UI's run of {RELAUNCHED_DOC} to finish")
    assert {run["status"] for run in runs} == {"SUCCESS"}, ui.log_path.read_text(errors="replace")[-3000:]

    after = read_when_unlocked(lambda: document_state(ui.db_path), "the database after the run")
    assert after[RELAUNCHED_DOC][0] > before[RELAUNCHED_DOC][0]  # its rows were rewritten just now
    assert after[RELAUNCHED_DOC][1:] == before[RELAUNCHED_DOC][1:]  # same chunks, all embedded
    assert after[RELAUNCHED_DOC][2] == after[RELAUNCHED_DOC][1] > 0
    for other in set(before) - {RELAUNCHED_DOC}:
        assert after[other] == before[other], other  # one document's run touched one document

    # "Materialize all" also refreshed the unpartitioned strategy_stats (from the store, not the run).
    stats_page = open_strategy_stats(browser, ui, screenshots)
    # Its table's row for the strategy: chunks, then documents, as stored.
    stored = read_when_unlocked(lambda: chunk_counts(ui.db_path), "the database for the statistics")
    assert re.search(rf"\b{STRATEGY}\s+{sum(stored.values())}\s+{len(stored)}\b", stats_page), stats_page

    if os.environ.get("CHUNKYARD_UPDATE_README_SCREENSHOTS") == "1":
        README_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for name in ("lineage.png", "strategy-stats.png"):
            shutil.copyfile(screenshots / name, README_SCREENSHOTS / name)
