"""Documents/s and chunks/s at 1 and 2 concurrent runs, at 1x and 10x corpus size, with the
CPU seconds each configuration spent and where.

Run (about 8 min on a quiet 2-core machine for 10x; HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1):
``.venv/bin/python bench/bench_scale.py --multiples 10 --catalog-writes 0``
Options: ``[--corpus examples/docs] [--multiples 1,10] [--runs 1,2] [--threads auto,1]
[--store ducklake|duckdb] [--catalog-writes N]``.

What one measurement is: a fresh store and the N-times corpus (every file copied N times
under distinct names, ``copy00/...``; each copy's paragraphs end with their copy number, so
a copy's chunks are new text and the embedding cache cannot serve them from another copy).
The documents are registered as partitions of a fresh Dagster instance (deploy/dagster.yaml,
its own database in the PostgreSQL of deploy/local_cluster.py) and split into R contiguous ranges; R processes start at
once, each executing its range as range runs of at most 25 documents (the CLI's and the
backfill policy's batch), in process. The time is the wall time from starting the R
processes to the last one's exit: imports and the model's load in every run are part of
what a run costs. "1 run" is the same documents in one process.

Threads: each configuration is measured with every ``--threads`` value of chunkyard's
``embedding_threads`` setting (CHUNKYARD_EMBEDDING_THREADS; ``auto`` = cores / R, since the
instance's CHUNKYARD_MAX_CONCURRENT_RUNS is set to R), skipping values that resolve to a
thread count already measured for that R. The target ratio compares 2 runs with 1 run at
its best (fastest) thread count; the ratio to 1 run held to one thread is printed apart.

CPU: the range processes' CPU seconds (getrusage of the waited children, their parser
subprocesses included), the cluster PostgreSQL's (postmaster and backends, /proc), cores busy
= CPU s / wall s, and the machine's busy cores meanwhile (/proc/stat, other work included).
Inside each range process a CpuMeter splits its CPU by category (model load, embed, chunk,
store reads/writes, stage_costs, Dagster's event writes, the rest); PostgreSQL's is split by
database (Dagster's storage or the lake's catalog) and its sessions counted.

Every throughput figure is a ratio to the first configuration of the same invocation, beside
the load average. ``--store`` selects the store mode: every measurement gets a fresh lake
(its own catalog database and data folder), or a fresh DuckDB file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT_SUFFIXES = {".md", ".txt", ".markdown", ".rst"}
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
STAGES = ("read", "parse", "chunk", "embed")
PER_RUN = 25  # documents per range run: the CLI's and the backfill policy's batch


def range_batches(keys: list, per_run: int) -> list[list]:
    """``keys`` as the consecutive range runs of at most ``per_run`` that one process executes in turn."""
    return [keys[i:i + per_run] for i in range(0, len(keys), per_run)]


def distinct_copy(text: str, copy: int) -> str:
    """``text`` with " (copy N)" closing every paragraph that ends in a word character.

    Invariant: the paragraph structure (blank lines, headings, table rows, code fences) is
    unchanged; only paragraphs ending in prose gain the marker, so most chunks of one copy
    differ from every other copy's and the embedding cache does not serve them.
    """
    paragraphs = re.split(r"(\n\s*\n)", text)
    for index in range(0, len(paragraphs), 2):
        paragraph = paragraphs[index]
        if re.search(r"\w[.!?。]?$", paragraph) and not paragraph.lstrip().startswith(("|", "```", "<")):
            paragraphs[index] = paragraph + f" (copy {copy})"
    return "".join(paragraphs)


def make_corpus(source: Path, multiple: int, dest: Path) -> int:
    """Copy every file of ``source`` ``multiple`` times under ``dest/copyNN/``; returns files written."""
    written = 0
    files = sorted(p for p in source.rglob("*") if p.is_file())
    for copy in range(multiple):
        for path in files:
            target = dest / f"copy{copy:02d}" / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix.lower() in TEXT_SUFFIXES:
                try:
                    target.write_text(distinct_copy(path.read_text(encoding="utf-8"), copy), encoding="utf-8")
                    written += 1
                    continue
                except UnicodeDecodeError:
                    pass
            shutil.copyfile(path, target)
            written += 1
    return written


def split_ranges(keys: list[str], parts: int) -> list[list[str]]:
    """``keys`` in ``parts`` contiguous slices whose sizes differ by at most one (none empty)."""
    parts = max(1, min(parts, len(keys)))
    size, extra = divmod(len(keys), parts)
    out, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        out.append(keys[start:end])
        start = end
    return out


# -- subprocess modes (the environment names the corpus, store and instance) -------------
def register() -> None:
    """Register the corpus's documents as partitions; claim the store; print the keys in order."""
    from dagster import DagsterInstance

    from assets.partitions import DOCUMENTS_PARTITIONS_NAME
    from orchestration import definitions

    folder = definitions.defs.resources["documents"]
    store = definitions.defs.resources["store"].store()
    store.initialize()
    store.claim_source_root(folder.root_path)
    keys = sorted(folder.scan())
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME, keys)
        ordered = [k for k in instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME) if k in set(keys)]
    print(json.dumps(ordered))


