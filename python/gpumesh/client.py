"""The gpumesh daemon's control API, over its unix socket.

Every call opens one HTTP/1.1 connection to ``<data_dir>/gpumesh.sock`` (the
socket the daemon serves its ``/v1`` API on) and closes it when the answer
has been read, so a :class:`Client` may be shared between threads.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.parse
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from .types import (
    Artifact,
    Job,
    JobView,
    OutputFile,
    Provider,
    ServiceView,
    Status,
    VerifyResult,
)

__all__ = ["Client", "GpumeshError", "DaemonNotRunning", "JobFailed", "SOCKET_NAME", "default_data_dir"]

#: The control socket's file name inside a daemon's data dir.
SOCKET_NAME = "gpumesh.sock"
#: The header carrying the JSON manifest of GET /v1/jobs/{id}/outputs.
MANIFEST_HEADER = "X-Gpumesh-Manifest"

TaskSpec = Union[Mapping[str, Any], str, "os.PathLike[str]"]


class GpumeshError(Exception):
    """An expected failure, with the daemon's (or the client's) one-line message."""


class DaemonNotRunning(GpumeshError):
    """No daemon answers on the data dir's socket."""


class JobFailed(GpumeshError):
    """:meth:`Client.wait` with ``check=True`` saw the job end unsuccessfully."""

    def __init__(self, message: str, view: JobView):
        super().__init__(message)
        self.view = view


