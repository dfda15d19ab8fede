"""A real gpumesh network for the client's tests: a renter and a provider
(two declared A100s, the sandboxed process executor) on loopback, in a
temporary directory, started once per test session.

The daemon binary is $GPUMESH_BIN when set (the Go test that runs these
tests builds it), else it is built with `go build` from this checkout, else
bin/gpumesh is used.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # the package without installing it

from gpumesh import Client, GpumeshError  # noqa: E402


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(tmp: Path) -> str:
    b = os.environ.get("GPUMESH_BIN")
    if b:
        if not os.access(b, os.X_OK):
            pytest.fail(f"GPUMESH_BIN={b} is not an executable")
        return b
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go:
        out = tmp / "gpumesh"
        env = dict(os.environ, CGO_CFLAGS="-Wno-deprecated-declarations", GOFLAGS="-buildvcs=false")
        r = subprocess.run([go, "build", "-o", str(out), "./cmd/gpumesh"], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"go build ./cmd/gpumesh failed:\n{r.stderr}")
        return str(out)
    b = ROOT / "bin" / "gpumesh"
    if os.access(b, os.X_OK):
        return str(b)
    pytest.fail("no gpumesh binary: set GPUMESH_BIN, install Go, or run `make build`")


class Net:
    """The running network: its binary, the renter's and provider's data dirs."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.bin = _binary(tmp)
        self.procs = []
        self.renter_dir = tmp / "renter"
        self.provider_dir = tmp / "provider"

    def start(self, name: str, config: str, *args: str) -> Client:
        d = self.tmp / name
        d.mkdir(mode=0o700)
        (d / "config.yaml").write_text(config)
        log = open(d / "daemon.log", "wb")
        p = subprocess.Popen([self.bin, "-d", str(d), "daemon", *args], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append((name, p))
        c = Client(data_dir=d, timeout=60)
        deadline = time.monotonic() + 30
        while True:
            if p.poll() is not None:
                pytest.fail(f"{name} daemon exited with {p.returncode}:\n{self.log(name)}")
            try:
                c.version()
                return c
            except GpumeshError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{name} daemon did not answer within 30 s:\n{self.log(name)}")
            time.sleep(0.1)

    def log(self, name: str) -> str:
        try:
            return (self.tmp / name / "daemon.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        # One at a time, the last started first: a provider drains on
        # SIGTERM, and its final report of a lease it hands back goes to
        # the renter, which must still be up to take it (stopped together,
        # the provider retried until killed 15 s later).
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="session")
def net():
    """A renter and a provider with two declared A100 40GB, connected, the
    provider discoverable by the renter."""
    # A short path: the daemons' unix sockets must fit in 108 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="gm-py-"))
    os.chmod(tmp, 0o755)  # job uids traverse to their work dirs
    n = Net(tmp)
    try:
        rport, pport = _free_port(), _free_port()
        n.renter = n.start("renter", f"""region: eu-west
listen: [/ip4/127.0.0.1/tcp/{rport}]
log_level: info
provider:
  heartbeat_interval: 1s
""")
        boot = f"/ip4/127.0.0.1/tcp/{rport}/p2p/{n.renter.status().peer_id}"
        n.provider = n.start("provider", f"""region: eu-west
listen: [/ip4/127.0.0.1/tcp/{pport}]
log_level: info
provider:
  enabled: true
  gpu_source: declared
  executor: process
  heartbeat_interval: 1s
  advertise_ttl: 1m
  gpus:
    - {{model: A100, vram_gb: 40}}
    - {{model: A100, vram_gb: 40}}
  policy:
    price_floor: 0.50
    accept_preemptible: true
    no_persist: offer
""", "--bootstrap", boot)
        n.provider_id = n.provider.status().peer_id
        deadline = time.monotonic() + 60
        while not any(p.peer == n.provider_id for p in n.renter.providers(gpu="A100")):
            if time.monotonic() > deadline:
                pytest.fail("the renter did not discover the provider within 60 s:\n" + n.log("provider"))
            time.sleep(0.2)
        yield n
    finally:
        n.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def renter(net) -> Client:
    return net.renter
