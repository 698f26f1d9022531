"""deploy/hosts.py: hosts as network namespaces, and reading PostgreSQL's connection log.

The namespace test needs root (CAP_NET_ADMIN) and takes about a second; CI runs as root,
so there it must run (CI=true turns the skip into a failure).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from cluster_checks import postgres_sessions
from deploy.hosts import SERVER_NAMES, HostNetwork, hosts_unavailable_reason


def test_postgres_sessions_pairs_each_backend_address_with_its_database():
    log = "\n".join([
        "2026-11-24 23:22:21.020 UTC [2854] LOG:  connection received: host=[local]",
        "2026-11-24 23:22:21.022 UTC [2854] LOG:  connection authorized: user=postgres database=postgres application_name=psql",
        "2026-11-24 23:22:30.100 UTC [3001] LOG:  connection received: host=10.231.7.11 port=40100",
        "2026-11-24 23:22:30.101 UTC [3002] LOG:  connection received: host=10.231.7.12 port=40200",
        # Interleaved: each authorization belongs to its own backend's address.
        "2026-11-24 23:22:30.110 UTC [3002] LOG:  connection authorized: user=postgres database=celery",
        "2026-11-24 23:22:30.111 UTC [3001] LOG:  connection authorized: user=postgres database=chunkyard",
        "2026-11-24 23:22:31.000 UTC [3003] LOG:  connection received: host=10.231.7.11 port=40101",
        "2026-11-24 23:22:31.001 UTC [3003] FATAL:  password authentication failed for user \"postgres\"",
        "2026-11-24 23:22:32.000 UTC [3004] LOG:  connection received: host=10.231.7.11 port=40102",
        "2026-11-24 23:22:32.010 UTC [3004] LOG:  connection authorized: user=postgres database=dagster",
    ])
    assert postgres_sessions(log) == {
        "[local]": {"postgres"},
        "10.231.7.11": {"chunkyard", "dagster"},  # the refused connection adds nothing
        "10.231.7.12": {"celery"},
    }


def test_host_names_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        HostNetwork(["worker-1", "worker-1"])
    with pytest.raises(ValueError, match="at least one"):
        HostNetwork([])


def test_hosts_name_the_missing_tool_and_its_package(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "mount" else f"/usr/bin/{tool}")
    assert hosts_unavailable_reason() == "hosts need 'mount' on PATH (Debian package: mount)"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "hosts need root" in hosts_unavailable_reason()


def _on_host(network: HostNetwork, name: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(network.prefix(name) + [sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_a_host_reaches_the_server_by_name_over_its_own_address_and_sees_only_its_own_folder(tmp_path):
    unavailable = hosts_unavailable_reason()
    if unavailable:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root and must test hosts: {unavailable}")
        pytest.skip(unavailable)
    # A listener on this machine's loopback: what a host must NOT reach (its loopback is its own).
    local = socket.socket()
    local.bind(("127.0.0.1", 0))
    local.listen()
    local_port = local.getsockname()[1]
    # The cluster's folder: the server's files, and a folder per host.
    private = tmp_path / "cluster"
    (private / "pg").mkdir(parents=True)
    (private / "pg" / "socket").write_text("the server's")
    for name in ("worker-1", "client"):
        (private / "hosts" / name).mkdir(parents=True)
        (private / "hosts" / name / "mine").write_text(name)
    with HostNetwork(["worker-1", "client"], private_root=private) as network:
        server = socket.socket()
        server.bind((network.server_address, 0))
        server.listen()
        port = server.getsockname()[1]
        peers: list[str] = []

        def serve() -> None:
            for _ in range(2):
                connection, (address, _) = server.accept()
                peers.append(address)
                connection.sendall(b"ok")
                connection.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        for name in ("worker-1", "client"):
            answer = _on_host(network, name, (
                "import socket\n"
                f"print(socket.gethostname(), *(socket.gethostbyname(n) for n in {SERVER_NAMES!r}))\n"
                f"print(socket.create_connection(('db', {port}), timeout=5).recv(2).decode())\n"
                "try:\n"
                f"    socket.create_connection(('127.0.0.1', {local_port}), timeout=2); print('loopback reached')\n"
                "except OSError:\n"
                "    print('loopback refused')\n"
                "import os\n"
                f"print(sorted(os.listdir({str(private)!r})), sorted(os.listdir({str(private / 'hosts')!r})))\n"
                f"print(open({str(private / 'hosts' / name / 'mine')!r}).read())\n"
                f"open({str(private / 'hosts' / name / 'written')!r}, 'w').write('by ' + {name!r})\n"))
            assert answer.returncode == 0, answer.stderr
            lines = answer.stdout.split("\n")
            assert lines[0].split() == [name] + [network.server_address] * len(SERVER_NAMES)
            assert lines[1:3] == ["ok", "loopback refused"]
            # The server's folder and the other host's are out of sight; its own is there, writable.
            assert lines[3] == f"['hosts'] [{name!r}]"
            assert lines[4] == name
            assert (private / "hosts" / name / "written").read_text() == f"by {name}"
        thread.join(timeout=10)
        assert sorted(peers) == sorted(network.address(n) for n in ("worker-1", "client"))
        assert socket.gethostname() not in ("worker-1", "client")  # the name changed on the host only
        namespaces = [network.namespace(n) for n in network.names]
        bridge = network.bridge
    local.close()
    server.close()
    # Without a private root a host has its own network and name, and this machine's disk.
    with HostNetwork(["solo"]) as network:
        answer = _on_host(network, "solo", f"import socket, os; print(socket.gethostname()); "
                                            f"print(sorted(os.listdir({str(private)!r})))")
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.splitlines() == ["solo", repr(sorted(os.listdir(private)))]  # pg/ is in sight
        namespaces.append(network.namespace("solo"))
    assert not any(ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
                   for ns in namespaces)
    assert bridge not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(os.path.exists(f"/etc/netns/{ns}") for ns in namespaces)
