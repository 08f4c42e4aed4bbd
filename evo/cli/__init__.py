"""Command-line entry point: ``evo`` / ``python -m evo``.

Each command lives in a small module that registers on :data:`evo.cli.app.cli` (click). Exit
codes: 0 success, 1 a command that ran and reports failure (e.g. a candidate that is not
fast), 2 bad input (a usage error prints the usage line and click's one-line ``Error:``; an
:class:`evo.errors.EvoError` prints ``evo: error: ...``), 130 interrupted. Nothing prints a
traceback unless ``EVO_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys

import click

from evo.cli import (  # noqa: F401  (register)
    bench_samplers_cmds, build_cmds, db_cmds, eval_cmds, promote_cmds, report_cmds, run_cmds,
)
from evo.cli.app import cli
from evo.cli.output import follow_columns
from evo.errors import EvoError

USAGE = 2
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map expected failures to one-line messages and exit codes."""
    follow_columns()
    try:
        rc = cli.main(args=argv, prog_name="evo", standalone_mode=False)
        return rc if isinstance(rc, int) else 0  # ctx.exit(n), --help and --version come back as a code
    except EvoError as exc:
        click.echo(f"evo: error: {exc}", err=True)
        return USAGE
    except click.ClickException as exc:  # usage errors (exit code 2) show the usage line first
        exc.show()
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("evo: interrupted", err=True)
        return INTERRUPTED
    except Exception as exc:  # an evo bug: still one line unless debugging
        if os.environ.get("EVO_DEBUG"):
            raise
        click.echo(f"evo: internal error: {type(exc).__name__}: {exc} (EVO_DEBUG=1 for a traceback)", err=True)
        return 1


def entry() -> None:
    """Console-script wrapper: exit with main()'s code."""
    sys.exit(main())
