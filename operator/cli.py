"""`graphtrain operator`: the operator's command group, mounted by the top-level command (cli/)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer()


@app.command("operator")
def operator_cmd(
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="watch only these namespaces (default: all)")
    ] = None,
    peering: Annotated[
        str | None, typer.Option(help="kopf peering object for several replicas (default: standalone)")
    ] = None,
    liveness: Annotated[
        str | None, typer.Option(help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    ] = None,
) -> None:
    """Run the GraphTraining operator (kopf) with this process' kube credentials (in-cluster or
    $KUBECONFIG). Image of the children: $GRAPHTRAIN_IMAGE."""
    import kopf

    import graphtrain.operator.handlers  # noqa: F401 - registers the handlers
    from graphtrain.operator import k8s

    try:  # kopf would log the failure and retry forever: say it once and stop
        k8s.load_config()
    except k8s.CredentialsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None

    kopf.run(
        standalone=peering is None,
        peering_name=peering,
        clusterwide=not namespace,
        namespaces=namespace or [],
        liveness_endpoint=liveness,
    )


if __name__ == "__main__":  # pragma: no cover
    app()