class CpuMeter:
    """Exclusive CPU seconds (``time.process_time``: every thread of the process, so torch's
    intra-op threads count inside ``embed``) per category of work, by wrapping the functions
    that do it. A wrapped call nested in another (the semantic chunker embedding its
    sentences) counts for the inner category only; what no category claims is the rest of
    the run (Dagster's execution, checks, metadata, connecting to the store).
    Only the main thread is metered (the in-process executor runs every step there)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list[float]] = []  # [started, seconds claimed by nested calls]

    def wrap(self, owner, name: str, category: str) -> None:
        import functools
        import threading

        inner = getattr(owner, name)
        meter = self

        @functools.wraps(inner)
        def metered(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return inner(*args, **kwargs)
            frame = [time.process_time(), 0.0]
            meter._stack.append(frame)
            try:
                return inner(*args, **kwargs)
            finally:
                meter._stack.pop()
                spent = time.process_time() - frame[0]
                meter.seconds[category] = meter.seconds.get(category, 0.0) + spent - frame[1]
                meter.calls[category] = meter.calls.get(category, 0) + 1
                if meter._stack:
                    meter._stack[-1][1] += spent

        setattr(owner, name, metered)


CPU_CATEGORIES = ("start", "model load", "embed", "chunk", "parse", "parse worker", "store read", "store write",
                  "stage_costs", "dagster events", "rest of run", "pg catalog", "pg dagster", "pg other")


def install_meter(definitions) -> CpuMeter:
    """Wrap what a range run spends CPU on (see CpuMeter), in this process only."""
    from dagster import DagsterInstance

    import assets.documents
    import resources.embedding
    import resources.store
    from chunking.embedding import SentenceTransformerEmbedder
    from resources.store import ChunkStore

    meter = CpuMeter()
    meter.wrap(resources.embedding, "_load", "model load")
    meter.wrap(SentenceTransformerEmbedder, "embed", "embed")
    meter.wrap(assets.documents, "parse_in_worker", "parse")
    for name in ("load_parsed_of", "documents_of", "load_chunks_of", "cached_embeddings", "load_embeddings_of",
                 "document_hashes", "source_root"):
        meter.wrap(ChunkStore, name, "store read")
    meter.wrap(ChunkStore, "write_documents", "store write")
    meter.wrap(ChunkStore, "record_stage_costs", "stage_costs")
    meter.wrap(DagsterInstance, "handle_new_event", "dagster events")
    # A lost commit conflict re-runs the step's whole write transaction: work only concurrent runs do.
    conflict_test = resources.store.is_write_conflict

    def counted_conflict(exc: BaseException) -> bool:
        lost = conflict_test(exc)
        meter.calls["commit conflicts"] = meter.calls.get("commit conflicts", 0) + int(lost)
        return lost

    resources.store.is_write_conflict = counted_conflict
    specs = {id(i.spec): i.spec for i in definitions.load_settings().strategy_instances()}
    for spec in specs.values():  # the registry's spec objects: the assets call spec.chunk at run time
        object.__setattr__(spec, "chunk", _metered_function(meter, spec.chunk, "chunk"))
    return meter


def _metered_function(meter: CpuMeter, function, category: str):
    holder = type("Holder", (), {"f": staticmethod(function)})
    meter.wrap(holder, "f", category)
    return holder.f


def run_ranges(keys: list[str], per_run: int) -> dict:
    """Execute ``keys`` (contiguous partitions) as range runs of at most ``per_run``, in order.

    Returns what it cost: failed runs, CPU seconds per category (CpuMeter; ``start`` is the
    interpreter, the imports and building the definitions, ``parse worker`` the parser
    subprocesses), and the torch threads the embedder ran on."""
    import resource

    from dagster import DagsterInstance, execute_job, reconstructable

    from orchestration import definitions

    meter = install_meter(definitions)
    start_cpu = time.process_time()
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    failed = 0
    with DagsterInstance.get() as instance:
        for batch in range_batches(keys, per_run):
            result = execute_job(reconstructable(definitions.ingest_job), instance=instance,
                                 tags={RANGE_START: batch[0], RANGE_END: batch[-1]},
                                 run_config=quiet, raise_on_error=False)
            failed += not result.success
    total = time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"start": start_cpu, **meter.seconds,
           "parse worker": children.ru_utime + children.ru_stime}
    cpu["rest of run"] = total - start_cpu - sum(meter.seconds.values())
    import torch

    return {"failed": failed, "cpu": cpu, "calls": meter.calls, "torch_threads": torch.get_num_threads()}


def stage_of(step_key: str) -> str:
    """The pipeline stage a step belongs to: read, parse, chunk or embed (embed includes its write)."""
    if step_key.startswith("raw_documents"):
        return "read"
    if step_key.startswith("parsed_documents"):
        return "parse"
    return "chunk" if step_key.startswith("chunks_") else "embed"


def summarize() -> None:
    """Documents and chunks stored, and the seconds every run's steps took, summed per stage."""
    from dagster import DagsterInstance

    from orchestration import definitions

    store = definitions.defs.resources["store"].store()
    with store.connect(read_only=True) as con:
        documents, chunks = con.execute(
            "SELECT (SELECT count(*) FROM documents WHERE status = 'parsed'), (SELECT count(*) FROM current_chunks)"
        ).fetchone()
    stages: dict[str, float] = {}
    with DagsterInstance.get() as instance:
        for run in instance.get_runs():
            for stat in instance.get_run_step_stats(run.run_id):
                if stat.start_time and stat.end_time:
                    stage = stage_of(stat.step_key)
                    stages[stage] = stages.get(stage, 0.0) + stat.end_time - stat.start_time
    print(json.dumps({"documents": documents, "chunks": chunks, "stages": stages}))


