"""The ``evo`` click group that every command module registers on, and the options they share.

Conventions are click's: ``-h``/``--help`` on every command, ``evo --version``, ``evo`` alone
prints help and exits 0, a usage error prints the usage line and exits 2. Numeric options are
range-checked by click; ``--db`` takes a SQLite file path or a SQLAlchemy URL. The modules of
:mod:`evo.cli` import nothing of evo but :mod:`evo.api`, :mod:`evo.errors`, each other and the two
leaf modules of names, :mod:`evo.vocab` and :mod:`evo.version` (tests/test_cli_imports.py): every
command is a thin call of one API function.

:data:`api` is :mod:`evo.api` loaded on its first use, inside a command: the options name their
choices from :mod:`evo.vocab`, so ``evo --help``, ``--version`` and a usage error never import
the API (optuna, SQLAlchemy: about 1.5 s of a 2 s start).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from evo.errors import EvoError
from evo.version import __version__


def lazy_module(name: str) -> types.ModuleType:
    """The module ``name``, executed on its first attribute access (the standard library's
    LazyLoader); the module itself if it is imported already."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:   # as an import would: `import evo.api` finds it in sys.modules and reads evo.api
        setattr(sys.modules[parent], child, module)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from evo import api
else:
    api = lazy_module("evo.api")

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["api", "cli", "db_option", "fail_if", "split_list"]
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


HELP_ORDER = ("run", "show", "lineage", "insights", "eval", "bench", "promote", "render", "build", "doctor",
              "export-sweep")


class Command(click.Command):
    """A command that quiets Optuna's INFO lines (they would interleave with evo's output) once its
    arguments have parsed, so that help and usage errors never import optuna."""

    def invoke(self, ctx: click.Context) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return super().invoke(ctx)


class Commands(click.Group):
    """A group whose help lists commands in workflow order (others after, as registered)."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        known = [c for c in HELP_ORDER if c in self.commands]
        return known + [c for c in self.commands if c not in known]


@click.group(name="evo", cls=Commands, context_settings=CONTEXT, invoke_without_command=True)
@click.version_option(__version__, "--version", prog_name="evo", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Evolve fast attention (SDPA forward) CUDA kernels: render, build, gate, time, search, promote.

    Start with `evo run`; without a GPU it replays a recorded H200 sweep. Every command takes
    -h for its options.
    """
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

