"""Typed views of the daemon's API answers.

Each keeps the whole JSON answer in ``raw``, so fields this client does not
name yet are still at hand. Times are the daemon's RFC 3339 strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["GPU", "Job", "Lease", "OutputFile", "JobView", "ServiceView", "Provider", "Artifact", "VerifyResult",
           "Status", "TERMINAL_RUNS", "TERMINAL_STATES"]

#: Job states after which nothing more happens.
TERMINAL_STATES = frozenset({"unplaceable", "cancelled", "failed", "finished"})
#: Run states of a lease that ended.
TERMINAL_RUNS = frozenset({"succeeded", "failed", "expired", "cancelled"})


@dataclass
class GPU:
    """One GPU of a provider."""
    model: str
    vram_gb: int
    uuid: str = ""
    detected: bool = False

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "GPU":
        return cls(model=d.get("model", ""), vram_gb=d.get("vram_gb", 0), uuid=d.get("uuid", ""),
                   detected=bool(d.get("detected")))


@dataclass
class Job:
    """A job as the market sees it (``auction.Job``)."""
    id: str
    tier: str
    max_price: float
    gpu_count: int
    gpu_models: List[str]
    region: str
    command: List[str]
    env: Dict[str, str]
    inputs: Dict[str, str]
    outputs: str
    image: str
    #: Go duration in nanoseconds, as JSON carries it.
    duration_ns: int
    checkpoint_every_ns: int
    max_attempts: int
    verified: bool
    preemptible: bool
    deadline: str
    #: nothing of the job stays on its provider (``job post --no-persist``)
    no_persist: bool = False
    #: how long the provider keeps its log and outputs (Go nanoseconds; 0: its default)
    retain_ns: int = 0
    #: the fraction of one GPU the job asks for (``accelerators: "L4:0.25"``,
    #: ``job post --count 0.25``); 0.0 for whole GPUs
    gpu_fraction: float = 0.0
    #: how its slice must be enforced: ``mig``, ``mps`` or ``any`` ("" is any)
    isolation: str = ""
    #: the most round trip the renter may measure to its provider (Go nanoseconds; 0: no bound)
    max_rtt_ns: int = 0
    #: where its clients are: a region, or a client location's multiaddr ("": nowhere in particular)
    near: str = ""
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def gpus(self) -> float:
        """How many GPUs the job asks for: ``gpu_count``, or its fraction of one."""
        return self.gpu_fraction or float(self.gpu_count)

    @property
    def duration_s(self) -> float:
        """How long the job needs its GPUs, in seconds."""
        return self.duration_ns / 1e9

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Job":
        run = d.get("run") or {}
        return cls(id=d.get("id", ""), tier=d.get("tier", ""), max_price=d.get("max_price", 0.0),
                   gpu_count=d.get("gpu_count", 0), gpu_models=list(d.get("gpu_models") or []),
                   region=d.get("region", ""), command=list(run.get("command") or []),
                   env=dict(run.get("env") or {}), inputs=dict(run.get("inputs") or {}),
                   outputs=run.get("outputs", ""), image=run.get("image", ""),
                   duration_ns=d.get("duration", 0), checkpoint_every_ns=d.get("checkpoint_every", 0),
                   max_attempts=d.get("max_attempts", 0), verified=bool(d.get("verified")),
                   preemptible=bool(d.get("preemptible")), deadline=d.get("deadline", ""),
                   no_persist=bool(d.get("no_persist")), retain_ns=d.get("retain", 0),
                   gpu_fraction=float(d.get("gpu_fraction", 0.0)), isolation=d.get("isolation", ""),
                   max_rtt_ns=d.get("max_rtt", 0), near=d.get("near", ""), raw=d)


@dataclass
class Lease:
    """A confirmed lease: which provider runs the job, when, at what price."""
    id: str
    provider: str
    price: float
    start: str
    end: str
    gpu_count: int
    tier: str
    state: str
    #: the share of its one GPU a slice lease holds (billed by it); 0.0 for whole GPUs
    gpu_fraction: float = 0.0
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Lease":
        return cls(id=d.get("id", ""), provider=d.get("provider", ""), price=d.get("price", 0.0),
                   start=d.get("start", ""), end=d.get("end", ""), gpu_count=d.get("gpu_count", 0),
                   tier=d.get("tier", ""), state=d.get("state", ""),
                   gpu_fraction=float(d.get("gpu_fraction", 0.0)), raw=d)


@dataclass
class OutputFile:
    """One result file of a job, with its checksum."""
    path: str
    size: int
    sha256: str

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "OutputFile":
        return cls(path=d.get("path", ""), size=int(d.get("size", 0)), sha256=d.get("sha256", ""))


@dataclass
class JobView:
    """The renter's view of one job (``gpumesh job status``)."""
    id: str
    #: bidding, awarding, queued, leased, unplaceable, cancelled, failed, finished
    state: str
    #: the current lease's run: pending, preparing, running, succeeded, failed, ...
    run: str
    exit_code: Optional[int]
    detail: str
    fault: str
    cost_usd: float
    winner: str
    reasons: List[str]
    job: Job
    lease: Optional[Lease]
    outputs: List[OutputFile]
    #: where this node keeps a no-persist job's log and outputs, once taken
    #: from the provider (which deletes its copies at settlement)
    kept: str = ""
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def scrub(self) -> str:
        """What the receipt says the provider did to the GPUs' memory after
        the lease: ``zeroed``, ``none-declared`` (no device memory to
        clear), ``failed: ...``; empty before the receipt or when unsaid."""
        return (self.raw.get("receipt") or {}).get("scrub", "")

    @property
    def no_persist_held(self) -> bool:
        """The receipt states the no-persistence policy held."""
        return bool((self.raw.get("receipt") or {}).get("no_persist"))

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "JobView":
        job = Job.from_json(d.get("job") or {})
        lease = d.get("lease")
        return cls(id=job.id, state=d.get("state", ""), run=d.get("run", ""), exit_code=d.get("exit_code"),
                   detail=d.get("detail", ""), fault=d.get("fault", ""), cost_usd=d.get("cost_usd", 0.0),
                   winner=d.get("winner", ""), reasons=list(d.get("reasons") or []), job=job,
                   lease=Lease.from_json(lease) if lease else None,
                   outputs=[OutputFile.from_json(o) for o in d.get("outputs") or []], kept=d.get("kept", ""), raw=d)

    @property
    def done(self) -> bool:
        """Nothing more to wait for: the job ended, or its lease's run did
        (a preempted run of a preemptible job is requeued, so not done)."""
        if self.state in TERMINAL_STATES:
            return True
        if self.state in ("bidding", "awarding", "queued"):
            return False
        if self.run in TERMINAL_RUNS:
            return True
        return self.run == "preempted" and not self.job.preemptible

    @property
    def succeeded(self) -> bool:
        """The job's run succeeded."""
        return self.run == "succeeded"

    def outcome(self) -> str:
        """How the job ended, in words."""
        s = self.run or self.state
        if self.exit_code is not None:
            s += f" (exit status {self.exit_code})"
        if self.detail:
            s += f": {self.detail}"
        elif self.reasons and self.state in ("unplaceable", "failed"):
            s += f": {self.reasons[-1]}"
        return s