def write_commits(prefix: str, count: int, chunks_per_write: int) -> None:
    """``count`` chunk writes (one per-document transaction each, as a chunks step makes) into
    the store the environment names; prints the seconds they took."""
    from chunking.model import Chunk
    from orchestration import definitions

    store = definitions.defs.resources["store"].store()
    text = "A sentence of a chunk that the catalog bench writes. " * 8
    chunks = [Chunk(text=f"{prefix} {i} {text}", char_start=i * 500, char_end=i * 500 + 450, token_count=90)
              for i in range(chunks_per_write)]
    started = time.monotonic()
    for index in range(count):
        store.replace_chunks(f"{prefix}/doc{index}", "bench", chunks, config_hash="bench", doc_sha256="bench")
    print(json.dumps({"seconds": time.monotonic() - started}))


def measure_commits(cluster, work: Path, writers: int, count: int, chunks_per_write: int) -> float:
    """Committed per-document writes per second with ``writers`` processes writing one fresh lake at once."""
    env = dict(cluster.env, CHUNKYARD_DOCS=str(work), CHUNKYARD_EXECUTOR="in_process",
               CHUNKYARD_DB=str(work / f"commits-{writers}" / "chunkyard.duckdb"))
    env.update(cluster.lake_env(f"lake_commits_{writers}"))
    _python(["--init-store"], env, check=True)  # the lake's tables exist before the writers race
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--write-commits", f"w{w}",
                               "--commits", str(count), "--chunks-per-write", str(chunks_per_write)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(writers)]
    seconds = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"commit bench writer failed:\n{err[-3000:]}")
        seconds.append(json.loads(out.strip().splitlines()[-1])["seconds"])
    # Each writer times its own writes (not its start-up); the slowest one bounds the batch.
    return writers * count / max(seconds)


