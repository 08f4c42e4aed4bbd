"""Ship the top-level resource folders inside the package (metadata lives in pyproject.toml).

``templates/``, ``acceptance/``, ``data/`` and ``db/`` stay at the top of the checkout (the
layout of docs/design.md); a wheel carries them as ``evo/_resources/<folder>``, where
``evo.paths.root()`` finds them through importlib.resources. Local databases and caches
(``db/*.sqlite*``, ``__pycache__``) are left out.
"""

from setuptools import find_packages, setup

RESOURCES = ("templates", "acceptance", "data", "db")
MAPPED = {f"evo._resources.{name}": name for name in RESOURCES}

setup(
    packages=[*find_packages(include=["evo", "evo.*"]), *MAPPED],
    package_dir=MAPPED,
    package_data={pkg: ["**/*"] for pkg in MAPPED},
    exclude_package_data={pkg: ["**/__pycache__/*", "**/*.pyc", "*.sqlite*"] for pkg in MAPPED},
)
