"""The pod runner's containers (runner.py's docstring says what is played): a pod's volumes as host
directories, each container started as a podman container or a host process in the pod's namespaces,
its exit, restarts, probes and reported status, and its stop (SIGTERM, then SIGKILL after the grace
period). A mixin of PodRunner, whose state (mode, images, network, api, pods) it uses."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.podrunner import decide, podnames
from tests.podrunner.api import Api, Obj, now_iso
from tests.podrunner.net import Network
from tests.podrunner.pods import Container, PodRun

REPO = Path(__file__).resolve().parents[2]  # this checkout (graphtrain is installed from it)
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ContainerRuntime:
    """PodRunner's container side; the state it reads is PodRunner's (set in its __init__)."""

    mode: str  # "podman" or "process"
    root: Path
    id: str
    api: Api
    api_port: str
    ca: bytes
    token: str
    network: Network
    images: dict[str, str]
    env_podman: dict[str, str]
    errors: list[str]
    _stop: threading.Event
    _killers: list[threading.Thread]
    _names: list[str]
    _created_points: list[Path]
    _points_lock: threading.Lock

    def _claim_dir(self, ns: str, claim: str) -> Path:
        path = self.root / "claims" / ns / claim
        if not path.exists():
            path.mkdir(parents=True)
            path.chmod(0o777)  # any pod's uid writes there (a fresh volume with fsGroup)
        return path

    def _volumes(self, run: PodRun) -> None:
        """Host directories of the pod's volumes, and (host, container path, read-only) mounts."""
        spec = run.pod["spec"]
        ctx = spec.get("securityContext") or {}
        uid, gid = ctx.get("runAsUser", 0), ctx.get("fsGroup", ctx.get("runAsGroup", 0))
        host: dict[str, Path] = {}
        for vol in spec.get("volumes") or []:
            path = run.dir / "volumes" / vol["name"]
            if "emptyDir" in vol:
                if (vol["emptyDir"] or {}).get("medium") == "Memory":  # tmpfs; sizeLimit not enforced
                    run.memory = Path(podnames.memory_dir(self.network.block)) / run.dir.name
                    path = run.memory / vol["name"]
                path.mkdir(parents=True, exist_ok=True)
                path.chmod(0o1777)
            elif "persistentVolumeClaim" in vol:
                path = self._claim_dir(run.ns, vol["persistentVolumeClaim"]["claimName"])
            elif "configMap" in vol or "secret" in vol:
                is_cm = "configMap" in vol
                src = vol["configMap" if is_cm else "secret"]
                name = src["name" if is_cm else "secretName"]
                obj = self.api.get("api/v1", run.ns, "configmaps" if is_cm else "secrets", name)
                if obj is None:
                    raise KeyError(f'{"configmap" if is_cm else "secret"} "{name}" not found')
                data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
                if not is_cm:
                    data = {k: base64.b64decode(v) for k, v in data.items()}
                    data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
                path.mkdir(parents=True, exist_ok=True)
                mode = int(src.get("defaultMode", 0o644))
                for key, raw in data.items():
                    f = path / key
                    f.write_bytes(raw)
                    f.chmod(mode)
                    os.chown(f, uid, gid)
            else:
                raise ValueError(
                    f"volume {vol['name']}: only configMap, secret, persistentVolumeClaim and emptyDir"
                )
            if "emptyDir" in vol:
                os.chown(path, uid, gid)
            host[vol["name"]] = path
        sa, token = run.dir / "serviceaccount", spec.get("automountServiceAccountToken", True)
        if token:
            sa.mkdir(exist_ok=True)
            for key, raw in (
                ("token", self.token.encode()),
                ("ca.crt", self.ca),
                ("namespace", run.ns.encode()),
            ):
                (sa / key).write_bytes(raw)
                (sa / key).chmod(0o644)
        for c in [*run.sidecars, *run.containers]:  # each its own mounts, termination log and env
            for mnt in c.spec.get("volumeMounts") or []:
                if mnt["name"] not in host:
                    raise KeyError(f'container {c.spec["name"]}: no volume "{mnt["name"]}"')
                c.mounts.append((str(host[mnt["name"]]), mnt["mountPath"], bool(mnt.get("readOnly"))))
            if token:
                c.mounts.append((str(sa), SA_DIR, True))
            term = run.dir / f"{c.spec['name']}.termination-log"
            term.touch()
            term.chmod(0o666)
            c.mounts.append((str(term), c.spec.get("terminationMessagePath", "/dev/termination-log"), False))
            assert run.net is not None
            env = {
                "HOSTNAME": spec.get("hostname") or run.name,
                "KUBERNETES_SERVICE_HOST": "localhost",  # relayed to the server (net.py)
                "KUBERNETES_SERVICE_PORT": self.api_port,
                **podnames.egress_env(run.net.proxy_port, self.network.block),
            }
            maps = self._referenced(run, "configMapKeyRef", "configmaps")
            env.update(
                decide.container_env(run.pod, c.spec, maps, self._referenced(run, "secretKeyRef", "secrets"))
            )
            run.env[c.spec["name"]] = env

    def _referenced(self, run: PodRun, ref: str, plural: str) -> dict[str, Obj]:
        """The ConfigMaps or Secrets (`ref` configMapKeyRef or secretKeyRef) the pod's env names."""
        spec = run.pod["spec"]
        names = {
            e["valueFrom"][ref]["name"]
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
            for e in c.get("env") or []
            if ref in (e.get("valueFrom") or {})
        }
        return {n: o for n in names if (o := self.api.get("api/v1", run.ns, plural, n)) is not None}

    def _start(self, run: PodRun, c: Container) -> None:
        env = run.env[c.spec["name"]]
        command, args = decide.command_line(c.spec, env)
        if not command and not args:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": "no command"}}
            return
        n = c.restarts
        log = run.dir / f"{c.spec['name']}-{n}.log"
        (run.dir / f"{c.spec['name']}.termination-log").write_text("")
        if self.mode == "podman":
            image = self._image(c.spec.get("image", ""))
            if image is None:
                c.state = {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f"image {c.spec.get('image')!r} is not in podman's store",
                    }
                }
                c.next_start = time.monotonic() + 5
                return
            c.name = podnames.container_name(self.id, run.seq, run.name, n, c.index)
            self._names.append(c.name)
            argv = self._podman_argv(run, c, env, image, command, args)
            popen_env = self.env_podman
        else:
            argv, popen_env = self._process_argv(run, c, env, command, args)
        with open(log, "wb") as out:
            c.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=popen_env,
                start_new_session=True,
            )
        c.started = now_iso()
        c.state = {"running": {"startedAt": c.started}}
        c.killing = False
        c.ready = decide.ProbeTrack(passing=False)
        c.live = decide.ProbeTrack(passing=True)
        c.stop_probes = threading.Event()
        for kind in ("readinessProbe", "livenessProbe"):
            if kind in c.spec:
                threading.Thread(
                    target=self._probe_loop,
                    args=(run, c, kind, c.stop_probes),
                    name=f"probe-{run.name}",
                    daemon=True,
                ).start()

    def _exited(self, run: PodRun, c: Container, done: bool) -> None:
        """A container's process ended: its terminated state, or its restart after the back-off
        (decide.restarts: `done`, the main containers are, ends a sidecar's restarts)."""
        assert c.proc is not None
        c.stop_probes.set()
        code = decide.exit_code_of(c.proc.returncode)
        if self.mode == "podman" and code == 125:  # podman itself failed: say why, as a config error
            code = 128
        c.proc = None
        written = (run.dir / f"{c.spec['name']}.termination-log").read_text(errors="replace")
        log = (run.dir / f"{c.spec['name']}-{c.restarts}.log").read_text(errors="replace")
        term = {
            "exitCode": code,
            "reason": decide.exit_reason(code),
            "startedAt": c.started,
            "finishedAt": now_iso(),
            "containerID": f"{self.mode}://{c.name or run.name}",
        }
        if code > 128:
            term["signal"] = code - 128
        message = decide.termination_message(c.spec.get("terminationMessagePolicy"), written, log, code)
        if message:
            term["message"] = message
        if decide.restarts(c.policy, code, c.sidecar, done) and not self._stop.is_set():
            c.last = {"terminated": term}
            c.next_start = time.monotonic() + decide.restart_delay(c.restarts)
            c.restarts += 1
            c.state = {
                "waiting": {"reason": "CrashLoopBackOff", "message": f"back-off restarting {c.spec['name']}"}
            }
        else:
            c.state = {"terminated": term}

    def _report(self, run: PodRun) -> None:
        states, sidecars = [c.state for c in run.containers], [c.state for c in run.sidecars]
        policy = run.pod["spec"].get("restartPolicy", "Always")
        phase = "Pending" if run.failed else decide.pod_phase(policy, states, sidecars)
        statuses = [c.status() for c in run.containers]
        inits = [c.status() for c in run.sidecars]
        ready = decide.pod_ready(phase, statuses + inits)
        old = run.pod.get("status") or {}
        initialized = run.initialized or not run.sidecars
        status = {
            "phase": phase,
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "hostIP": run.ip,
            "startTime": run.start,
            "conditions": decide.pod_conditions(True, ready, now_iso(), old.get("conditions"), initialized),
            "containerStatuses": statuses,
        }
        if inits:
            status["initContainerStatuses"] = inits
        if status != run.reported:
            self.api.status("api/v1", run.ns, "pods", run.name, status)
            run.reported = status

    def _probe_loop(self, run: PodRun, c: Container, kind: str, stop: threading.Event) -> None:
        probe = c.spec[kind]
        delay, period, timeout = decide.probe_timing(probe)
        try:
            self.network.enter_hub()  # this thread only, for its life: the pod's address is reached there
        except OSError as exc:
            self.errors.append(f"probe of {run.ns}/{run.name}: {exc}"[:2000])
            return
        if stop.wait(delay):
            return
        while not stop.is_set():
            ok = self._probe_once(run, c, probe, timeout)
            if kind == "readinessProbe":
                c.ready = c.ready.record(ok, probe)
            else:
                c.live = c.live.record(ok, probe)
            if stop.wait(period):
                return

    def _probe_once(self, run: PodRun, c: Container, probe: Obj, timeout: float) -> bool:
        try:
            if "httpGet" in probe:  # not urllib: the runner's own proxy settings must not apply
                get = probe["httpGet"]
                port = decide.port_number(c.spec, get["port"])
                conn = http.client.HTTPConnection(run.ip, port, timeout=timeout)
                try:
                    conn.request("GET", get.get("path", "/"))
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
            if "tcpSocket" in probe:
                port = decide.port_number(c.spec, probe["tcpSocket"]["port"])
                with socket.create_connection((run.ip, port), timeout=timeout):
                    return True
            if "exec" in probe:
                cmd = [decide.expand(a, run.env[c.spec["name"]]) for a in probe["exec"]["command"]]
                proc = c.proc
                if proc is None:
                    return False
                if self.mode == "podman":
                    argv = ["podman", "exec", c.name, *cmd]
                else:
                    argv = ["nsenter", "-t", str(proc.pid), "-m", "-u", "-n", "--", *cmd]
                env = {**os.environ, **run.env[c.spec["name"]]} if self.mode == "process" else self.env_podman
                res = subprocess.run(argv, capture_output=True, timeout=timeout, env=env)
                return res.returncode == 0
        except (OSError, ValueError, http.client.HTTPException, subprocess.TimeoutExpired):
            return False
        return False

    def _podman_argv(
        self, run: PodRun, c: Container, env: dict[str, str], image: str, command: list[str], args: list[str]
    ) -> list[str]:
        spec = run.pod["spec"]
        pctx, cctx = spec.get("securityContext") or {}, c.spec.get("securityContext") or {}
        uid = cctx.get("runAsUser", pctx.get("runAsUser"))
        gid = cctx.get("runAsGroup", pctx.get("runAsGroup", uid))
        assert run.net is not None
        argv = ["podman", "run", "--rm", f"--name={c.name}", f"--network=ns:{run.net.path}", "--pull=never"]
        argv.append(f"--hostname={spec.get('hostname') or run.name}")
        argv.append(f"--volume={run.dir / 'hosts'}:/etc/hosts:ro")
        if uid is not None:
            argv.append(f"--user={uid}:{gid}")
        if pctx.get("fsGroup") is not None:
            argv.append(f"--group-add={pctx['fsGroup']}")
        if cctx.get("readOnlyRootFilesystem"):
            argv += ["--read-only", "--read-only-tmpfs=false"]
        drop = (cctx.get("capabilities") or {}).get("drop") or []
        if "ALL" in drop:
            argv.append("--cap-drop=all")
        if cctx.get("allowPrivilegeEscalation") is False:
            argv.append("--security-opt=no-new-privileges")
        for k, v in env.items():
            argv.append(f"--env={k}={v}")
        inside = {dst: Path(src) for src, dst, _ in c.mounts if Path(src).is_dir()}
        for src, dst, ro in c.mounts:  # runc cannot mkdir a nested mount point in a read-only volume
            self._mount_point(Path(dst), Path(src).is_dir(), inside, host=False)
            argv.append(f"--volume={src}:{dst}{':ro' if ro else ''}")
        if command:
            argv.append(f"--entrypoint={json.dumps(command)}")
        return [*argv, image, *args]

    def _process_argv(
        self, run: PodRun, c: Container, env: dict[str, str], command: list[str], args: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        root_str = str(self.root)

        def under(path: str, dst: str) -> bool:
            return path == dst or path.startswith(dst.rstrip("/") + "/")

        mounts = [(str(run.dir / "hosts"), "/etc/hosts", True), *c.mounts]
        sources = [root_str, *(src for src, _, _ in mounts)]

        def hides(dst: str) -> bool:
            return any(under(src, dst) for src in sources)

        # mounts over an ancestor of the runner's directory (/tmp) or of a source (/dev/shm, over the
        # Memory emptyDirs) last: they would hide the sources of those after them
        mounts.sort(key=lambda m: (hides(m[1]), m[1].count("/")))
        inside = {dst: Path(src) for src, dst, _ in mounts if Path(src).is_dir()}
        # this Python and this checkout (an editable install) stay visible where a volume covers them
        # (a checkout under /tmp, under the pods' emptyDir at /tmp): bound aside first, back after
        keep = sorted({sys.prefix, sys.base_prefix, str(REPO)})
        hidden = [k for k in keep if any(under(k, dst) for _, dst, _ in mounts)]
        stash = self._stash() / run.uid if hidden else None
        lines = ["set -e", f"hostname {shlex.quote(run.pod['spec'].get('hostname') or run.name)}"]
        for i, k in enumerate(hidden):
            lines += [f"mkdir -p {stash}/{i}", f"mount --bind {shlex.quote(k)} {stash}/{i}"]
        for src, dst, _ in mounts:
            self._mount_point(Path(dst), Path(src).is_dir(), inside)
            lines.append(f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}")
        for i, k in enumerate(hidden):
            lines += [f"mkdir -p {shlex.quote(k)}", f"mount --bind {stash}/{i} {shlex.quote(k)}"]
        for _, dst, ro in mounts:
            if ro:
                lines.append(f"mount -o remount,bind,ro {shlex.quote(dst)}")
        lines.append('exec "$@"')
        bindir = str(Path(sys.executable).parent)
        popen_env = {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", **env}
        assert run.net is not None
        argv = [
            *("nsenter", f"--net={run.net.path}", "--"),
            *("unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", "\n".join(lines)),
        ]
        return [*argv, "sh", *command, *args], popen_env

    def _stash(self) -> Path:
        """A host directory outside every volume's path (/run), for process mode's stashed binds:
        created once per runner, removed when it stops."""
        stash = Path("/run") / f"graphtrain-podrunner-{os.getpid()}-{id(self):x}"
        self._mount_point(stash, True, {})
        return stash

    def _mount_point(self, dst: Path, is_dir: bool, inside: dict[str, Path], host: bool = True) -> None:
        """Make the mount point: inside a volume mounted above it (as the runtime does), else on the host
        (recorded, removed when the runner stops)."""
        for outer in sorted(inside, key=len, reverse=True):
            if str(dst).startswith(outer.rstrip("/") + "/") and str(dst) != outer:
                target = inside[outer] / str(dst)[len(outer.rstrip("/")) + 1 :]
                if not target.exists():
                    target.mkdir(parents=True) if is_dir else target.touch()
                return
        if dst.exists() or not host:
            return
        with self._points_lock:
            missing = [p for p in [dst, *dst.parents] if not p.exists()]
            for p in reversed(missing):
                if p == dst and not is_dir:
                    p.touch()
                else:
                    p.mkdir()
                self._created_points.append(p)

    def _kill_pod(self, run: PodRun, grace: float) -> None:
        """Stop a pod as the kubelet does (on threads): its main containers at once, then its sidecars
        in reverse order in what is left of `grace` (a second at least); then remove its network
        namespace and its Memory emptyDirs."""
        deadline = time.monotonic() + grace
        killers = [t for c in run.containers if (t := self._kill_container(c, grace)) is not None]

        def release() -> None:
            for t in killers:
                t.join(timeout=grace + 60)
            self._stop_in_order(list(reversed(run.sidecars)), max(1.0, deadline - time.monotonic()))
            if run.net is not None:
                self.network.remove(run.net)
            if run.memory is not None:
                shutil.rmtree(run.memory, ignore_errors=True)

        self._spawn(release)

    def _spawn(self, target: Any, *args: Any) -> None:
        """`target(*args)` on a thread the runner joins when it stops."""
        t = threading.Thread(target=target, args=args, name="podrunner-stop", daemon=True)
        t.start()
        self._killers.append(t)

    def _stop_in_order(self, containers: list[Container], grace: float) -> None:
        """SIGTERM each container in turn and wait for it to end, SIGKILL once `grace` seconds have
        passed since the first (how the kubelet stops sidecars: in reverse order, after the rest)."""
        deadline = time.monotonic() + grace
        for c in containers:
            proc, name = c.proc, c.name
            c.stop_probes.set()
            if proc is None:
                continue
            self._signal(proc, name, signal.SIGTERM)
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(proc, name, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)

    def _kill_container(self, c: Container, grace: float) -> threading.Thread | None:
        """SIGTERM, then SIGKILL after `grace` seconds, on a thread (the loop goes on meanwhile)."""
        proc, name = c.proc, c.name
        c.stop_probes.set()
        if proc is None:
            return None

        def kill() -> None:
            self._signal(proc, name, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(proc, name, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)

        t = threading.Thread(target=kill, name="podrunner-kill", daemon=True)
        t.start()
        self._killers.append(t)
        return t

    def _signal(self, proc: subprocess.Popen, name: str, sig: int) -> None:
        if self.mode == "podman":
            self._podman("kill", "--signal", str(int(sig)), name, timeout=30)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    def _podman(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env_podman
        )

    def _image_id(self, ref: str) -> str | None:
        out = self._podman("image", "inspect", "--format", "{{.Id}}", ref)
        return out.stdout.strip() if out.returncode == 0 else None

    def _image(self, ref: str) -> str | None:
        if ref not in self.images:
            self.images[ref] = self._image_id(ref) or ""
        return self.images[ref] or None
