"""Import every module of the installed evo package, so a dependency that is imported but not
declared (or package data code that is missing from a wheel) fails CI here, by name."""

import importlib
import pkgutil
import sys

import evo

SKIP = ("evo.__main__", "evo._resources")  # __main__ runs the CLI; _resources holds data, not modules

names = [m.name for m in pkgutil.walk_packages(evo.__path__, "evo.") if not m.name.startswith(SKIP)]
for name in names:
    importlib.import_module(name)
print(f"imported {len(names) + 1} modules of evo {evo.__version__} from {evo.__path__[0]}", file=sys.stderr)
