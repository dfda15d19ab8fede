"""The Python client against a real renter and provider (conftest.net)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gpumesh import Client, DaemonNotRunning, GpumeshError, JobFailed, JobView, manifest_hash

ROOT = Path(__file__).resolve().parent.parent.parent

TASK = """\
name: py-hello
resources:
  accelerators: A100:2
  region: eu
envs:
  GREETING: hello from a task
  STEPS: 3
setup: |
  echo "setup on $CUDA_VISIBLE_DEVICES"
run: |
  i=1
  while [ $i -le $STEPS ]; do echo "step $i: $GREETING"; i=$((i+1)); done
  mkdir -p out/sub
  printf 'result %s\\n' "$STEPS" > out/result.txt
  printf 'nested' > out/sub/n.txt
outputs: out
tier: silver
max_price: 2.0
duration: 2m
max_attempts: 2
"""


@pytest.fixture(scope="module")
def hello(net, tmp_path_factory):
    """The task above, posted from a file, its logs followed to the end."""
    p = tmp_path_factory.mktemp("task") / "hello.yaml"
    p.write_text(TASK)
    v = net.renter.post(p)
    lines = list(net.renter.logs(v.id, follow=True))
    final = net.renter.wait(v.id, timeout=60)
    return v, lines, final


def test_post_task_file_leases_it_to_the_provider(net, hello):
    v, _, _ = hello
    assert v.state == "leased", v.outcome()
    assert v.id.startswith("py-hello-")
    assert v.lease is not None and v.lease.provider == net.provider_id
    assert v.lease.gpu_count == 2 and v.lease.price <= 2.0
    assert v.job.gpu_models == ["A100"] and v.job.region == "eu" and v.job.max_attempts == 2
    assert v.job.env == {"GREETING": "hello from a task", "STEPS": "3"}


def test_follow_logs_streams_setup_then_run_until_the_end(hello):
    _, lines, _ = hello
    text = "".join(lines)
    want = ["setup on 0,1\n", "step 1: hello from a task\n", "step 2: hello from a task\n",
            "step 3: hello from a task\n"]
    got = [l for l in lines if l.startswith(("setup on", "step "))]
    assert got == want, text


def test_status_after_the_run(net, hello):
    v, _, final = hello
    assert final.done and final.succeeded, final.outcome()
    assert final.exit_code == 0
    assert final.state in ("leased", "finished")
    # The view is the same through job() and jobs().
    assert net.renter.job(v.id).run == "succeeded"
    assert v.id in [j.id for j in net.renter.jobs()]


def test_fetch_outputs_checked_against_the_receipt(net, hello, tmp_path):
    v, _, _ = hello
    # fetch waits for the receipt, which settles shortly after the run.
    files = net.renter.fetch(v.id, tmp_path / "o")
    assert sorted(f.path for f in files) == ["result.txt", "sub/n.txt"]
    assert (tmp_path / "o" / "result.txt").read_text() == "result 3\n"
    assert (tmp_path / "o" / "sub" / "n.txt").read_text() == "nested"
    for f in files:
        assert hashlib.sha256((tmp_path / "o" / f.path).read_bytes()).hexdigest() == f.sha256
    assert manifest_hash(files) == net.renter.job(v.id).raw["receipt"]["result_hash"]
    # No overwriting without force; nothing half-written.
    with pytest.raises(GpumeshError, match="already exists in the destination"):
        net.renter.fetch(v.id, tmp_path / "o")
    (tmp_path / "o" / "result.txt").write_text("changed")
    net.renter.fetch(v.id, tmp_path / "o", force=True)
    assert (tmp_path / "o" / "result.txt").read_text() == "result 3\n"
    assert [p.name for p in (tmp_path / "o").iterdir() if p.name.startswith(".gpumesh-fetch-")] == []


def test_post_dict_failing_job(renter):
    v = renter.post({
        "resources": {"accelerators": "A100:1"},
        "run": "echo about to fail; exit 3",
        "max_price": 1.5,
        "duration": "1m",
    })
    assert v.state == "leased", v.outcome()
    with pytest.raises(JobFailed) as e:
        renter.wait(v.id, timeout=60, check=True)
    assert e.value.view.run == "failed" and e.value.view.exit_code == 3
    assert "exit status 3" in str(e.value)
    assert "about to fail\n" in list(renter.logs(v.id))


def test_post_job_shaped_dict(renter):
    v = renter.post({"max_price": 1.5, "duration": "1m", "gpu_count": 1,
                     "run": {"command": ["sh", "-c", "echo job-shaped $X"], "env": {"X": "ok"}}})
    final = renter.wait(v.id, timeout=60, check=True)
    assert final.exit_code == 0
    assert "job-shaped ok\n" in list(renter.logs(v.id))


def test_wait_returns_when_the_job_ends_not_on_a_clock(renter):
    # With a poll of a minute, a client asking on a clock would see the
    # end a minute late; wait's long polls hear it as it happens.
    v = renter.post({"resources": {"accelerators": "A100"}, "run": "sleep 1; echo slept",
                     "max_price": 1.5, "duration": "2m"})
    asked = time.monotonic()
    final = renter.wait(v.id, timeout=90, poll=60, check=True)
    assert time.monotonic() - asked < 30, final.outcome()
    assert "slept\n" in list(renter.logs(v.id))


def test_bad_task_is_refused_naming_the_line(renter, tmp_path):
    before = len(renter.jobs())
    p = tmp_path / "bad.yaml"
    p.write_text("max_price: 1\nduration: 1h\nresources:\n  accelerators: A100:zero\nrun: echo\n")
    with pytest.raises(GpumeshError) as e:
        renter.post(p)
    msg = str(e.value)
    assert f"{p}:4: resources.accelerators: count must be a whole number" in msg, msg
    assert "\n" not in msg
    with pytest.raises(GpumeshError, match=r"<dict>: missing max_price"):
        renter.post({"run": "echo", "duration": "1h"})
    with pytest.raises(GpumeshError, match="task file .*absent.yaml: No such file"):
        renter.post(tmp_path / "absent.yaml")
    with pytest.raises(GpumeshError, match="a task is a file path or a dict, got int"):
        renter.post(3)  # type: ignore[arg-type]
    assert len(renter.jobs()) == before, "a refused task was posted"


def test_convert_shows_the_examples_job(renter):
    j = renter.convert(ROOT / "examples" / "finetune.yaml")
    assert j.gpu_count == 8 and j.gpu_models == ["H100", "H200"]
    assert j.tier == "silver" and j.verified and j.max_attempts == 5
    assert j.checkpoint_every_ns == 10 * 60 * 10**9 and j.duration_s == 6 * 3600
    assert j.outputs == "out" and "train" in j.inputs


def test_follow_streams_while_running_and_cancel_ends_it(renter, tmp_path):
    v = renter.post({"resources": {"accelerators": "A100"}, "run": "echo started; sleep 60; echo not reached",
                     "max_price": 1.5, "duration": "2m"})
    logs = renter.logs(v.id, follow=True)
    # The first line arrives while the job still runs (it sleeps a minute);
    # the provider's report that it runs, a stream of its own, may come
    # after that line: heard by the daemon's long polls, not on a clock.
    assert next(l for l in logs if l.startswith("started")) == "started\n"
    assert _until_run(renter, v.id, "running", timeout=30).run == "running"
    with pytest.raises(GpumeshError, match=r"has no receipt yet \(run running\)"):
        renter.fetch(v.id, tmp_path)
    renter.cancel(v.id)
    rest = list(logs)  # the stream ends with the job
    assert "not reached\n" not in rest
    final = renter.wait(v.id, timeout=30)
    assert final.done and final.run == "cancelled", final.outcome()


def _until_run(client, job_id, run, timeout):
    """The job's view once its run is ``run`` or it is done, following it
    with the daemon's long polls (``?wait=``), each answered at a change."""
    deadline = time.monotonic() + timeout
    v = client.job(job_id)
    while v.run != run and not v.done and time.monotonic() < deadline:
        v = JobView.from_json(client._call("GET", "/jobs/" + job_id, {"wait": "1s"}))
    return v