# -- the driver -----------------------------------------------------------------------------
@dataclass
class Measurement:
    multiple: int
    runs: int
    threads: str  # embedding_threads of every run: "auto" or a number
    torch_threads: list[int]  # what each run's torch ran on
    documents: int
    chunks: int
    seconds: float
    load_before: float
    load_after: float
    stage_seconds: dict[str, float]  # step time summed per stage over every run (stage_of)
    run_cpu: float  # CPU seconds of the R run processes and their parser subprocesses
    postgres_cpu: float  # CPU seconds of the cluster's PostgreSQL meanwhile (Dagster storage, lake catalog)
    machine_busy: float  # cores busy on the whole machine meanwhile (/proc/stat), other work included
    cpu_by_category: dict[str, float]  # summed over the runs (CpuMeter), and PostgreSQL's (PostgresSampler)
    commit_conflicts: int  # write transactions re-run after losing a commit conflict, over every run

    @property
    def docs_per_s(self) -> float:
        return self.documents / self.seconds

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu(self) -> float:
        return self.run_cpu + self.postgres_cpu

    @property
    def cores_busy(self) -> float:
        """This configuration's own cores busy: its CPU seconds over its wall seconds."""
        return self.cpu / self.seconds

    @property
    def label(self) -> str:
        return f"{self.multiple}x {self.runs} run{'s' if self.runs > 1 else ''}, {self.thread_label}"

    @property
    def thread_label(self) -> str:
        used = "/".join(str(t) for t in sorted(set(self.torch_threads)))
        return f"threads {self.threads} ({used} each)" if self.threads == "auto" else f"threads {used} each"


def _python(mode: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), *mode], cwd=ROOT, env=env,
                          text=True, capture_output=True, **kwargs)