def default_data_dir() -> str:
    """``$GPUMESH_HOME``, else ``~/.gpumesh``: the CLI's default."""
    return os.environ.get("GPUMESH_HOME") or os.path.join(os.path.expanduser("~"), ".gpumesh")


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix socket path."""

    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("gpumesh", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """A client of one local gpumesh daemon.

    :param data_dir: the daemon's data dir (default: ``$GPUMESH_HOME`` or
        ``~/.gpumesh``); its control socket is ``<data_dir>/gpumesh.sock``.
    :param socket_path: the socket itself, instead of ``data_dir``.
    :param timeout: seconds to wait for an answer. Posting runs the job's
        auction before answering (seconds); streams (logs, outputs) have no
        read timeout.
    """

    def __init__(self, data_dir: Optional[Union[str, "os.PathLike[str]"]] = None, *,
                 socket_path: Optional[str] = None, timeout: float = 120.0):
        if socket_path is None:
            d = os.path.expanduser(os.fspath(data_dir)) if data_dir is not None else default_data_dir()
            socket_path = os.path.join(d, SOCKET_NAME)
        self.socket_path = socket_path
        self.timeout = timeout

    # ---- transport ----

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
              body: Any = None, stream: bool = False,
              headers: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None) -> http.client.HTTPResponse:
        url = "/v1" + path
        if query:
            q = {k: v for k, v in query.items() if v is not None and v != ""}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        hdrs = {"Host": "gpumesh", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn = _UnixHTTPConnection(self.socket_path, self.timeout if timeout is None else timeout)
        try:
            conn.request(method, url, body=data, headers=hdrs)
            if stream and conn.sock is not None:
                conn.sock.settimeout(None)
            resp = conn.getresponse()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            conn.close()
            raise DaemonNotRunning(
                f"gpumesh daemon is not running (no socket at {self.socket_path}); "
                f"start it with `gpumesh daemon`") from e
        except socket.timeout as e:
            conn.close()
            raise GpumeshError(f"the daemon did not answer {method} {url} within {self.timeout:g}s") from e
        except OSError as e:
            conn.close()
            raise GpumeshError(f"talk to daemon at {self.socket_path}: {e}") from e
        if resp.status // 100 != 2:
            raw = resp.read(64 << 10)
            conn.close()
            msg = ""
            try:
                msg = json.loads(raw).get("error", "")
            except (ValueError, AttributeError):
                pass
            raise GpumeshError(msg or f"daemon answered {resp.status} {resp.reason}")
        # The response keeps the connection open until it is closed.
        resp._gpumesh_conn = conn  # type: ignore[attr-defined]
        return resp

    def _call(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Any = None) -> Any:
        resp = self._open(method, path, query, body)
        try:
            raw = resp.read()
        finally:
            _close(resp)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise GpumeshError(f"decode daemon answer to {method} {path}: {e}") from e

    # ---- node ----

    def version(self) -> str:
        """The daemon's version."""
        return self._call("GET", "/version")["version"]

    def status(self) -> Status:
        """The node's identity, connectivity and inventory (``gpumesh status``)."""
        return Status.from_json(self._call("GET", "/status"))

    def peers(self) -> List[Dict[str, Any]]:
        """The connected peers: ``[{"id": ..., "addrs": [...]}]``."""
        return self._call("GET", "/peers")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll until the daemon answers, or raise after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.version()
                return
            except GpumeshError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)

    def providers(self, gpu: Optional[str] = None, region: Optional[str] = None,
                  min_vram: Optional[int] = None, count: Optional[int] = None) -> List[Provider]:
        """Providers found in the DHT that match (``gpumesh providers``)."""
        caps = self._call("GET", "/providers", {"gpu": gpu, "region": region, "min_vram": min_vram, "count": count})
        return [Provider.from_json(c) for c in caps or []]

    # ---- jobs ----

    def post(self, spec: TaskSpec) -> JobView:
        """Post a job and run its auction; returns once it is leased, queued
        (no provider can take it yet: it waits on the daemon) or
        unplaceable.

        ``spec`` is a task file's path (``examples/eval.yaml``: the
        SkyPilot-like shape, or an ``auction.Job``-shaped job spec) or a dict
        of either shape, e.g. ``{"resources": {"accelerators": "A100:1"},
        "run": "python3 eval.py", "max_price": 1.5, "duration": "1h"}``.
        The daemon converts it (the same rule as ``gpumesh job post
        task.yaml``); a bad field raises :class:`GpumeshError` naming it.
        """
        name, text = _task_text(spec)
        return JobView.from_json(self._call("POST", "/jobs", body={"task": text, "task_name": name}))

    def convert(self, spec: TaskSpec) -> Job:
        """The job ``spec`` (as for :meth:`post`) stands for, without posting it."""
        name, text = _task_text(spec)
        return Job.from_json(self._call("POST", "/tasks/convert", body={"task": text, "task_name": name}))

    def job(self, job_id: str) -> JobView:
        """One job's state (``gpumesh job status``)."""
        return JobView.from_json(self._call("GET", _job_path(job_id)))

    def jobs(self) -> List[JobView]:
        """This node's jobs, newest first (``gpumesh job list``)."""
        return [JobView.from_json(v) for v in self._call("GET", "/jobs") or []]

    def cancel(self, job_id: str) -> JobView:
        """Cancel a job: its auction, or its running lease."""
        return JobView.from_json(self._call("POST", _job_path(job_id, "/cancel")))

    def bids(self, job_id: str) -> Dict[str, Any]:
        """The job's ranked bids and why the winner won."""
        return self._call("GET", _job_path(job_id, "/bids"))

    def wait(self, job_id: str, timeout: Optional[float] = None, poll: float = 0.5,
             check: bool = False) -> JobView:
        """Follow the job until it needs no more waiting (:attr:`JobView.done`).

        Each ask after the first is a long poll naming the view last seen
        (its ETag): the daemon answers at the job's next change, one made
        between two asks included, so ``wait`` returns as soon as the job
        ends. ``poll`` only paces a daemon that answers at once.

        :param timeout: seconds; ``None`` waits for as long as it takes.
        :param check: raise :class:`JobFailed` unless the run succeeded.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        tag = ""
        raw: Any = None
        while True:
            query: Dict[str, Any] = {}
            headers: Dict[str, str] = {}
            long_poll = 0.0
            if raw is not None:
                long_poll = _LONG_POLL if deadline is None else max(0.0, min(_LONG_POLL, deadline - time.monotonic()))
                query["wait"] = f"{long_poll:.3f}s"
                if tag:
                    headers["If-None-Match"] = tag
            asked = time.monotonic()
            resp = self._open("GET", _job_path(job_id), query, headers=headers,
                              timeout=None if self.timeout is None else self.timeout + long_poll)
            try:
                body = resp.read()
                new_tag = resp.getheader("ETag") or ""
            finally:
                _close(resp)
            try:
                new_raw = json.loads(body)
            except ValueError as e:
                raise GpumeshError(f"decode daemon answer to GET {_job_path(job_id)}: {e}") from e
            unchanged = raw is not None and new_raw == raw
            raw, tag = new_raw, new_tag
            v = JobView.from_json(raw)
            if v.done:
                if check and not v.succeeded:
                    raise JobFailed(f"job {job_id} {v.outcome()}", v)
                return v
            if deadline is not None and time.monotonic() >= deadline:
                raise GpumeshError(f"job {job_id} still {v.run or v.state} after {timeout:g}s")
            if unchanged and time.monotonic() - asked < poll:
                # A daemon that answers at once (no long poll).
                time.sleep(poll)

    def logs(self, job_id: str, follow: bool = False) -> Iterator[str]:
        """The job's stdout and stderr, line by line (each with its newline,
        but a last partial one). With ``follow`` it streams until the job
        ends; close the iterator (or leave the loop) to stop early."""
        resp = self._open("GET", _job_path(job_id, "/logs"), {"follow": "1" if follow else None}, stream=True)
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                yield line.decode("utf-8", errors="replace")
        finally:
            _close(resp)

    def fetch(self, job_id: str, dest: Union[str, "os.PathLike[str]"], force: bool = False,
              max_size: int = 10 << 30, settle_timeout: float = 30.0) -> List[OutputFile]:
        """Download the job's output files into ``dest``, checked against the
        manifest its two-party receipt names (SHA-256 of every file); the
        files are moved into place only once all verified. An existing file
        is refused unless ``force``. A job whose run ended but has not
        settled yet is waited for, up to ``settle_timeout`` seconds. Returns
        the files written."""
        deadline = time.monotonic() + settle_timeout
        while True:
            v = self.job(job_id)
            receipt = v.raw.get("receipt")
            if receipt or not v.done or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not receipt:
            raise GpumeshError(f"job {job_id} has no receipt yet (run {v.run or '-'}): its outputs cannot be "
                               f"checked; fetch them once it settled")
        resp = self._open("GET", _job_path(job_id, "/outputs"), stream=True)
        try:
            header = resp.getheader(MANIFEST_HEADER)
            if not header:
                raise GpumeshError(f"outputs of job {job_id}: the daemon sent no {MANIFEST_HEADER} header")
            manifest = [OutputFile.from_json(m) for m in json.loads(header) or []]
            got = manifest_hash(manifest)
            if got != (receipt.get("result_hash") or ""):
                raise GpumeshError(f"outputs of job {job_id}: the provider's manifest ({len(manifest)} files, "
                                   f"hash {got!r}) is not the one its receipt names; refusing them")
            if sum(max(m.size, 0) for m in manifest) > max_size:
                raise GpumeshError(f"outputs of job {job_id} total more than max_size ({max_size} bytes)")
            return _extract(resp, manifest, Path(dest), force)
        finally:
            _close(resp)

    # ---- services ----

    def serve(self, spec: TaskSpec) -> ServiceView:
        """Start an always-on service; returns once it exists (its replicas
        are leased in the background: wait for :attr:`ServiceView.ready`
        with :meth:`service`).

        ``spec`` is a service file's path (``examples/vllm-service.yaml``:
        a task file with a ``service:`` section, or a YAML service spec) or
        a dict of either shape. The daemon converts it (the same rule as
        ``gpumesh serve post service.yaml``); a bad field raises
        :class:`GpumeshError` naming it.
        """
        name, text = _task_text(spec)
        return ServiceView.from_json(self._call("POST", "/services", body={"task": text, "task_name": name}))

    def service(self, service_id: str) -> ServiceView:
        """One service's status (``gpumesh serve status``)."""
        return ServiceView.from_json(self._call("GET", _service_path(service_id)))

    def stop_service(self, service_id: str) -> ServiceView:
        """Stop a service: its gateway closes and its replicas' leases are cancelled."""
        return ServiceView.from_json(self._call("POST", _service_path(service_id, "/stop")))

    # ---- artifacts ----

    def artifacts(self) -> List[Artifact]:
        """Every artifact the daemon's store holds, most recently used first."""
        return [Artifact.from_json(a) for a in self._call("GET", "/artifacts") or []]

    def add_artifact(self, path: Union[str, "os.PathLike[str]"], public: bool = False) -> Artifact:
        """Import a file or directory (on the daemon's host) as a
        content-addressed artifact; name its ``id`` under a task's
        ``inputs``. Private (the default), it is sealed: encrypted end to
        end, and its jobs run only on providers that keep their plaintext
        on a tmpfs; ``public`` artifacts are plain and served to anyone."""
        return Artifact.from_json(self._call("POST", "/artifacts",
                                             body={"path": os.path.abspath(os.fspath(path)), "public": public}))

    def remove_artifact(self, artifact_id: str) -> None:
        """Delete an artifact from the daemon's store."""
        self._call("DELETE", "/artifacts/" + urllib.parse.quote(artifact_id, safe=""))

    # ---- reputation ----

    def verify(self, peer: str, device: Optional[Union[str, int]] = None,
               n: Optional[int] = None, k: Optional[int] = None) -> List[VerifyResult]:
        """Challenge a provider's GPUs (all, or one device: a UUID or index);
        the daemon records and gossips the verdicts. ``n`` and ``k`` (both or
        neither) override the challenge's matrix size and product count, for
        diagnostics."""
        body: Dict[str, Any] = {"peer": peer}
        if device is not None:
            body["device"] = str(device)
        if n is not None or k is not None:
            body["n"], body["k"] = n or 0, k or 0
        return [VerifyResult.from_json(r) for r in self._call("POST", "/verify", body=body) or []]

    def reputation(self, peer: str) -> Dict[str, Any]:
        """This node's view of a provider's reputation."""
        return self._call("GET", "/reputation/" + urllib.parse.quote(peer, safe=""))

    def counters(self) -> Dict[str, int]:
        """The market's event counters by name."""
        return self._call("GET", "/counters")


