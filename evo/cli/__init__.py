"""Command-line entry point: ``evo`` / ``python -m evo``.

Each command lives in a small module that registers on :data:`evo.cli.app.app`. User errors
(:class:`evo.errors.EvoError`) print one line and exit 2; nothing prints a traceback unless
``EVO_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys

import click

from evo.cli.app import app
from evo.cli import build_cmds, db_cmds, eval_cmds, run_cmds, promote_cmds  # noqa: F401  (register)
from evo.cli import bench_samplers_cmds  # noqa: F401  (register)
from evo.errors import EvoError


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map expected failures to one-line messages and exit codes."""
    try:
        rc = app(args=argv, prog_name="evo", standalone_mode=False)
        return rc if isinstance(rc, int) else 0  # typer.Exit(n) and Ctrl-C come back as a code
    except EvoError as exc:
        click.echo(f"evo: error: {exc}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("evo: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("evo: interrupted", err=True)
        return 130
    except Exception as exc:  # an evo bug: still one line unless debugging
        if os.environ.get("EVO_DEBUG"):
            raise
        click.echo(f"evo: internal error: {type(exc).__name__}: {exc} (EVO_DEBUG=1 for a traceback)", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    """Console-script wrapper: exit with main()'s code."""
    sys.exit(main())
