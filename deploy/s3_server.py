"""An S3-compatible object store on one machine, from a package: moto's server, no root, no network.

The lake's data files go to ``s3://<bucket>/<prefix>`` on it exactly as they would on AWS
or MinIO (DuckDB's httpfs, path-style URLs, plain http on 127.0.0.1). Used by
``deploy/local_cluster.py --s3``, tests/store and tests/deploy.

The server checks credentials like AWS does: it starts with authentication on, creates one
IAM user allowed ``s3:*`` and its access key (the only unauthenticated calls), and the
bucket with that key; a wrong key or secret is refused (HTTP 403), as a test of bad
credentials needs.

It runs in a child process of its own session that exits when its stdin closes, so it
goes when :meth:`S3Server.stop` is called, and also when the process that started it dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Iterator

try:
    from deploy.lifecycle import StartStop
except ImportError:  # run as a script: deploy/ itself is on sys.path
    from lifecycle import StartStop

# The child: moto's threaded server on the address argv[1], a port the OS picks; prints it, serves until stdin closes.
_SERVE = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address=sys.argv[1], port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
server.stop()
"""
# The calls made before authentication starts: create the user, allow it s3:*, create its key.
_SETUP_CALLS = 3
REGION = "us-east-1"


class S3Server(StartStop):
    """moto's S3 on 127.0.0.1 with one bucket and one access key; ``with S3Server() as s3: ...``.

    ``host``: the address it listens on (127.0.0.1 by default; a cluster's network address
    when other hosts reach it, deploy/hosts.py).
    """

    def __init__(self, bucket: str = "chunkyard", host: str = "127.0.0.1") -> None:
        self.bucket = bucket
        self.host = host
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.access_key_id = ""
        self.secret_access_key = ""

    @property
    def endpoint(self) -> str:
        """The ``[store] s3_endpoint`` value: scheme, host and port."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "S3Server":
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_CALLS)}
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVE, self.host], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, start_new_session=True)
        line = self.proc.stdout.readline()  # the port, once the server listens
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError("moto's S3 server did not start (is moto[server] installed? pip install -e '.[test]')")
        self.port = int(line)
        iam = self._client("iam", "setup", "setup")
        iam.create_user(UserName="chunkyard")
        iam.put_user_policy(UserName="chunkyard", PolicyName="lake", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="chunkyard")["AccessKey"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3().create_bucket(Bucket=self.bucket)
        return self

    def _client(self, service: str, key_id: str, secret: str):
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, aws_access_key_id=key_id,
                            aws_secret_access_key=secret, region_name=REGION)

    def s3(self):
        """A boto3 S3 client with the server's valid key (to look at the bucket from outside DuckDB)."""
        return self._client("s3", self.access_key_id, self.secret_access_key)

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket under ``prefix``."""
        return list(self._iter_keys(prefix))

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        for page in self.s3().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"]

    def data_path(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def store_env(self, prefix: str) -> dict[str, str]:
        """What a chunkyard process needs to keep a lake's data under ``prefix`` here: the
        ``[store]`` data path and endpoint (CHUNKYARD_STORE_*) and the credentials (AWS_*)."""
        return {
            "CHUNKYARD_STORE_DATA_PATH": self.data_path(prefix),
            "CHUNKYARD_STORE_S3_ENDPOINT": self.endpoint,  # http://: s3_use_ssl false, path-style URLs
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": REGION,
        }

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.stdin.close()  # the child stops its server and exits
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc.stdout.close()
        self.proc = None