# ---- helpers ----

def _close(resp: http.client.HTTPResponse) -> None:
    resp.close()
    conn = getattr(resp, "_gpumesh_conn", None)
    if conn is not None:
        conn.close()


#: How long one of :meth:`Client.wait`'s asks may wait for a change.
_LONG_POLL = 30.0


def _job_path(job_id: str, suffix: str = "") -> str:
    if not job_id:
        raise GpumeshError("missing job id")
    return "/jobs/" + urllib.parse.quote(job_id, safe="") + suffix


def _service_path(service_id: str, suffix: str = "") -> str:
    if not service_id:
        raise GpumeshError("missing service id")
    return "/services/" + urllib.parse.quote(service_id, safe="") + suffix


def _task_text(spec: TaskSpec):
    """(name, text) of a task given as a path or a dict."""
    if isinstance(spec, Mapping):
        try:
            return "<dict>", json.dumps(spec, indent=1, default=_json_default)
        except (TypeError, ValueError) as e:
            raise GpumeshError(f"task dict: {e}") from e
    if isinstance(spec, (str, os.PathLike)):
        p = os.fspath(spec)
        try:
            with open(p, "rb") as f:
                b = f.read((256 << 10) + 1)
        except OSError as e:
            raise GpumeshError(f"task file {p}: {e.strerror or e}") from e
        try:
            return p, b.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GpumeshError(f"task file {p}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    raise GpumeshError(f"a task is a file path or a dict, got {type(spec).__name__}")


def _json_default(o: Any) -> Any:
    # timedelta → Go duration ("90s"), datetime → RFC 3339.
    import datetime
    if isinstance(o, datetime.timedelta):
        return f"{o.total_seconds():g}s"
    if isinstance(o, datetime.datetime):
        if o.tzinfo is None:
            raise TypeError(f"datetime {o} has no time zone")
        return o.isoformat()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def manifest_hash(outs: List[OutputFile]) -> str:
    """The hash a receipt names for a list of output files ("" for none):
    ``auction.ManifestHash``."""
    if not outs:
        return ""
    h = hashlib.sha256()
    for o in outs:
        h.update(f"{o.path}\x00{o.size}\x00{o.sha256}\n".encode())
    return h.hexdigest()


def _safe_name(name: str) -> str:
    if not name or "\x00" in name or "\\" in name or name.startswith("/"):
        raise GpumeshError(f"refusing output path {name!r}")
    p = PurePosixPath(name)
    parts = [x for x in p.parts if x != "."]
    if not parts or ".." in parts:
        raise GpumeshError(f"refusing output path {name!r}: it escapes the destination")
    return "/".join(parts)


def _extract(stream, manifest: List[OutputFile], dest: Path, force: bool) -> List[OutputFile]:
    """Unpack an outputs bundle (a tar of exactly the manifest's files),
    like the CLI's wire.ExtractBundle."""
    want: Dict[str, OutputFile] = {}
    for m in manifest:
        p = _safe_name(m.path)
        if p in want:
            raise GpumeshError(f"manifest lists {p!r} twice")
        want[p] = m
    dest.mkdir(parents=True, exist_ok=True)

    def check_free(name: str) -> None:
        t = dest / name
        if t.is_symlink() or (t.exists() and not t.is_file()):
            raise GpumeshError(f"{name} exists in the destination and is not a regular file")
        if t.exists() and not force:
            raise GpumeshError(f"{name} already exists in the destination (use force=True to overwrite)")

    staging = Path(tempfile.mkdtemp(prefix=".gpumesh-fetch-", dir=dest))
    got: List[OutputFile] = []
    try:
        try:
            tf = tarfile.open(fileobj=stream, mode="r|")
        except tarfile.TarError as e:
            if not want:
                return []
            raise GpumeshError(f"read outputs archive: {e}") from e
        seen = set()
        with tf:
            for member in tf:
                name = _safe_name(member.name)
                if member.isdir():
                    continue
                if not member.isfile():
                    raise GpumeshError(f"refusing {member.name!r}: not a regular file")
                m = want.get(name)
                if m is None:
                    raise GpumeshError(f"{name!r} is not in the manifest")
                if name in seen:
                    raise GpumeshError(f"{name!r} appears twice in the archive")
                seen.add(name)
                if member.size != m.size:
                    raise GpumeshError(f"{name!r}: archive says {member.size} bytes, manifest {m.size}")
                check_free(name)
                src = tf.extractfile(member)
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                h, n = hashlib.sha256(), 0
                with open(target, "wb") as out:
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        h.update(chunk)
                        out.write(chunk)
                        n += len(chunk)
                if n != m.size or h.hexdigest().lower() != m.sha256.lower():
                    raise GpumeshError(f"checksum mismatch for {name!r}: got sha256 {h.hexdigest()} ({n} bytes), "
                                       f"manifest says {m.sha256} ({m.size} bytes)")
                got.append(OutputFile(path=name, size=n, sha256=h.hexdigest()))
        missing = sorted(set(want) - seen)
        if missing:
            raise GpumeshError("missing from the archive: " + ", ".join(missing))
        for f in got:
            check_free(f.path)
            (dest / f.path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / f.path, dest / f.path)
        return got
    finally:
        shutil.rmtree(staging, ignore_errors=True)
