"""Write docs/cli.md: every evo command's help, as ``evo COMMAND -h`` prints it.

tests/test_cli_doc.py fails when docs/cli.md differs from what this writes, so the page follows
the code: run ``python scripts/gen_cli_md.py`` after changing a command's options or help.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import click

from evo.cli import cli

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = 100
HEADER = """# The evo command line

Every command is a thin layer over a function of the Python API (`docs/api.md`) and takes `-h`.
Exit codes: 0 success; 1 a command that ran and reports a failure (a candidate that is not
fast); 2 bad input (one line, nothing written); 130 interrupted (Ctrl-C; a search's open trials
are re-queued). This page is generated from the commands' own help by `scripts/gen_cli_md.py`.
"""


def click_version() -> str:
    """The installed click's version (click 8.2 dropped ``click.__version__``)."""
    return importlib.metadata.version("click")


def render() -> str:
    """The page: ``evo -h``, then each command's help in the order ``evo -h`` lists them, as a
    terminal ``WIDTH`` columns wide shows them (the group's context settings: ``-h``/``--help``)."""
    root = click.Context(cli, info_name="evo", terminal_width=WIDTH, **cli.context_settings)
    made_with = f"Written with click {click_version()} (other click versions word some help lines differently).\n"
    parts = [HEADER + made_with, "```text\n" + cli.get_help(root) + "\n```\n"]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        assert command is not None
        ctx = click.Context(command, info_name=name, parent=root, **command.context_settings)
        parts.append(f"## evo {name}\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    PAGE.write_text(render())
    sys.stdout.write(f"wrote {PAGE}\n")
