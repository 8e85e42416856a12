"""A pod the runner admitted and its containers: what runner.py and containers.py keep of each."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.podrunner import decide
from tests.podrunner.api import Obj, now_iso
from tests.podrunner.net import PodNet


@dataclass
class Container:
    """One container of a pod on this runner: its process, restarts, probes and reported state."""

    spec: Obj
    policy: str
    sidecar: bool = False  # an init container with restartPolicy Always
    index: int = 0  # its place among the pod's sidecars then main containers (its podman name)
    restarts: int = 0
    proc: subprocess.Popen | None = None
    name: str = ""  # podman's container name
    started: str = ""
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last: Obj | None = None
    next_start: float = 0.0
    ready: decide.ProbeTrack = field(default_factory=lambda: decide.ProbeTrack(passing=False))
    live: decide.ProbeTrack = field(default_factory=lambda: decide.ProbeTrack(passing=True))
    stop_probes: threading.Event = field(default_factory=threading.Event)
    killing: bool = False
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # (host, container path, ro)

    def status(self) -> Obj:
        ready = "running" in self.state and (self.ready.passing if "readinessProbe" in self.spec else True)
        out = {
            "name": self.spec["name"],
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": bool(ready),
            "started": "running" in self.state,
            "restartCount": self.restarts,
            "state": self.state,
        }
        if self.last:
            out["lastState"] = self.last
        return out


@dataclass
class PodRun:
    """A pod this runner admitted: where it lives on the host, its main containers and sidecars."""

    ns: str
    name: str
    uid: str
    ip: str
    dir: Path
    pod: Obj
    containers: list[Container]
    seq: int = 0  # the runner's number of this pod: its address, namespace and container names
    net: PodNet | None = None
    hosts: str = ""
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    sidecars: list[Container] = field(default_factory=list)
    initialized: bool = False  # every sidecar started once, then the main containers
    stopping: bool = False  # the main containers are done: the sidecars are being stopped
    memory: Path | None = None  # the host directory of its emptyDirs of medium Memory (tmpfs)
    failed: str = ""  # why it could not start (CreateContainerConfigError)
    start: str = field(default_factory=now_iso)
    reported: Obj = field(default_factory=dict)

    def find(self, container: str | None) -> Container | None:
        """A container by name, sidecar or main (None: the first main container)."""
        if container is None:
            return self.containers[0] if self.containers else None
        return next((c for c in [*self.sidecars, *self.containers] if c.spec["name"] == container), None)
