"""Shared pytest setup: the ``gpu`` marker skips cleanly when no CUDA device is present; the
``smoke`` marker names the tests that CI runs again against the lowest dependency versions and
from the installed wheel (imports, packaging, storage, the CLI end to end); the full suite runs once."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@functools.cache
def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


SMOKE = frozenset({  # test files: where a dependency's oldest or a wheel's packaging would show first
    "test_cli.py", "test_cli_errors.py", "test_api.py", "test_store.py", "test_doctor.py", "test_vocab.py",
})


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Torch on one CPU thread for a module of tiny tensors: many times faster than several threads
    on a loaded machine (use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m smoke`` alone (CI's lowest and wheel stages) only the SMOKE files are collected:
    importing the other test modules, to deselect every test in them, took about 12 s a stage."""
    if (config.getoption("markexpr") == "smoke" and collection_path.name.startswith("test_")
            and collection_path.suffix == ".py" and collection_path.name not in SMOKE):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SMOKE:
            item.add_marker(pytest.mark.smoke)
        if "gpu" in item.keywords:   # under pytest-xdist (--dist loadgroup) one worker runs them, one at a time
            item.add_marker(pytest.mark.xdist_group("gpu"))
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One content-addressed build cache for the tests that only read what a build makes (SASS,
    registers, ptxas reports): a candidate several of them need is compiled once per run. Under
    pytest-xdist the workers share it (the folder beside their own): the cache installs a build
    by an atomic rename, first writer wins, so two workers may compile one candidate at once but
    never see half of one."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "candidates"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("candidates")