def children_cpu() -> float:
    """CPU seconds of this process's waited-for children (and theirs), so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``, its finished children it waited for, and its live children (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(proc: Path) -> list[str]:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()

    own = fields(Path(f"/proc/{pid}"))
    total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = fields(proc)
            except OSError:
                continue
            if int(stat[1]) == pid:  # ppid: a live backend
                total += int(stat[11]) + int(stat[12])
    return total / tick


class PostgresSampler:
    """CPU seconds of the cluster's PostgreSQL backends per database, sampled from /proc every
    ``interval`` s while a measurement runs: a backend's last sample counts after it exits
    (so up to ``interval`` of each backend's CPU may be missed). Databases named ``lake_*``
    are the lake's catalog, ``dagster_*`` Dagster's run and event storage."""

    def __init__(self, postmaster_pid: int, interval: float = 0.5) -> None:
        import threading

        self.pid, self.interval = postmaster_pid, interval
        self.first: dict[int, float] = {}  # backend pid -> CPU when first seen
        self.last: dict[int, tuple[str, float]] = {}  # backend pid -> (database, CPU at its last sample)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PostgresSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) != self.pid:
                    continue
                title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split()
            except OSError:
                continue
            cpu = (int(stat[11]) + int(stat[12])) / tick
            # "postgres: postgres <database> [local] idle": a backend; other children are the server's own.
            database = title[2] if len(title) > 2 and title[0] == "postgres:" and "[local]" in title else "server"
            pid = int(proc.name)
            self.first.setdefault(pid, cpu)
            self.last[pid] = (database, cpu)

    def by_kind(self) -> dict[str, float]:
        """CPU seconds used meanwhile: ``catalog`` (lake_*), ``dagster`` (dagster_*), ``other``."""
        out = {"catalog": 0.0, "dagster": 0.0, "other": 0.0}
        for pid, (database, cpu) in self.last.items():
            kind = "catalog" if database.startswith("lake") else "dagster" if database.startswith("dagster") else "other"
            out[kind] += cpu - self.first[pid]
        return out


def postgres_sessions(cluster) -> dict[str, int]:
    """Sessions (connections) each kind of database has had since the server started
    (pg_stat_database.sessions): ``catalog`` (lake_*), ``dagster`` (dagster_*)."""
    out = {"catalog": 0, "dagster": 0}
    text = cluster.server.psql("SELECT datname, sessions FROM pg_stat_database WHERE datname IS NOT NULL;")
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 2 and parts[1].isdigit():
            kind = "catalog" if parts[0].startswith("lake") else "dagster" if parts[0].startswith("dagster") else None
            if kind:
                out[kind] += int(parts[1])
    return out


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot (/proc/stat's first line)."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def measure(cluster, work: Path, corpus: Path, multiple: int, runs: int,
            per_run: int, lake: bool, threads: str = "auto") -> Measurement:
    docs = work / f"docs-{multiple}x"
    if not docs.exists():
        make_corpus(corpus, multiple, docs)
    label = f"{multiple}x-{runs}run-{threads}"
    # A Dagster instance of its own (runs, partitions) in the cluster's PostgreSQL.
    database = f"dagster_{multiple}x_{runs}run_{threads}"
    cluster.create_database(database)
    env = dict(cluster.env, CHUNKYARD_DOCS=str(docs), CHUNKYARD_DB=str(work / f"store-{label}" / "chunkyard.duckdb"),
               CHUNKYARD_DAGSTER_PG_URL=cluster.postgres_url(database, "postgresql+psycopg2"),
               CHUNKYARD_EXECUTOR="in_process", TQDM_DISABLE="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error",
               # The instance lets R runs run at once, and embedding_threads (auto: cores / R in
               # lake mode) is chunkyard's own setting, not OMP_NUM_THREADS.
               CHUNKYARD_MAX_CONCURRENT_RUNS=str(runs), CHUNKYARD_EMBEDDING_THREADS=threads)
    env.pop("OMP_NUM_THREADS", None)
    # A DAGSTER_HOME of its own too: each measurement writes a database of its own, and an instance's
    # folder is claimed by the first database a run writes (resources.ownership).
    home = work / f"dagster-{label}"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(cluster.env["DAGSTER_HOME"]) / "dagster.yaml", home / "dagster.yaml")
    env["DAGSTER_HOME"] = str(home)
    if lake:
        # A fresh, empty lake: its catalog database in the cluster's PostgreSQL, its own data folder.
        env.update(cluster.lake_env(f"lake_{multiple}x_{runs}run_{threads}"))
    else:
        for variable in ("CHUNKYARD_STORE_MODE", "CHUNKYARD_STORE_CATALOG", "CHUNKYARD_STORE_DATA_PATH"):
            env.pop(variable, None)
        env["CHUNKYARD_STORE_MODE"] = "duckdb"
    registered = _python(["--register"], env, check=True)
    keys = json.loads(registered.stdout.strip().splitlines()[-1])
    ranges = split_ranges(keys, runs)
    postgres_pid = cluster.server.get_postmaster_info().pid
    load_before = os.getloadavg()[0]
    cpu_before, postgres_before, busy_before = children_cpu(), process_tree_cpu(postgres_pid), machine_busy_ticks()
    sessions_before = postgres_sessions(cluster)
    started = time.monotonic()
    with PostgresSampler(postgres_pid) as sampler:
        procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-range", json.dumps(r),
                                   "--per-run", str(per_run)], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in ranges]
        outputs = [proc.communicate() for proc in procs]
        seconds = time.monotonic() - started
    run_cpu, postgres_cpu, busy_after = (children_cpu() - cpu_before, process_tree_cpu(postgres_pid) - postgres_before,
                                         machine_busy_ticks())
    load_after = os.getloadavg()[0]
    for proc, (out, err) in zip(procs, outputs):
        if proc.returncode != 0:
            raise SystemExit(f"{label}: a range process failed ({proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    by_category: dict[str, float] = {}
    for report in reports:
        for category, cpu in report["cpu"].items():
            by_category[category] = by_category.get(category, 0.0) + cpu
    by_category.update({f"pg {kind}": cpu for kind, cpu in sampler.by_kind().items()})
    conflicts = sum(report["calls"].get("commit conflicts", 0) for report in reports)
    sessions = {kind: count - sessions_before[kind] for kind, count in postgres_sessions(cluster).items()}
    print(f"  PostgreSQL sessions opened: {sessions}; calls: "
          + ", ".join(f"{k} {sum(r['calls'].get(k, 0) for r in reports)}" for k in reports[0]["calls"]), flush=True)
    counted = json.loads(_python(["--count"], env, check=True).stdout.strip().splitlines()[-1])
    if counted["documents"] != len(keys):
        raise SystemExit(f"{label}: {counted['documents']} of {len(keys)} documents parsed")
    busy = (busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1]) * (os.cpu_count() or 1)
    return Measurement(multiple, runs, threads, [r["torch_threads"] for r in reports], counted["documents"],
                       counted["chunks"], seconds, load_before, load_after, counted["stages"], run_cpu, postgres_cpu,
                       busy, by_category, conflicts)


def print_table(measurements: list[Measurement]) -> None:
    base = measurements[0]
    print(f"\n{'configuration':<34} {'docs':>5} {'chunks':>7} {'wall s':>7} {'CPU s':>7} {'runs CPU':>8} "
          f"{'pg CPU':>7} {'cores busy':>10} {'machine':>7} {'docs/s':>7} {'chunks/s':>8} {'docs/s ratio':>12} "
          f"{'load before/after':>17}")
    for m in measurements:
        print(f"{m.label:<34} {m.documents:>5} {m.chunks:>7} {m.seconds:>7.1f} {m.cpu:>7.1f} {m.run_cpu:>8.1f} "
              f"{m.postgres_cpu:>7.1f} {m.cores_busy:>10.2f} {m.machine_busy:>7.2f} {m.docs_per_s:>7.2f} "
              f"{m.chunks_per_s:>8.1f} {m.docs_per_s / base.docs_per_s:>12.2f} "
              f"{m.load_before:>8.2f}/{m.load_after:<8.2f}")
    print(f"(CPU s = runs CPU (range processes + parser subprocesses) + pg CPU (the cluster's PostgreSQL: "
          f"Dagster's storage and the lake's catalog); cores busy = CPU s / wall s; machine = every core's "
          f"busy time meanwhile, other work included; docs/s ratio: to the first row)")
    for multiple in sorted({m.multiple for m in measurements}):
        ones = [m for m in measurements if m.multiple == multiple and m.runs == 1]
        twos = [m for m in measurements if m.multiple == multiple and m.runs == 2]
        if not ones or not twos:
            continue
        best_one = min(ones, key=lambda m: m.seconds)
        two = next((m for m in twos if m.threads == "auto"), twos[0])
        print(f"{multiple}x: 2 concurrent runs ({two.thread_label}) / 1 run at its best thread count "
              f"({best_one.thread_label}) = {two.seconds / best_one.seconds:.2f} (target <= 0.6); "
              f"CPU s {two.cpu:.0f} / {best_one.cpu:.0f}, cores busy {two.cores_busy:.2f} / {best_one.cores_busy:.2f}")
        single = [m for m in ones if set(m.torch_threads) == {1}]
        if single and single[0] is not best_one:
            one = single[0]
            print(f"{multiple}x: NOT the target's baseline: 2 runs / 1 run held to one torch thread "
                  f"({one.seconds:.1f} s) = {two.seconds / one.seconds:.2f}")
    print("\nCPU seconds per category, summed over the configuration's run processes (bench CpuMeter: exclusive, "
          "every thread of the process):")
    categories = [c for c in CPU_CATEGORIES if any(c in m.cpu_by_category for m in measurements)]
    print(f"{'configuration':<34} " + " ".join(f"{c:>{max(7, len(c))}}" for c in categories)
          + f" {'pg total':>8} {'conflicts':>9}")
    for m in measurements:
        print(f"{m.label:<34} " + " ".join(f"{m.cpu_by_category.get(c, 0.0):>{max(7, len(c))}.1f}" for c in categories)
              + f" {m.postgres_cpu:>8.1f} {m.commit_conflicts:>9}")
    print("(pg catalog / dagster / other: PostgreSQL backends by database, sampled every 0.5 s, so a little "
          "below pg total, which is exact; conflicts: write transactions re-run after a lost commit conflict)")
    print("\nstep seconds per document, by stage (sum of step durations / documents; embed includes its write):")
    print(f"{'configuration':<34} " + " ".join(f"{s:>7}" for s in STAGES) + f" {'steps':>7} {'wall':>7}")
    for m in measurements:
        per_doc = [m.stage_seconds.get(stage, 0.0) / m.documents for stage in STAGES]
        print(f"{m.label:<34} " + " ".join(f"{x:>7.2f}" for x in per_doc)
              + f" {sum(per_doc):>7.2f} {m.seconds / m.documents:>7.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT / "examples" / "docs"))
    parser.add_argument("--multiples", default="1,10")
    parser.add_argument("--runs", default="1,2")
    parser.add_argument("--per-run", type=int, default=PER_RUN, help="documents per range run (the CLI's batch)")
    parser.add_argument("--store", choices=("ducklake", "duckdb"), default="ducklake",
                        help="ducklake (default): a fresh lake per measurement, catalog in the cluster's "
                             "PostgreSQL; duckdb: a fresh embedded file (concurrent runs then wait on its lock)")
    parser.add_argument("--threads", default="auto,1",
                        help="embedding_threads values to measure each run count with (default auto,1: auto = "
                             "cores / concurrent runs; a value that resolves to a thread count already measured "
                             "for that run count is skipped)")
    parser.add_argument("--catalog-writes", type=int, default=100,
                        help="per-document chunk writes each of 1 and 2 writers commits to a fresh lake (0: skip)")
    parser.add_argument("--register", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--init-store", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-commits", help=argparse.SUPPRESS)
    parser.add_argument("--commits", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--chunks-per-write", type=int, default=24, help=argparse.SUPPRESS)
    parser.add_argument("--run-range", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.register:
        register()
        return 0
    if args.run_range:
        report = run_ranges(json.loads(args.run_range), args.per_run)
        print(json.dumps(report))
        return 1 if report["failed"] else 0
    if args.count:
        summarize()
        return 0
    if args.init_store:
        from orchestration import definitions

        definitions.defs.resources["store"].store().initialize()
        return 0
    if args.write_commits:
        write_commits(args.write_commits, args.commits, args.chunks_per_write)
        return 0

    from deploy.local_cluster import LocalCluster
    from resources.embedding import available_cores, resolve_threads

    multiples = [int(x) for x in args.multiples.split(",")]
    run_counts = [int(x) for x in args.runs.split(",")]
    print(f"bench_scale: store {args.store}, corpus {args.corpus}, multiples {multiples}, concurrent runs {run_counts}, "
          f"{os.cpu_count()} cores, embedding_threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    measurements = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work = Path(tmp)
        with LocalCluster(work / "cluster", workers=0, lake=False) as cluster:
            for multiple in multiples:
                for runs in run_counts:
                    resolved = set()
                    for threads in args.threads.split(","):
                        count = resolve_threads(threads, available_cores(), runs)
                        if count in resolved:
                            continue
                        resolved.add(count)
                        m = measure(cluster, work, Path(args.corpus), multiple, runs, args.per_run,
                                    args.store == "ducklake", threads)
                        print(f"  {m.label}: {m.documents} documents, {m.chunks} chunks in {m.seconds:.1f} s, "
                              f"{m.cpu:.1f} CPU s (load {m.load_before:.2f} -> {m.load_after:.2f})", flush=True)
                        measurements.append(m)
            commit_rates = {}
            if args.catalog_writes and args.store == "ducklake":
                for writers in (1, 2):
                    commit_rates[writers] = measure_commits(cluster, work, writers, args.catalog_writes, 24)
    print_table(measurements)
    for writers, rate in commit_rates.items():
        print(f"lake catalog: {rate:.1f} per-document writes/s committed with {writers} writer(s) at once "
              f"({args.catalog_writes} writes of 24 chunks each; PostgreSQL catalog, local data folder)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
