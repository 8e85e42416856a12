"""`graphtrain operator`: the operator's command, mounted by the top-level command (cli/).

What one operator process does, in order: read its configuration (config.py; a bad file is one line
and exit 1), load the Kubernetes credentials (none: one line and exit 1), serve /healthz and /readyz
and /metrics (endpoints.py), then either run the kopf handlers at once or, with --leader-elect, only
while it holds the Lease (leader.py):

- with --lease-owner, the Lease carries an ownerReference to that Deployment (the chart's own, read
  before campaigning; unreadable: one line and exit 1), so it goes with the release: helm does not
  know the Lease, made at run time, and deletes the RBAC that would let a stopping pod delete it.
- standby: it campaigns; SIGTERM ends it (exit 0).
- leader: kopf runs in the main thread (it handles SIGTERM itself). SIGTERM stops kopf, then the Lease
  is released so a standby takes over at its next try; exit 0. Losing the Lease (no renewal within the
  renew deadline, or another holder) stops kopf through its stop flag and the process exits 1, as
  controller-runtime's managers do, so the pod restarts as a standby; if kopf has not stopped by the
  time the Lease expires for the others, the process exits 1 anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from graphtrain.operator.logs import LogFormat

if TYPE_CHECKING:  # the command's imports stay inside it: `graphtrain --help` loads no operator code
    from graphtrain.operator.config import OperatorConfig
    from graphtrain.operator.leader import Elector, Timing

app = typer.Typer()


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


@app.command("operator")
def operator_cmd(
    config_path: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="operator configuration YAML: images, per-role pod defaults, storage, networkPolicy, "
            "podDisruptionBudget",
            show_default="$GRAPHTRAIN_OPERATOR_CONFIG, else the built-in defaults",
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="watch only these namespaces (default: all)")
    ] = None,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect", help="run the handlers only while holding a coordination.k8s.io/v1 Lease"
        ),
    ] = False,
    lease_name: Annotated[str, typer.Option(help="name of the Lease")] = "graphtrain-operator",
    lease_namespace: Annotated[
        str | None, typer.Option(help="namespace of the Lease", show_default="$POD_NAMESPACE, else default")
    ] = None,
    lease_owner: Annotated[
        str | None,
        typer.Option(
            help="Deployment (in the Lease's namespace) that owns the Lease: the garbage collector deletes "
            "the Lease with it (the chart passes the operator's own)",
            show_default="none: the Lease outlives the operator",
        ),
    ] = None,
    lease_duration: Annotated[
        int, typer.Option(min=1, help="seconds a Lease holds unrenewed before a standby takes it")
    ] = 15,
    renew_deadline: Annotated[
        float, typer.Option(help="seconds the leader keeps trying to renew before it gives up and exits 1")
    ] = 10.0,
    retry_period: Annotated[
        float, typer.Option(help="seconds between tries to take or renew the Lease")
    ] = 2.0,
    health_address: Annotated[
        str, typer.Option(help="HOST:PORT of GET /healthz and /readyz (port 0: any free port)")
    ] = "0.0.0.0:8081",
    metrics_address: Annotated[
        str, typer.Option(help="HOST:PORT of GET /metrics (Prometheus; port 0: any free port)")
    ] = "0.0.0.0:8080",
    log_format: Annotated[
        LogFormat,
        typer.Option(help="text: one timestamped line per record; json: one JSON object per line"),
    ] = LogFormat.text,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="also kopf's line per handler run and per watch event")
    ] = False,
) -> None:
    """Run the GraphTraining operator with this process' kube credentials (in-cluster or $KUBECONFIG).
    With --leader-elect, of several replicas only the holder of the Lease reconciles (identity
    $POD_NAME, else hostname-pid); SIGTERM releases it so a standby takes over at once."""
    from graphtrain.operator import config as operator_config
    from graphtrain.operator import endpoints, k8s, leader, lease_store, logs

    try:
        config = operator_config.load(config_path)
        operator_config.loop_settings()  # handlers' module reads them at import
    except operator_config.ConfigError as exc:
        raise _fail(str(exc)) from None
    timing = leader.Timing(float(lease_duration), renew_deadline, retry_period)
    if leader_elect and timing.problems():
        raise _fail("; ".join(timing.problems()))
    try:
        health = endpoints.parse_address(health_address)
        metrics = endpoints.parse_address(metrics_address)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    try:  # kopf would log the failure and retry forever: say it once and stop
        k8s.load_config()
    except k8s.CredentialsError as exc:
        raise _fail(str(exc)) from None
    unserved = k8s.crd_unserved()  # kopf would serve nothing, ready all the same: exit, restarted later
    if unserved is not None:
        raise _fail(unserved)

    import kopf

    json_lines = log_format == logs.LogFormat.json
    kopf.configure(
        verbose=verbose,
        log_format=kopf.LogFormat.JSON if json_lines else kopf.LogFormat.FULL,
        log_prefix=True,
    )
    logs.drop_routine(verbose)
    elector = None
    if leader_elect:
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        lease_ns = lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
        owner = None
        if lease_owner:  # read once: its uid is what the garbage collector matches
            try:
                owner = lease_store.owner_reference(
                    "apps/v1", "Deployment", lease_ns, lease_owner, timing.request_timeout
                )
            except lease_store.LeaseUnavailable as exc:
                raise _fail(f"--lease-owner: {exc}") from None
        store = lease_store.LeaseClient(lease_ns, lease_name, timing.request_timeout, owner)
        elector = leader.Elector(store, identity, timing, unavailable=(lease_store.LeaseUnavailable,))
    raise typer.Exit(_run(config, namespace or [], elector, timing, health, metrics))


class _Stop:
    """A request to stop kopf, from any thread: our signal handler before kopf runs (kopf installs its
    own), or the elector when the Lease is lost. kopf gets an asyncio.Event in its own loop: given a
    threading.Event it would wait for it in an executor thread, and asyncio.run() would then wait for
    that thread forever when kopf stopped for a signal instead."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def set(self, *_: object) -> None:
        self.requested.set()  # first, then the loop: bind() sees one or the other
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: kopf has stopped already
                loop.call_soon_threadsafe(event.set)

    def bind(self) -> asyncio.Event:
        """The flag for kopf, in the running loop."""
        self._event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self.requested.is_set():
            self._event.set()
        return self._event