def test_providers(net):
    ps = net.renter.providers(gpu="A100", region="eu")
    p = next(p for p in ps if p.peer == net.provider_id)
    assert [g.model for g in p.gpus] == ["A100", "A100"] and p.gpus[0].vram_gb == 40
    assert p.region == "eu-west" and p.price_floor == 0.5
    assert net.renter.providers(gpu="H100") == []


@pytest.mark.parametrize("public", [True, False])
def test_artifact_as_a_task_input(renter, tmp_path, public):
    if not public and os.geteuid() != 0:
        pytest.skip("a private artifact is sealed: its job's provider must run as root (a tmpfs for its plaintext)")
    d = tmp_path / "data"
    d.mkdir()
    (d / "hello.txt").write_text("from an artifact\n")
    a = renter.add_artifact(d, public=public)
    assert len(a.id) == 64 and a.complete and a.files == 1
    assert a.private == a.sealed == (not public), a
    assert a.id in [x.id for x in renter.artifacts()]
    v = renter.post({"resources": {"accelerators": "A100"}, "inputs": {"data": a.id},
                     "run": 'cat "$GPUMESH_INPUTS/data/hello.txt"', "max_price": 1.5, "duration": "1m"})
    renter.wait(v.id, timeout=60, check=True)
    assert "from an artifact\n" in list(renter.logs(v.id))


def test_verify_declared_gpus_are_unverifiable(net):
    # One device: a provider answers one challenge a minute per verifier.
    res = net.renter.verify(net.provider_id, device=1, n=128, k=2)
    assert [(r.device, r.model, r.outcome) for r in res] == [("1", "A100", "unverifiable")], res
    assert "CPU path" in res[0].reason
    with pytest.raises(GpumeshError, match="not a peer id"):
        net.renter.verify("nobody")


def test_errors_are_one_line(renter, tmp_path):
    with pytest.raises(GpumeshError, match="no job"):
        renter.job("job-does-not-exist")
    with pytest.raises(DaemonNotRunning, match="gpumesh daemon is not running"):
        Client(data_dir=tmp_path).version()


