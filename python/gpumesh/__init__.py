"""A Python client for the gpumesh daemon.

>>> from gpumesh import Client
>>> c = Client(data_dir="~/.gpumesh")
>>> job = c.post("examples/eval.yaml")        # doctest: +SKIP
>>> for line in c.logs(job.id, follow=True):  # doctest: +SKIP
...     print(line, end="")

It talks to the daemon's control API over its unix socket
(``<data_dir>/gpumesh.sock``) with the standard library only.
"""

from .client import (
    SOCKET_NAME,
    Client,
    DaemonNotRunning,
    GpumeshError,
    JobFailed,
    default_data_dir,
    manifest_hash,
)
from .types import GPU, Artifact, Job, JobView, Lease, OutputFile, Provider, ServiceView, Status, VerifyResult

__version__ = "0.1.0"

__all__ = [
    "Client", "GpumeshError", "DaemonNotRunning", "JobFailed", "SOCKET_NAME", "default_data_dir", "manifest_hash",
    "GPU", "Artifact", "Job", "JobView", "Lease", "OutputFile", "Provider", "ServiceView", "Status", "VerifyResult",
]