@dataclass
class ServiceView:
    """A service's status (``gpumesh serve status``)."""
    id: str
    #: the loopback address of this node's gateway to the replicas
    gateway: str
    #: the gateway's secret: send it as the ``X-Gpumesh-Token`` header
    token: str
    ready: int
    desired: int
    stopped: bool
    #: one dict per replica: job_id, provider, state (bidding, starting, ready, ...), requests...
    replicas: List[Dict[str, Any]]
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ServiceView":
        return cls(id=d.get("id", ""), gateway=d.get("gateway", ""), token=d.get("token", ""),
                   ready=d.get("ready", 0), desired=d.get("desired", 0), stopped=bool(d.get("stopped")),
                   replicas=list(d.get("replicas") or []), raw=d)

    @property
    def url(self) -> str:
        """The gateway's base URL."""
        return "http://" + self.gateway


@dataclass
class Provider:
    """A provider's signed capability record, as discovered."""
    peer: str
    region: str
    gpus: List[GPU]
    price_floor: float
    datasets: List[str]
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Provider":
        return cls(peer=d.get("peer", ""), region=d.get("region", ""),
                   gpus=[GPU.from_json(g) for g in d.get("gpus") or []],
                   price_floor=(d.get("policy") or {}).get("price_floor", 0.0),
                   datasets=list(d.get("datasets") or []), raw=d)


@dataclass
class Artifact:
    """A content-addressed file or tree in the daemon's store."""
    id: str
    name: str
    size: int
    files: int
    complete: bool
    private: bool
    # A private file or tree is sealed: encrypted end to end.
    sealed: bool = False
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Artifact":
        return cls(id=d.get("id", ""), name=d.get("name", ""), size=d.get("size", 0), files=d.get("files", 0),
                   complete=bool(d.get("complete")), private=bool(d.get("private")),
                   sealed=bool(d.get("sealed")), raw=d)


@dataclass
class VerifyResult:
    """One device's GPU challenge: its verdict's outcome (verified, failed,
    unverifiable), or why there is none."""
    device: str
    model: str
    outcome: str
    reason: str
    error: str
    no_verdict: bool
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "VerifyResult":
        v = d.get("verdict") or {}
        return cls(device=d.get("device", ""), model=d.get("model", ""), outcome=v.get("outcome", ""),
                   reason=v.get("reason", ""), error=d.get("error", ""), no_verdict=bool(d.get("no_verdict")),
                   raw=d)


@dataclass
class Status:
    """The node's identity, connectivity and inventory."""
    version: str
    peer_id: str
    addrs: List[str]
    peers: int
    region: str
    provider: bool
    gpus: List[GPU]
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Status":
        return cls(version=d.get("version", ""), peer_id=d.get("peer_id", ""), addrs=list(d.get("addrs") or []),
                   peers=d.get("peers", 0), region=d.get("region", ""), provider=bool(d.get("provider")),
                   gpus=[GPU.from_json(g) for g in d.get("gpus") or []], raw=d)
