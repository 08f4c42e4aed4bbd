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


# The smoke tests: where a dependency's oldest version or a wheel's packaging would show first.
# A file maps to None (all of its tests: storage, doctor, vocabulary, error exits) or to the names of
# the tests it lends: the CLI and the API end to end, one of each kind. The many one-line-error
# variants of test_cli.py and test_api.py test evo's own code, which neither stage changes.
SMOKE: dict[str, frozenset[str] | None] = {
    "test_store.py": None, "test_doctor.py": None, "test_vocab.py": None, "test_cli_errors.py": None,
    "test_cli.py": frozenset({
        "test_an_installed_evo_is_tested_through_its_console_script", "test_usage_errors_exit_2_with_the_usage_line_and_write_nothing",
        "test_evo_alone_prints_help_and_exits_0", "test_version", "test_run_ends_with_the_results_the_speedups_in_words_and_what_next",
        "test_db_takes_a_plain_path_and_a_url_to_the_same_file", "test_user_data_goes_to_evo_home_else_the_checkout_else_xdg",
        "test_summary_json_holds_the_run_its_best_and_its_throughput",
    }),
    "test_api.py": frozenset({
        "test_import_evo_loads_neither_the_api_nor_torch_nor_optuna", "test_the_package_names_every_api_function",
        "test_build_compiles_stores_and_reports_progress", "test_evaluate_gates_times_and_stores_through_a_worker_target",
        "test_benchmark_times_the_best_stored_candidates_and_writes_the_record", "test_a_database_url_needs_a_dialect_and_its_driver",
    }),
}


# Tests that build the same machine code: under pytest-xdist each group runs on one worker, one test
# after another, so the build cache compiles the code once and the others take it (faulty_decode's
# positive control is flash_decode's default code under another family's name).
SAME_CODE: dict[str, tuple[str, ...]] = {
    "flash_decode default": ("tests/test_decode_compile.py::", "::test_default_builds_clean[flash_decode-",
                             "::test_default_builds_clean[faulty_decode-"),
}


def is_smoke(item: pytest.Item) -> bool:
    """Whether ``item`` is one of the SMOKE tests."""
    if item.path.name not in SMOKE:
        return False
    names = SMOKE[item.path.name]
    return names is None or getattr(item, "originalname", item.name) in names


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


def is_heavy(item: pytest.Item) -> bool:
    """Whether ``item`` compiles kernels with nvcc (marked ``slow``, or reading the shared build cache):
    the long tests, which run first so that no worker is left alone with one at the end of the suite."""
    return "slow" in item.keywords or "build_cache" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not is_heavy(item))   # stable: otherwise in collection order
    for item in items:
        if is_smoke(item):
            item.add_marker(pytest.mark.smoke)
        if "gpu" in item.keywords:   # under pytest-xdist (--dist loadgroup) one worker runs them, one at a time
            item.add_marker(pytest.mark.xdist_group("gpu"))
        elif group := next((g for g, parts in SAME_CODE.items() if any(p in item.nodeid for p in parts)), None):
            item.add_marker(pytest.mark.xdist_group(group))
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
