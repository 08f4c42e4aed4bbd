"""CLI commands (filled in by its owner module)."""

from evo.cli.app import app  # noqa: F401