def test_no_persist_job_leaves_its_files_with_the_renter(net, tmp_path):
    v = net.renter.post({"resources": {"accelerators": "A100"}, "outputs": "out", "no_persist": True,
                         "run": "mkdir -p out; echo kept > out/r.txt; echo hello", "max_price": 1.5, "duration": "2m"})
    assert v.job.no_persist and v.lease is not None, v.outcome()
    net.renter.wait(v.id, timeout=60, check=True)
    got = net.renter.fetch(v.id, tmp_path)  # from the renter's own copy, checked against the receipt
    assert [o.path for o in got] == ["r.txt"] and (tmp_path / "r.txt").read_text() == "kept\n"
    final = net.renter.job(v.id)
    assert final.kept and final.no_persist_held and final.scrub == "none-declared", final.raw
    assert "hello\n" in "".join(net.renter.logs(v.id))
    # The provider deletes its copies once the lease is settled.
    deadline = time.monotonic() + 10
    while list((net.provider_dir / "jobs").rglob(f"*{v.lease.id}*")):
        assert time.monotonic() < deadline, "the provider kept the no-persist job's files"
        time.sleep(0.1)


def test_retain_is_a_jobs_field(renter):
    j = renter.convert({"run": "echo", "max_price": 1, "duration": "1h", "retain": "90m"})
    assert j.retain_ns == 90 * 60 * 10**9 and not j.no_persist


def test_fraction_of_a_gpu_passes_through(renter):
    j = renter.convert({"resources": {"accelerators": "L4:0.25", "isolation": "mps"}, "run": "echo",
                        "max_price": 1, "duration": "1h"})
    assert (j.gpu_count, j.gpu_fraction, j.gpus, j.isolation) == (1, 0.25, 0.25, "mps")
    whole = renter.convert({"resources": {"accelerators": "L4:2"}, "run": "echo", "max_price": 1, "duration": "1h"})
    assert (whole.gpu_count, whole.gpu_fraction, whole.gpus) == (2, 0.0, 2.0)


def test_latency_terms_are_job_fields(renter):
    j = renter.convert({"resources": {"accelerators": "A100", "near": "eu-west", "max_rtt": "50ms"},
                        "run": "echo", "max_price": 1, "duration": "1h"})
    assert j.max_rtt_ns == 50 * 10**6 and j.near == "eu-west"
    with pytest.raises(GpumeshError, match=r"resources.max_rtt: must be in \[1ms, 10s\]"):
        renter.convert({"resources": {"max_rtt": "20s"}, "run": "echo", "max_price": 1, "duration": "1h"})


def test_max_rtt_job_is_ranked_by_measured_rtt(net):
    v = net.renter.post({"resources": {"accelerators": "A100", "max_rtt": "2s"}, "run": "echo near",
                         "max_price": 1.5, "duration": "1m"})
    assert v.lease is not None and v.lease.provider == net.provider_id, v.outcome()
    assert v.job.max_rtt_ns == 2 * 10**9
    bids = net.renter.bids(v.id)["bids"]
    mine = [b for b in bids if b["Bid"]["provider"] == net.provider_id]
    # The renter pinged the provider (loopback): a round trip well under the bound.
    assert mine and 0 < mine[0]["rtt"] < 2 * 10**9 and not mine[0].get("Rejected"), bids
    net.renter.wait(v.id, timeout=60, check=True)


SERVICE = """\
name: py-web
resources:
  accelerators: A100
  ports: 8000
run: exec "$PYTHON" -m http.server "$PORT" --bind 127.0.0.1
max_price: 2.0
service:
  readiness_probe:
    path: /
    initial_delay_seconds: 30
  replicas: 1
  probe_interval: 300ms
  lease: 5m
"""


def test_serve_a_service_file_until_a_replica_answers(net, tmp_path):
    p = tmp_path / "web.yaml"
    p.write_text(SERVICE.replace('"$PYTHON"', sys.executable))
    # A service file is no job, and a bad one is refused naming its line.
    with pytest.raises(GpumeshError, match=r"web.yaml:7: service: the file describes a service: post it with `gpumesh serve post"):
        net.renter.post(p)
    bad = tmp_path / "bad.yaml"
    bad.write_text(SERVICE.replace("path: /", "path: index"))
    with pytest.raises(GpumeshError, match=r"bad.yaml:9: service.readiness_probe.path: must be an HTTP path starting with /"):
        net.renter.serve(bad)

    v = net.renter.serve(p)
    try:
        assert v.id == "py-web" and v.gateway.startswith("127.0.0.1:") and v.token
        deadline = time.monotonic() + 60
        while net.renter.service(v.id).ready < 1:
            assert time.monotonic() < deadline, f"no ready replica within 60 s: {net.renter.service(v.id).raw}"
            time.sleep(0.2)
        st = net.renter.service(v.id)
        assert [r["provider"] for r in st.replicas if r["state"] == "ready"] == [net.provider_id], st.raw
        req = urllib.request.Request(v.url + "/", headers={"X-Gpumesh-Token": v.token})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200 and b"Directory listing" in resp.read()
    finally:
        assert net.renter.stop_service(v.id).stopped
