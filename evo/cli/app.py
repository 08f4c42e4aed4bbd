"""The ``evo`` click group that every command module registers on, and the options they share.

Conventions are click's: ``-h``/``--help`` on every command, ``evo --version``, ``evo`` alone
prints help and exits 0, a usage error prints the usage line and exits 2. Numeric options are
range-checked by click; ``--db`` takes a SQLite file path or a SQLAlchemy URL. The modules of
:mod:`evo.cli` import nothing of evo but :mod:`evo.api`, :mod:`evo.errors` and each other
(tests/test_cli_imports.py): every command is a thin call of one API function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import optuna

from evo import api
from evo.errors import EvoError

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["cli", "db_option", "fail_if", "split_list"]
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


HELP_ORDER = ("run", "show", "lineage", "insights", "eval", "bench", "promote", "render", "build", "doctor",
              "export-sweep")


class Commands(click.Group):
    """A group whose help lists commands in workflow order (others after, as registered)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        known = [c for c in HELP_ORDER if c in self.commands]
        return known + [c for c in self.commands if c not in known]


@click.group(name="evo", cls=Commands, context_settings=CONTEXT, invoke_without_command=True)
@click.version_option(api.__version__, "--version", prog_name="evo", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Evolve fast attention (SDPA forward) CUDA kernels: render, build, gate, time, search, promote.

    Start with `evo run`; without a GPU it replays a recorded H200 sweep. Every command takes
    -h for its options.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # its INFO lines would interleave with evo's output
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def db_option() -> Callable[[F], F]:
    """``--db PATH|URL``, handed to the API as it is given (None: the default database); the
    API checks it: its driver, its folder, whether it exists and whether evo can write it."""
    return click.option("--db", metavar="PATH|URL",
                        help="SQLite file or SQLAlchemy URL  [default: $EVO_DB, else <EVO_HOME>/db/evo.sqlite]")


def fail_if(condition: bool, message: str) -> None:
    """EvoError(message) when ``condition`` holds: argument combinations click cannot express."""
    if condition:
        raise EvoError(message)


def split_list(values: tuple[str, ...]) -> list[str] | None:
    """A repeatable, comma-separated option as one list (None when not given)."""
    out = [v.strip() for s in values for v in s.split(",") if v.strip()]
    return out or None

