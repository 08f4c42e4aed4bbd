"""The Typer application object that every command module registers on."""

import typer

app = typer.Typer(
    name="evo",
    help="Evolve fast attention (SDPA forward) CUDA kernels: render, build, gate, time, search, promote.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DbOption = typer.Option(None, "--db", help="SQLAlchemy URL (default: sqlite:///db/evo.sqlite or $EVO_DB)")
