"""`graphtrain api` (serve the status API) and the `--api` options of `graphtrain run`.

Both refuse bad options with one line and exit 1, before importing the web stack: authentication is
on unless --no-auth, which only a loopback address allows (auth.check_bind). Heavy imports (FastAPI,
uvicorn, kubernetes) happen inside the commands, so `graphtrain --help` works without the api extra.

`graphtrain run --api PORT` is composed here, not in runtime/cli.py (the runtime never imports the API):
with_api() returns the runtime's `run` command with the API options added, serving the run directory
while the run goes. start_for_run() is the seam a launcher hook uses to announce the API's port.
"""

from __future__ import annotations

import copy
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from graphtrain.api.server import BackgroundServer
    from graphtrain.api.settings import Settings

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class SourceKind(StrEnum):
    kubernetes = "kubernetes"
    local = "local"


def fail(message: str) -> typer.Exit:
    print(message, file=sys.stderr)
    return typer.Exit(1)


def settings_for(
    host: str, token_file: Path | None, no_auth: bool, metrics_open: bool = False, flags: str = "--"
) -> Settings:
    """The app's settings from the auth options, or typer.Exit(1) after one line saying what is wrong.
    `flags`: how the command names its options ("--api-" for `graphtrain run`'s)."""
    if no_auth and token_file is not None:
        raise fail(f"error: {flags}no-auth and {flags}token-file exclude each other")
    if not no_auth and token_file is None:
        raise fail(
            f"error: give {flags}token-file (one bearer token per line), or {flags}no-auth on a loopback "
            "address"
        )
    from graphtrain.api.auth import TokenFile, TokenFileError, check_bind

    refused = check_bind(host, auth=not no_auth, flags=flags)
    if refused:
        raise fail(refused)
    from graphtrain.api.settings import Settings

    try:
        tokens = TokenFile(token_file) if token_file is not None else None
    except TokenFileError as exc:
        raise fail(f"error: {exc}") from None
    return Settings(tokens=tokens, metrics_open=metrics_open)


@app.command("api")
def api(
    source: Annotated[SourceKind, typer.Option(help="where trainings are read from")] = SourceKind.kubernetes,
    runs_dir: Annotated[
        Path | None, typer.Option(help="local source: a directory of run directories, or one run directory")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="kubernetes source: serve this namespace only (default: all)")
    ] = None,
    cache_ttl: Annotated[
        float,
        typer.Option(
            min=0,
            help="kubernetes source: serve from a cache kept by watches, answers never older than"
            " 10 x N s (0: no cache, every request asks the API server)",
        ),
    ] = 2.0,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port to listen on")] = 8080,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="bearer tokens, one per line, each alone (every namespace) or with "
            "`namespaces=a,b` (those only); re-read when it changes"
        ),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="no authentication: only on a loopback address")
    ] = False,
    metrics_open: Annotated[
        bool,
        typer.Option(
            "--metrics-open",
            help="serve /metrics without a token (else a scraper presents one that sees every namespace)",
        ),
    ] = False,
) -> None:
    """Serve the read-only REST status API of GraphTrainings (OpenAPI at /docs)."""
    if source == SourceKind.local and runs_dir is None:
        raise fail("error: --source local needs --runs-dir")
    if source == SourceKind.kubernetes and runs_dir is not None:
        raise fail("error: --runs-dir is for --source local")
    if source == SourceKind.local and namespace is not None:
        raise fail("error: --namespace is for --source kubernetes")
    if runs_dir is not None and not runs_dir.is_dir():
        raise fail(f"error: --runs-dir {runs_dir} is not a directory")
    settings = settings_for(host, token_file, no_auth, metrics_open)
    from graphtrain.api.app import create_app
    from graphtrain.api.server import bind, serve
    from graphtrain.api.sources.base import SourceUnavailable

    status_source: Any
    if source == SourceKind.local:
        from graphtrain.api.sources.local import LocalSource

        assert runs_dir is not None
        single = (runs_dir / "status.json").exists() or (runs_dir / "graphtraining.json").exists()
        status_source = LocalSource(run_dir=runs_dir) if single else LocalSource(runs_dir)
    else:
        from graphtrain.api.sources import kubernetes as kubernetes_source

        try:
            status_source = kubernetes_source.KubernetesSource(namespace, cache_ttl=cache_ttl)
        except SourceUnavailable as exc:
            raise fail(f"error: {exc}") from None
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise fail(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    print(f"graphtrain api: {source} source on http://{where}:{bound} (docs at /docs)", file=sys.stderr)
    serve(create_app(status_source, settings), sock)


# ---------------------------------------------------------------------------- graphtrain run --api


def start_for_run(
    run_dir: Path, port: int, host: str, token_file: Path | None, no_auth: bool
) -> BackgroundServer:
    """The API on `host:port` (0: any free port) serving one run directory, on a thread; its `port` is
    the one bound. Raises typer.Exit(1) after one line for bad options or a port it cannot bind.
    On a loopback address /metrics is open, as every other target of the run's targets.json is (its
    Prometheus has no token); the status routes keep their token."""
    from graphtrain.api.auth import check_bind

    loopback = check_bind(host, auth=False) is None
    settings = settings_for(host, token_file, no_auth, metrics_open=loopback, flags="--api-")
    from graphtrain.api.app import create_app
    from graphtrain.api.server import BackgroundServer
    from graphtrain.api.sources.local import LocalSource

    try:
        return BackgroundServer(create_app(LocalSource(run_dir=run_dir), settings), host, port).start()
    except OSError as exc:
        raise fail(f"error: --api: {exc}") from None


def _api_options(
    api: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="also serve this run's REST status API on this port (0: any)"),
    ] = None,
    api_host: Annotated[str, typer.Option(help="address of the API")] = "127.0.0.1",
    api_token_file: Annotated[
        Path | None, typer.Option(help="the API's bearer tokens, one per line (as `graphtrain api`)")
    ] = None,
    api_no_auth: Annotated[
        bool,
        typer.Option(
            "--api-no-auth",
            help="the API without authentication (loopback only: any local user can read the run)",
        ),
    ] = False,
) -> None:
    """Declares the API options of `graphtrain run` (only its parameters are used)."""


