"""The headers a candidate's source includes from outside the CUDA toolkit: nvcc's ``-I`` flags
and the part of the build key that changes when any of them changes.

A family declares its third-party header roots in its manifest::

    [build]
    include_dirs = ["include"]                          # folders inside the family folder
    [build.packages]                                    # Python distributions that ship headers
    nvidia-cutlass = "cutlass_library/source/include"   # distribution = header folder inside it

nvcc searches the family folder first, then these roots in order. Each declared root enters the
key as a hash of its whole content (a package also with its version), so editing, patching or
upgrading a header library gives new build ids; hashing the tree rather than following its
``#include`` lines keeps macro-chosen includes covered. Files the rendered source includes from
the family folder itself (``#include "tile.cuh"`` beside the template) are found by following
``#include`` lines from the source and hashed one by one, so editing an unrelated file there does
not invalidate every build. Toolkit and system headers come with the compiler, which the key
names by its ``nvcc --version``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from evo.errors import EvoError
from evo.family.manifest import Family

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
Signature = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Root:
    """One declared header root: its key label (``dir:include``, ``package:nvidia-cutlass``),
    its folder, and the distribution's version for a package."""

    label: str
    path: Path
    version: str = ""


def roots(family: Family) -> list[Root]:
    """The family's declared header roots, in search order; a bad ``[build]`` section, a
    missing folder or an uninstalled package is a one-line EvoError."""
    section = family.extra.get("build", {})
    where = family.path / "manifest.toml"
    dirs, packages = section.get("include_dirs", []), section.get("packages", {})
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise EvoError(f"{where}: [build] include_dirs must be a list of folder names")
    if not isinstance(packages, dict) or not all(isinstance(v, str) for v in packages.values()):
        raise EvoError(f"{where}: [build.packages] maps a distribution to its header folder (a string)")
    out = [Root(f"dir:{d}", family.path / d) for d in dirs]
    for name, sub in packages.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise EvoError(f"family {family.name} includes headers of {name}: pip install {name}") from None
        out.append(Root(f"package:{name}", Path(str(dist.locate_file(sub))), dist.version))
    for r in out:
        if not r.path.is_dir():
            raise EvoError(f"{where}: header folder {r.path} ({r.label}) does not exist")
    return out


def include_flags(family: Family) -> list[str]:
    """nvcc's ``-I`` flags: the family folder, then the declared roots."""
    return [f"-I{p}" for p in (family.path, *(r.path for r in roots(family)))]


def header_key(family: Family, source: str) -> dict[str, str]:
    """Label -> version and content hash of every header root and local file ``source`` can
    include (empty for a family that includes nothing but toolkit headers)."""
    declared = roots(family)
    key = {r.label: " ".join(filter(None, (r.version, tree_hash(r.path)))) for r in declared}
    for path in _local_includes(family.path, source, [r.path for r in declared]):
        key[f"file:{Path(os.path.relpath(path, family.path)).as_posix()}"] = _file_hash(path)
    return key


def _local_includes(folder: Path, source: str, covered: list[Path]) -> list[Path]:
    """Files the source includes, directly or through each other, that resolve in ``folder``
    (or, for quoted includes, beside the including file) and lie outside the declared roots."""
    found: dict[Path, None] = {}
    todo = [(source, folder)]
    while todo:
        text, here = todo.pop()
        for quote, name in _INCLUDE.findall(text):
            places = [here, folder] if quote == '"' else [folder]
            path = next((p / name for p in places if (p / name).is_file()), None)
            if path is None:
                continue  # a toolkit or system header: the compiler's identity covers it
            path = path.resolve()
            if path in found or any(path.is_relative_to(c.resolve()) for c in covered):
                continue
            found[path] = None
            todo.append((path.read_text(errors="replace"), path.parent))
    return sorted(found)


def _file_hash(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hash(folder: Path) -> str:
    """Hash of every file under ``folder`` (names and contents; dot-files and ``__pycache__``
    skipped), recomputed only when a file's name, size or mtime changed."""
    sig = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts) or not p.is_file():
            continue
        st = p.stat()
        sig.append((rel.as_posix(), st.st_size, st.st_mtime_ns))
    return _hash_tree(str(folder), tuple(sig))


@lru_cache(maxsize=64)
def _hash_tree(folder: str, sig: Signature) -> str:
    h = hashlib.sha256()
    for rel, _, _ in sig:
        h.update(rel.encode() + b"\0" + hashlib.sha256((Path(folder) / rel).read_bytes()).digest())
    return "sha256:" + h.hexdigest()