def _run(
    config: OperatorConfig,
    namespaces: list[str],
    elector: Elector | None,
    timing: Timing,
    health_address: tuple[str, int],
    metrics_address: tuple[str, int],
) -> int:
    """Serve the endpoints, wait for the Lease if electing, run kopf; the exit code."""
    import kopf

    import graphtrain.operator.handlers as handlers
    from graphtrain.operator import crd_version, endpoints

    handlers.use_config(config)
    handlers.use_namespaces(namespaces)
    handlers.use_fence(elector.may_act if elector is not None else handlers.always)
    stop = _Stop()  # SIGTERM before kopf runs, or the Lease lost
    ready = threading.Event()  # kopf's ready flag: its startup handlers ran
    metrics = endpoints.OperatorMetrics()
    handlers.use_metrics(metrics)
    unserved: list[str] = []  # the CRD deleted while the handlers ran: why, said as at start

    def crd_gone(message: str) -> None:
        unserved.append(message)
        stop.set()

    handlers.use_on_unserved(crd_gone)

    def healthy() -> tuple[bool, str]:
        if elector is not None and elector.crashed:
            return False, "leader election failed"
        return True, "ok"

    def readiness() -> tuple[bool, str]:
        if elector is not None and not elector.leading.is_set():
            reached = elector.reached.is_set()
            return reached, "standby" if reached else (elector.problem or "starting")
        return ready.is_set(), "leading" if ready.is_set() else "starting the handlers"

    def lease_lost() -> None:
        stop.set()  # kopf stops; should it hang, exit before the Lease expires for the others
        grace = max(timing.lease_duration - timing.renew_deadline, 1.0)
        watchdog = threading.Timer(grace, os._exit, (1,))
        watchdog.daemon = True
        watchdog.start()

    servers = []
    for name, address, routes in (
        (
            "health",
            health_address,
            {"/healthz": endpoints.probe(healthy), "/readyz": endpoints.probe(readiness)},
        ),
        ("metrics", metrics_address, {"/metrics": metrics.route}),
    ):
        try:
            servers.append(endpoints.serve(name, address, routes))
        except OSError as exc:
            for s in servers:
                s.close()
            typer.echo(f"error: {name} endpoint {address[0]}:{address[1]}: {exc}", err=True)
            return 1
    crd_version.start(metrics.crd_current.set, stop.requested)  # beside the run, never before it
    signals = {sig: signal.signal(sig, stop.set) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if elector is not None:
            elector.on_lost = lease_lost
            elector.start()
            while not elector.leading.wait(0.2):  # standby
                if stop.requested.is_set() or elector.lost.is_set():
                    stopped = stop.requested.is_set()
                    handlers.log.info("standing by no more: %s", "stopped" if stopped else "failed")
                    return 0 if stopped else 1
        if stop.requested.is_set():
            return 0
        metrics.leader.set(1)
        handlers.log.info("leading: the handlers start")

        @kopf.on.cleanup()
        def flag_stopping(**_: object) -> None:
            """Stopping for a signal, kopf still waits for its stop flag's waiter (5 s, then it
            cancels it): raise the flag as it stops."""
            stop.set()

        async def operate() -> None:
            await kopf.operator(
                standalone=True,
                clusterwide=not namespaces,
                namespaces=namespaces,
                stop_flag=stop.bind(),
                ready_flag=ready,
            )

        with contextlib.suppress(asyncio.CancelledError):  # as kopf.run() does
            asyncio.run(operate())
        handlers.log.info("the handlers stopped")
        if unserved:
            typer.echo(f"error: {unserved[0]}", err=True)
            return 1
        if elector is not None and elector.lost.is_set():
            handlers.log.error("the lease was lost: exiting 1 to restart as a standby")
            return 1
        return 0
    finally:
        metrics.leader.set(0)
        if elector is not None:
            elector.stop()
            elector.release()
        for s in servers:
            s.close()
        for sig, previous in signals.items():
            signal.signal(sig, previous)


if __name__ == "__main__":  # pragma: no cover
    app()
