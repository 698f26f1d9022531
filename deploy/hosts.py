"""Several machines on this one: Linux network namespaces as hosts on a private network.

``LocalCluster(hosts=True)`` (``local_cluster.py --hosts``) runs each celery worker, and the
command it runs, on a host of its own. A host is a network namespace with one interface on
a bridge (the network), its own address, its own host name (a UTS namespace) and an
``/etc/hosts`` that names the server host ``db`` and ``objects``; its loopback has nothing
on it. The server host is this machine's own namespace, where PostgreSQL and the S3 server
listen on the bridge's address only. So a process on a host reaches the cluster's services
the way a process on another machine does: by name, over TCP, with a password, and nothing
it does can fall back to a local socket or 127.0.0.1 by accident.

With a ``private_root`` (LocalCluster passes its folder) each host also gets a mount
namespace in which that folder is empty but for the host's own ``hosts/<name>`` (its
DAGSTER_HOME and TMPDIR): PostgreSQL's data and unix socket and the other hosts' folders are
out of its sight. What the hosts still share with this machine, and a real cluster would
not: the rest of the file system (the installed code, the documents folder, CHUNKYARD_DB's
folder), the CPU and the memory.

Needs root (CAP_NET_ADMIN), iproute2's ``ip`` (``ip netns exec`` bind-mounts
``/etc/netns/<namespace>/hosts`` over ``/etc/hosts`` for the command) and util-linux's
``unshare``. :meth:`HostNetwork.stop` removes every namespace, link and file it made.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

try:
    from deploy.lifecycle import StartStop
except ImportError:  # run as a script: deploy/ itself is on sys.path
    from lifecycle import StartStop

# 10.231.<N>.0/24: N is picked per network so two clusters (or a leftover) never share one.
SUBNET_PREFIX = "10.231"
SERVER_SUFFIX = 1  # the server host (this machine's namespace): 10.231.N.1 on the bridge
FIRST_HOST_SUFFIX = 11
# What a host's /etc/hosts calls the server host: deploy/README.md's names for the database and the object store.
SERVER_NAMES = ("db", "objects")


class HostsUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, or no ``ip`` / ``unshare``)."""


def hosts_unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "hosts need root: network namespaces and a bridge need CAP_NET_ADMIN"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "mount"),
                          ("hostname", "hostname")):
        if shutil.which(tool) is None:
            return f"hosts need {tool!r} on PATH (Debian package: {package})"
    return None


def _run(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


class HostNetwork(StartStop):
    """A bridge with the server's address and one namespace per host name, each on the bridge."""

    server_names = SERVER_NAMES

    def __init__(self, names: list[str], private_root: str | os.PathLike | None = None) -> None:
        """``private_root``: a folder that a host sees empty but for its own ``<private_root>/hosts/<name>``
        (a mount namespace per command), as another machine would not see this one's disk there."""
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be distinct and at least one: {names}")
        if len(names) > 200:
            raise ValueError("at most 200 hosts on one /24")
        self.names = list(names)
        self.private_root = os.path.abspath(private_root) if private_root is not None else None
        self.subnet: int | None = None
        self._made_namespaces: list[str] = []
        self._made_links: list[str] = []
        self._made_bridge = False

    # -- addresses and names ---------------------------------------------------------
    @property
    def server_address(self) -> str:
        return f"{SUBNET_PREFIX}.{self.subnet}.{SERVER_SUFFIX}"

    @property
    def cidr(self) -> str:
        """The network (for pg_hba.conf): every host's address is in it."""
        return f"{SUBNET_PREFIX}.{self.subnet}.0/24"

    def address(self, name: str) -> str:
        return f"{SUBNET_PREFIX}.{self.subnet}.{FIRST_HOST_SUFFIX + self.names.index(name)}"

    def namespace(self, name: str) -> str:
        return f"chunkyard-{self.subnet}-{name}"

    @property
    def bridge(self) -> str:
        return f"cy{self.subnet}br"  # interface names: at most 15 characters

    def own_folder(self, name: str) -> str:
        """Host ``name``'s own folder under ``private_root``: the one part of it the host sees."""
        return os.path.join(self.private_root, "hosts", name)

    def prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command on host ``name``: in its namespace, with its host name.

        ``hostname`` inside a new UTS namespace changes the name for that command only, so a
        celery worker's ``%h`` and Dagster's records show the host it ran on. With a
        ``private_root``, a new mount namespace too: the host's own folder is bound aside (on a
        tmpfs over /mnt), an empty tmpfs covers ``private_root`` (the server's PostgreSQL data
        and unix socket, the other hosts' folders), and the own folder is bound back at its path.
        """
        flags, script, args = ["--uts"], 'hostname "$0"', [name]
        if self.private_root is not None:
            own = self.own_folder(name)
            os.makedirs(own, exist_ok=True)
            flags.append("--mount")
            script += (' && mount -t tmpfs chunkyard-aside /mnt && mkdir /mnt/own && mount --bind "$1" /mnt/own'
                       ' && mount -t tmpfs -o mode=755 chunkyard-hidden "$2" && mkdir -p "$1"'
                       ' && mount --bind /mnt/own "$1" && shift 2')
            args += [own, self.private_root]
        return ["ip", "netns", "exec", self.namespace(name), "unshare", *flags, "sh", "-c",
                script + ' && exec "$@"', *args]

    # -- lifecycle ------------------------------------------------------------------------
    def _free_subnet(self) -> int:
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        candidates = [n for n in range(1, 255)
                      if f"{SUBNET_PREFIX}.{n}." not in used and f"chunkyard-{n}-" not in namespaces]
        if not candidates:
            raise RuntimeError(f"no free {SUBNET_PREFIX}.N.0/24 network for the hosts")
        return random.choice(candidates)

    def start(self) -> "HostNetwork":
        reason = hosts_unavailable_reason()
        if reason:
            raise HostsUnavailable(reason)
        self.subnet = self._free_subnet()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _run("ip", "addr", "add", f"{self.server_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for index, name in enumerate(self.names):
            namespace = self.namespace(name)
            outer = f"cy{self.subnet}v{index}"
            _run("ip", "netns", "add", namespace)
            self._made_namespaces.append(namespace)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            self._made_links.append(outer)
            _run("ip", "link", "set", outer, "master", self.bridge)
            _run("ip", "link", "set", outer, "up")
            _run("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{self.address(name)}/24", "dev", "eth0")
            _run("ip", "netns", "exec", namespace, "ip", "link", "set", "eth0", "up")
            _run("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
            etc = f"/etc/netns/{namespace}"
            os.makedirs(etc, exist_ok=True)
            with open(f"{etc}/hosts", "w") as hosts:
                hosts.write(f"127.0.0.1\tlocalhost\n{self.address(name)}\t{name}\n"
                            f"{self.server_address}\t{' '.join(SERVER_NAMES)}\n")
        return self

    def stop(self) -> None:
        """Delete the veth pairs, the namespaces, the bridge and the /etc/netns files."""
        # A namespace's own end of a pair would go only once the kernel destroys the namespace,
        # later: deleting this end removes both now.
        for link in self._made_links:
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
        self._made_links.clear()
        for namespace in self._made_namespaces:
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
            shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)
        self._made_namespaces.clear()
        if self._made_bridge:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
            self._made_bridge = False
        try:
            os.rmdir("/etc/netns")  # only when no other network left files there
        except OSError:
            pass