def api_params() -> list[Any]:
    """The click parameters typer makes of _api_options (typer's own click classes)."""
    holder = typer.Typer(add_completion=False)
    holder.command()(_api_options)
    return list(typer.main.get_command(holder).params)


def default_run_dir(spec_path: Path) -> Path | None:
    """runs/<metadata.name>, as `graphtrain run` picks it; None when the spec does not load (the run
    itself then says why)."""
    from graphtrain.contract.spec import SpecError, load_yaml

    try:
        return Path("runs") / load_yaml(spec_path.read_text()).metadata.name
    except (OSError, UnicodeDecodeError, SpecError):
        return None


def with_api(command: Any) -> Any:
    """A copy of the runtime's `run` command with --api, --api-host, --api-token-file and --api-no-auth:
    with --api, the API serves the run directory on a thread while the run goes, and stops after it."""
    original = command.callback
    assert original is not None

    def run(**kwargs: Any) -> Any:
        port, host = kwargs.pop("api"), kwargs.pop("api_host")
        token_file, no_auth = kwargs.pop("api_token_file"), kwargs.pop("api_no_auth")
        token_file = Path(token_file) if token_file is not None else None
        if port is None:
            if token_file is not None or no_auth:
                raise fail("error: --api-token-file and --api-no-auth go with --api PORT")
            return original(**kwargs)
        run_dir = kwargs.get("run_dir") or default_run_dir(Path(kwargs["spec_path"]))
        if run_dir is None:
            return original(**kwargs)
        server = start_for_run(Path(run_dir), port, host, token_file, no_auth)
        print(f"[run] status API on http://{host}:{server.port}/api/v1/trainings", file=sys.stderr)
        from graphtrain.contract.telemetry import JOB_API

        kwargs["scrape_also"] = [*(kwargs.get("scrape_also") or []), f"{JOB_API}={server.port}"]
        try:
            return original(**kwargs)
        finally:
            server.stop()

    composed = copy.copy(command)
    composed.params = [*command.params, *api_params()]
    composed.callback = run
    return composed
