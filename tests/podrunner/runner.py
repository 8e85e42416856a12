"""The pod runner: the test API server's missing controllers and kubelet, so an operator's pods run.

    with PodRunner(kubeconfig, mode="podman", image="localhost/graphtrain:ci", root=tmp_path) as runner:
        ...  # create a GraphTraining; its Job, StatefulSet and pods now run, their status is written

One thread polls the API server (every POLL seconds, every call with a timeout) and plays, with the
decisions of decide.py:
- the Job controller (one completion, backoffLimit, Complete / Failed conditions), the StatefulSet
  controller (Parallel, deleted or finished pods recreated, readyReplicas), the volume provisioner (a
  claim is Bound to a host directory) and the garbage collector (background propagation, every GC
  seconds);
- the kubelet: each pod gets a network namespace of its own with its own address (10.<block>.x.y, a
  block per runner so that concurrent runners never meet; net.py says how pods reach each other, the
  API server and the outside, and why) and a hosts file (localhost, its own name, every pod's
  <hostname>.<subdomain>.<ns>.svc[.cluster.local] and each Service's endpoints), rewritten in place as
  pods come and go (glibc and libzmq read /etc/hosts at each lookup); its volumes as host directories
  (ConfigMap and Secret keys as files with their modes, a claim as one directory per claim shared by
  its pods, emptyDir per pod), a service-account directory (token and CA of the kubeconfig: test pods
  act as the kubeconfig's user, the server's admin; KUBERNETES_SERVICE_HOST=localhost, the name on its
  certificate, relayed inside the pod's namespace to the server on the host's loopback), env with the
  downward API and $(VAR) expansion (and the egress proxy's HTTP(S)_PROXY), the termination message file
  (FallbackToLogsOnError), restartPolicy with a short doubling backoff, exec / httpGet / tcpSocket
  probes with their timings (from the hub's namespace, as a node's kubelet probes its pods), and
  SIGTERM then SIGKILL after terminationGracePeriodSeconds when a pod is deleted (its main containers,
  then its sidecars in reverse order), its namespace removed once its containers are gone. A re-created
  pod (a new uid under the same name) gets a new number: a new address, namespace and container names
  (podnames.container_name), never those of the one still stopping. Every container has its own
  volumeMounts, termination-log file and env; containers of a pod share its network namespace, host
  name and volumes.
- native sidecars (Kubernetes >= 1.29: initContainers with restartPolicy Always), as the operator's
  worker pods hold their shard server: started first, in order, each once the one before it runs, the
  main containers once all do (Initialized); restarted with the backoff whenever they exit, whatever the
  pod's restartPolicy, until the main containers are all done (exited for good), then stopped in
  reverse order (SIGTERM, SIGKILL after the capped grace period). The phase is the main containers'
  (a sidecar's 143 fails nothing), reported once the sidecars are stopped; Ready needs every
  container ready, sidecars included (their probes played like the others'); initContainerStatuses
  report them. Refused at creation: plain init containers (run to completion first) and a sidecar's
  startupProbe (decide.unplayed).
- an emptyDir of medium Memory is tmpfs: a directory under the host's /dev/shm (podnames.memory_dir:
  /dev/shm/gtpr<block>/<pod dir>/<volume>, mode 1777, owned by runAsUser and fsGroup), removed when
  its pod is gone or the runner stops (a killed runner's by the next of its block); its sizeLimit is
  not enforced. Mounted at /dev/shm it shares POSIX shared memory (multiprocessing.shared_memory)
  between a pod's containers, in both modes (podman's `--volume=DIR:/dev/shm` replaces its own
  /dev/shm tmpfs, --read-only and --ipc as they are).

Two modes run a container:
- podman: `podman run` of the image as the pod says (--user, --read-only, --cap-drop=ALL,
  no-new-privileges, --network ns:/run/netns/<the pod's> with --hostname, every volume, the hosts
  file over /etc/hosts). The image is resolved to its id when the runner starts, so a rebuild of its
  tag meanwhile changes nothing under a running test.
- process: the same command line as a host process (the current Python environment's `graphtrain`
  first on PATH) in the pod's network namespace (`nsenter --net=/run/netns/<the pod's>`) and its own
  mount and UTS namespaces (`unshare --mount --uts --propagation private`):
  the pod's host name, and each volume and the hosts file bind-mounted at its container path (mount
  points the runner had to create are removed when it stops). It runs as root without an image: fast
  for local work, not a check of the image or of uid 10001.

Scheduling, as far as gangs need it: with `capacity` the runner binds at most that many running pods
at once, a pod alone when there is a free place, a pod of a group (a PodGroup's minMember, Volcano's or
the coscheduling plugin's, or Kueue's pod-group-total-count) only when every member exists and all the
unbound ones fit together; a pod it cannot bind stays Pending with PodScheduled False / Unschedulable
saying why (decide.unschedulable). Without `capacity` every pod is bound at once.

Not played: plain init containers (sidecars are), startup probes (refused on sidecars, ignored on
main containers), Job parallelism, activeDeadlineSeconds and pod failure policies, StatefulSet
OrderedReady and rolling updates, resources (none is enforced; `capacity` counts pods, an emptyDir's
sizeLimit is not held), nodes, ConfigMap volumes updated after start, subPath mounts. A pod asking for
what is refused fails at creation (CreateContainerConfigError, Pending) with a message saying so
rather than run differently.

Its parts: api.py (the REST calls), pods.py (what the runner keeps of a pod and its containers),
containers.py (volumes, and starting, probing, reporting and stopping containers), decide.py (every
decision, pure), podnames.py (its names and addresses) and net.py (the pods' network).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

import urllib3
import yaml

from tests.podrunner import decide, podnames
from tests.podrunner.api import Api, ApiError, Obj
from tests.podrunner.containers import ContainerRuntime
from tests.podrunner.net import Network
from tests.podrunner.pods import Container, PodRun, now_iso

POLL = 0.3  # seconds between two passes over the API server
GC = 2.0  # seconds between two garbage collections
CONTAINERS_CONF = Path(__file__).resolve().parents[1] / "images" / "containers.conf"
# kinds the garbage collector sweeps and whose objects may own others: (api path, plural)
GC_KINDS = [
    ("api/v1", "pods"),
    ("api/v1", "services"),
    ("api/v1", "configmaps"),
    ("api/v1", "secrets"),
    ("api/v1", "persistentvolumeclaims"),
    ("api/v1", "serviceaccounts"),
    ("apis/batch/v1", "jobs"),
    ("apis/apps/v1", "statefulsets"),
    ("apis/policy/v1", "poddisruptionbudgets"),
    ("apis/networking.k8s.io/v1", "networkpolicies"),
    ("apis/rbac.authorization.k8s.io/v1", "roles"),
    ("apis/rbac.authorization.k8s.io/v1", "rolebindings"),
]
OWNER_ONLY = [("apis/graphtrain.io/v1alpha1", "graphtrainings")]


# -------------------------------------------------------------------------------- a container


# ----------------------------------------------------------------------------------- the runner


class PodRunner(ContainerRuntime):
    def __init__(
        self,
        kubeconfig: str,
        mode: str = "podman",
        image: str | None = None,
        root: Path | None = None,
        grace_cap: float = 30.0,
        capacity: int | None = None,
    ):
        if mode not in ("podman", "process"):
            raise ValueError(f"mode must be podman or process, not {mode!r}")
        self.kubeconfig, self.mode = kubeconfig, mode
        self.root = Path(root or Path.cwd() / "podrunner").resolve()
        self.grace_cap = grace_cap
        self.capacity = capacity  # pods running at once (the scheduler's room), None: no limit
        self.held: dict[tuple[str, str], str] = {}  # pods not bound, and why (what their status says)
        self.api = Api(kubeconfig)
        self.id = uuid.uuid4().hex[:6]
        self.pods: dict[tuple[str, str], PodRun] = {}
        self.errors: list[str] = []
        self.images: dict[str, str] = {}
        self._pin = image
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._created_points: list[Path] = []
        self._points_lock = threading.Lock()
        self._killers: list[threading.Thread] = []
        self._last_gc = 0.0
        self._seq = 0  # pods admitted so far
        self._names: list[str] = []  # every podman container name this runner used
        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        server = urllib3.util.parse_url(cluster["server"])
        self.api_port = str(server.port or 443)
        self.network = Network(((server.host or "localhost").strip("[]"), int(self.api_port)))
        ca = cluster.get("certificate-authority")
        self.ca = (
            Path(ca).read_bytes() if ca else base64.b64decode(cluster.get("certificate-authority-data", ""))
        )
        self.token = user.get("token", "")
        self.env_podman = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}

    # -------------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> PodRunner:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.mode == "podman":
            if shutil.which("podman") is None:
                raise RuntimeError("podman is not installed (apt-get install podman runc uidmap)")
            if self._pin:
                self.images[self._pin] = self._image_id(self._pin) or ""
                if not self.images[self._pin]:
                    raise RuntimeError(f"image {self._pin} is not in podman's store: build it first")
        else:
            for tool in ("unshare", "nsenter", "mount"):
                if shutil.which(tool) is None:
                    raise RuntimeError(f"{tool} is missing (util-linux)")
        if shutil.which("ip") is None:
            raise RuntimeError("ip is missing (iproute2): every pod gets a network namespace")
        if os.geteuid() != 0:
            raise RuntimeError(
                "the pod runner makes network namespaces (and mounts, in process mode): run as root"
            )
        try:
            self.network.open()
        except BaseException:
            self.network.close()
            raise
        # a dead runner's emptyDirs of medium Memory, of this block or of those whose namespaces went
        for block in {self.network.block, *(podnames.netns_block(n) for n in self.network.stale)}:
            if block is not None:
                shutil.rmtree(podnames.memory_dir(block), ignore_errors=True)
        self._thread = threading.Thread(target=self._loop, name="podrunner", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for run in list(self.pods.values()):
            self._kill_pod(run, grace=2.0)
        for t in self._killers:
            t.join(timeout=60)
        if self.mode == "podman" and self._names:  # conmon may keep a container whose client died
            self._podman("rm", "--force", "--ignore", "--time", "0", *self._names, timeout=120)
        shutil.rmtree(podnames.memory_dir(self.network.block), ignore_errors=True)  # while the block is ours
        self.network.close()  # every pod's namespace too, those of pods whose containers outlived the joins
        with self._points_lock:
            for point in reversed(self._created_points):
                if point.name.startswith("graphtrain-podrunner-"):  # the stash and its per-pod dirs
                    shutil.rmtree(point, ignore_errors=True)
                with contextlib.suppress(OSError):
                    point.rmdir() if point.is_dir() else point.unlink()

    # ---------------------------------------------------------------------------- what tests use

    def logs(self, ns: str, name: str, tail: int | None = 6000) -> str:
        """Every log of a pod's containers on this runner (all attempts, every pod of that name), each
        cut to its last `tail` characters (None: whole), for a test's message or check."""
        out = []
        for path in sorted((self.root / "pods").glob(f"{ns}_{name}_*/*.log")):
            text = path.read_text(errors="replace")
            out.append(f"--- {path.parent.name}/{path.name}\n{text if tail is None else text[-tail:]}")
        return "\n".join(out)

    def pid(self, ns: str, name: str, container: str | None = None) -> int | None:
        """The host pid of a pod's container, main or sidecar, by name (None: its first main container)
        (process mode; podman: its client), if running."""
        run = self.pods.get((ns, name))
        c = run.find(container) if run is not None else None
        return c.proc.pid if c is not None and c.proc is not None else None

    def kill_container(
        self, ns: str, name: str, sig: int = signal.SIGKILL, container: str | None = None
    ) -> None:
        """Send a signal to a pod's container, main or sidecar, by name (None: its first main container),
        as a crash or the OOM killer would. KeyError for a pod or container this runner does not have."""
        run = self.pods[(ns, name)]
        c = run.find(container)
        if c is None:
            raise KeyError(f"pod {ns}/{name} has no container {container!r}")
        if self.mode == "podman":
            self._podman("kill", "--signal", str(int(sig)), c.name, timeout=30)
        elif c.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, sig)

    # ------------------------------------------------------------------------------------ loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._pass()
            except Exception as exc:  # noqa: BLE001 - a test reads self.errors; the loop goes on
                if not (isinstance(exc, ApiError) and exc.status in (404, 409, 429)):
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:2000])
            self._stop.wait(max(0.0, POLL - (time.monotonic() - started)))

    def _pass(self) -> None:
        pods = self.api.list("api/v1", "pods")
        jobs = self.api.list("apis/batch/v1", "jobs")
        sets = self.api.list("apis/apps/v1", "statefulsets")
        services = self.api.list("api/v1", "services")
        for job in jobs:
            self._job(job, pods)
        for sts in sets:
            self._statefulset(sts, pods)
        self._claims()
        if time.monotonic() - self._last_gc > GC:
            self._gc()
            self._last_gc = time.monotonic()
        self._kubelet(pods, services)

    # ----------------------------------------------------------------------------- controllers

    def _job(self, job: Obj, pods: list[Obj]) -> None:
        m = decide.meta(job)
        if m.get("deletionTimestamp"):
            return
        create, status = decide.job_decision(job, pods)
        old = job.get("status") or {}
        status["startTime"] = old.get("startTime") or now_iso()
        if any(c["type"] == "Complete" for c in status.get("conditions") or []):
            status["completionTime"] = old.get("completionTime") or now_iso()
        stamped = []
        for c in status.get("conditions") or []:
            prev = next((o for o in old.get("conditions") or [] if o.get("type") == c["type"]), {})
            stamped.append({**c, "lastTransitionTime": prev.get("lastTransitionTime") or now_iso()})
        if stamped:
            status["conditions"] = stamped
        if {k: old.get(k) for k in status} != status:
            self.api.status("apis/batch/v1", m["namespace"], "jobs", m["name"], status)
        if create:
            name = f"{m['name']}-{uuid.uuid4().hex[:5]}"
            labels = {
                "job-name": m["name"],
                decide.LABEL_JOB: m["name"],
                "controller-uid": m["uid"],
                "batch.kubernetes.io/controller-uid": m["uid"],
            }
            self.api.create("api/v1", m["namespace"], "pods", decide.pod_from_template(job, name, labels))

    def _statefulset(self, sts: Obj, pods: list[Obj]) -> None:
        m = decide.meta(sts)
        if m.get("deletionTimestamp"):
            return
        create, delete, status = decide.sts_decision(sts, pods)
        for name in delete:
            self.api.delete("api/v1", m["namespace"], "pods", name)
        for ordinal in create:
            self.api.create("api/v1", m["namespace"], "pods", decide.sts_pod(sts, ordinal))
        old = sts.get("status") or {}
        if {k: old.get(k) for k in status} != status:
            self.api.status("apis/apps/v1", m["namespace"], "statefulsets", m["name"], status)

    def _claims(self) -> None:
        for pvc in self.api.list("api/v1", "persistentvolumeclaims"):
            m = decide.meta(pvc)
            if (pvc.get("status") or {}).get("phase") != "Bound" and not m.get("deletionTimestamp"):
                self._claim_dir(m["namespace"], m["name"])
                status = {"phase": "Bound", "accessModes": (pvc.get("spec") or {}).get("accessModes", [])}
                self.api.status("api/v1", m["namespace"], "persistentvolumeclaims", m["name"], status)

    def _gc(self) -> None:
        objects: list[tuple[str, str, Obj]] = []
        uids: set[str] = set()
        for prefix, plural in GC_KINDS + OWNER_ONLY:
            try:
                items = self.api.list(prefix, plural)
            except ApiError as exc:
                if exc.status == 404:  # a kind this server does not serve
                    continue
                raise
            uids |= {decide.meta(i).get("uid", "") for i in items}
            if (prefix, plural) in GC_KINDS:
                objects += [(prefix, plural, i) for i in items]
        victims = {id(v) for v in decide.gc_victims([o for _, _, o in objects], uids)}
        for prefix, plural, obj in objects:
            if id(obj) in victims:
                m = decide.meta(obj)
                self.api.delete(prefix, m["namespace"], plural, m["name"])

    # -------------------------------------------------------------------------------- kubelet

    def _kubelet(self, pods: list[Obj], services: list[Obj]) -> None:
        seen = {}
        groups = self._pod_groups() if self.capacity is not None else {}
        for pod in pods:
            m = decide.meta(pod)
            key = (m["namespace"], m["name"])
            run = self.pods.get(key)
            if run is not None and run.uid != m["uid"]:  # deleted and re-created meanwhile
                self._forget(run)
                run = None
            if run is None:
                if decide.terminal(pod) or m.get("deletionTimestamp"):
                    continue
                admitted = set(self.pods)
                in_use = sum(not decide.terminal(r.pod) for r in self.pods.values())
                why = decide.unschedulable(pod, pods, admitted, in_use, self.capacity, groups)
                if why is not None:  # the scheduler's part: not bound, and its status says why
                    self._hold(pod, why)
                    continue
                self.held.pop(key, None)
                run = self._admit(pod)
            run.pod = pod
            seen[key] = run
        for key, run in list(self.pods.items()):
            if key not in seen:  # deleted from the API: stop it (SIGTERM, grace, SIGKILL)
                self._forget(run)
        known = [
            {**r.pod, "status": {**(r.pod.get("status") or {}), "podIP": r.ip}} for r in self.pods.values()
        ]
        names = decide.dns_names(known, services)
        for run in self.pods.values():
            self._hosts(run, names)
        for run in list(self.pods.values()):
            self._step(run)

    def _pod_groups(self) -> dict[tuple[str, str], int]:
        """minMember of every PodGroup (Volcano's and the coscheduling plugin's) the API server serves."""
        out: dict[tuple[str, str], int] = {}
        for prefix in ("apis/scheduling.volcano.sh/v1beta1", "apis/scheduling.x-k8s.io/v1alpha1"):
            try:
                items = self.api.list(prefix, "podgroups")
            except ApiError as exc:
                if exc.status == 404:  # its CRD is not installed
                    continue
                raise
            for pg in items:
                m = decide.meta(pg)
                out[(m["namespace"], m["name"])] = int((pg.get("spec") or {}).get("minMember") or 1)
        return out

    def _hold(self, pod: Obj, why: str) -> None:
        """A pod the scheduler cannot bind: Pending, PodScheduled False / Unschedulable with `why`."""
        m = decide.meta(pod)
        key = (m["namespace"], m["name"])
        if self.held.get(key) == why:
            return
        self.held[key] = why
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": why,
            "lastTransitionTime": now_iso(),
        }
        self.api.status(
            "api/v1", m["namespace"], "pods", m["name"], {"phase": "Pending", "conditions": [scheduled]}
        )

    def _forget(self, run: PodRun) -> None:
        self.pods.pop((run.ns, run.name), None)
        self._kill_pod(run, grace=self._grace(run))

    def _admit(self, pod: Obj) -> PodRun:
        """A new pod: a new number (so a new address, namespace and container names, never those of a
        pod of the same name still stopping), its namespace, hosts file and volumes."""
        m, spec = decide.meta(pod), pod["spec"]
        seq, self._seq = self._seq, self._seq + 1
        ip = podnames.pod_address(self.network.block, seq)
        pdir = self.root / "pods" / f"{m['namespace']}_{m['name']}_{m['uid'][:8]}"
        pdir.mkdir(parents=True, exist_ok=True)
        policy = spec.get("restartPolicy", "Always")
        inits = spec.get("initContainers") or []
        first: Obj = {"waiting": {"reason": "PodInitializing" if inits else "ContainerCreating"}}
        run = PodRun(
            m["namespace"],
            m["name"],
            m["uid"],
            ip,
            pdir,
            pod,
            [
                Container(c, policy, index=len(inits) + i, state=dict(first))
                for i, c in enumerate(spec.get("containers") or [])
            ],
            seq=seq,
            sidecars=[Container(c, "Always", sidecar=True, index=i) for i, c in enumerate(inits)],
        )
        self.pods[(run.ns, run.name)] = run
        pod.setdefault("status", {})["podIP"] = ip
        pod["status"]["hostIP"] = ip
        try:
            run.net = self.network.add(seq)
        except OSError as exc:  # the runner's own failure: a test fails at once (runner.errors)
            run.failed = f"no network namespace: {exc}"
            self.errors.append(f"pod {run.ns}/{run.name}: {run.failed}"[:2000])
            return run
        try:
            refused = decide.unplayed(spec)
            if refused:
                raise ValueError(refused)
            self._volumes(run)
        except (ValueError, KeyError, OSError) as exc:
            run.failed = str(exc)
        return run

    def _hosts(self, run: PodRun, names: list[tuple[str, str]]) -> None:
        hostname = run.pod["spec"].get("hostname") or run.name
        text = decide.hosts_file(run.ip, hostname, names)
        if text == run.hosts:
            return
        path = run.dir / "hosts"
        # in place (same inode): the file is bind-mounted into running containers; overwritten from the
        # start, then cut. Not "a" mode: it appends every write, so the first address of a name (the
        # first a resolver finds) stayed, and a recreated pod was never found at its new one
        path.touch()
        with open(path, "r+b") as f:
            f.write(text.encode())
            f.truncate()
        path.chmod(0o644)
        run.hosts = text

    # -------------------------------------------------------------------------- containers

    def _step(self, run: PodRun) -> None:
        """One pass of the kubelet over a pod: exits (the main containers' first: whether they are done
        decides whether a sidecar that exited comes back), the sidecars stopped once they are done,
        else starts and restarts in the order of decide.start_gate, liveness, then the status."""
        if run.failed:
            for c in [*run.sidecars, *run.containers]:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": run.failed}}
            self._report(run)
            return
        for c in run.containers:
            if c.proc is not None and c.proc.poll() is not None:
                self._exited(run, c, done=False)
        done = decide.mains_done([c.state for c in run.containers])
        for c in run.sidecars:
            if c.proc is not None and c.proc.poll() is not None:
                self._exited(run, c, done)
        if done and run.sidecars and not run.stopping:
            run.stopping = True
            for c in run.sidecars:  # no restart, no liveness kill of theirs from now on
                c.state, c.last, c.restarts = decide.settled_sidecar(c.state, c.last, c.restarts)
                c.stop_probes.set()
                c.killing = True
            self._spawn(self._stop_in_order, list(reversed(run.sidecars)), self._grace(run))
        if not done:
            self._start_due(run)
        for c in [*run.sidecars, *run.containers]:
            if c.proc is not None and not c.live.passing and not c.killing:
                c.killing = True  # liveness failed: restart it, as the kubelet does
                self._kill_container(c, self._grace(run))
        self._report(run)

    def _start_due(self, run: PodRun) -> None:
        """Start the containers whose (re)start is due: sidecars in order, each once the one before it
        runs (all in one pass when they start at once), the main containers once every sidecar ran."""

        def due(c: Container) -> bool:
            return c.proc is None and "terminated" not in c.state and now >= c.next_start

        now, mains = time.monotonic(), False
        for _ in range(len(run.sidecars) + 1):  # a bound: a sidecar may fail to start (no command)
            may, mains = decide.start_gate(run.initialized, ["running" in c.state for c in run.sidecars])
            todo = [c for c in run.sidecars[:may] if due(c)]
            for c in todo:
                self._start(run, c)
            if not todo:
                break
        run.initialized = run.initialized or mains
        if run.initialized:
            for c in run.containers:
                if due(c):
                    self._start(run, c)

    def _grace(self, run: PodRun) -> float:
        """The pod's terminationGracePeriodSeconds (default 30), capped by the runner's grace_cap."""
        return min(float(run.pod["spec"].get("terminationGracePeriodSeconds", 30)), self.grace_cap)

    # -------------------------------------------------------------------------------- probes

    # ------------------------------------------------------------------------ starting, stopping

    # ---------------------------------------------------------------------------------- podman
