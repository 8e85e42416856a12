"""The `graphtrain` console script's entry point, kept free of imports: the command's modules (typer,
pydantic, each role's commands in cli/app.py) take about half a second to import, and a Ctrl-C in that
window would otherwise end in a KeyboardInterrupt traceback before any handler exists. It ends as a
Ctrl-C inside a command does (cli_common.console): "Aborted!" and exit code 1.
"""

from __future__ import annotations

import sys


def main() -> None:  # pragma: no cover - console entry point (tested through a subprocess)
    try:
        from graphtrain.cli.app import main as command

        command()
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
