"""Every kernel family renders, and compiles with nvcc for each arch it declares without spills.

CPU only: nvcc compiles, nothing runs. The test-only families under ``tests/templates`` (the
gate's negative controls) take part through ``EVO_TEMPLATE_PATH``. A family whose template is
not written yet is skipped. nvcc runs as a plain subprocess, one call per (candidate, arch),
several at once, so the suite does not depend on the build module.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from evo.manifest import Family, list_families, load_family
from evo.render import Rendered, render
from evo.space import Candidate, make_candidate, random_candidates

TEST_TEMPLATES = Path(__file__).parent / "templates"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot compile kernels")
RANDOM_CONFIGS = 8
SEED = 20240611


def _families() -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
        return list_families()


FAMILIES = _families()


@pytest.fixture(autouse=True)
def _test_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))


def _family_with_template(name: str) -> Family:
    fam = load_family(name)
    if not (fam.path / fam.template).is_file():
        pytest.skip(f"{name}: {fam.template} is not written yet")
    return fam


def _sample(fam: Family) -> list[Candidate]:
    """The default and up to RANDOM_CONFIGS other valid points (seeded, so runs repeat)."""
    default = make_candidate(fam)
    others = [c for c in random_candidates(fam, RANDOM_CONFIGS + 1, random.Random(SEED)) if c != default]
    return [default, *others[:RANDOM_CONFIGS]]


@dataclass(frozen=True)
class EntryReport:
    registers: int
    spill_bytes: int


def _gencode(arch: str) -> str:
    return f"arch=compute_{arch.removeprefix('sm_')},code={arch}"


def parse_ptxas(log: str) -> dict[str, EntryReport]:
    """Registers and spill bytes (stores + loads) per entry function in ``ptxas -v`` output."""
    out: dict[str, EntryReport] = {}
    name = None
    regs = spills = 0
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name, regs, spills = m.group(1), 0, 0
        elif name and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            spills = int(m.group(1)) + int(m.group(2))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            regs = int(m.group(1))
            out[name] = EntryReport(regs, spills)
    return out


def compile_cubin(rendered: Rendered, fam: Family, arch: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """``nvcc -cubin -Xptxas -v`` one rendered candidate for ``arch`` (the family's own flags)."""
    stem = f"{rendered.source_hash[:16]}_{arch}"
    src = workdir / f"{stem}.cu"
    src.write_text(rendered.source)
    cmd = [NVCC or "nvcc", "-cubin", *fam.nvcc_flags, "-gencode", _gencode(arch), "-Xptxas", "-v",
           str(src), "-o", str(workdir / f"{stem}.cubin")]
    return subprocess.run(cmd, capture_output=True, text=True)


def _compile_all(cands: list[Candidate], fam: Family, workdir: Path) -> list[str]:
    """Compile every candidate for every arch of the family, in parallel; return the problems."""
    jobs = [(render(c, fam), arch) for c in cands for arch in fam.arches]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        procs = list(pool.map(lambda job: compile_cubin(job[0], fam, job[1], workdir), jobs))
    problems = []
    for (rendered, arch), proc in zip(jobs, procs):
        where = f"{rendered.candidate.label()} {arch}"
        if proc.returncode != 0:
            problems.append(f"{where}: nvcc failed:\n{proc.stderr[-3000:]}")
            continue
        report = parse_ptxas(proc.stdout + proc.stderr)
        expected = {e.name for e in rendered.entries}
        if set(report) != expected:
            problems.append(f"{where}: entries {sorted(report)} != {sorted(expected)}")
        problems += [f"{where}: {name} spills {r.spill_bytes} bytes"
                     for name, r in report.items() if r.spill_bytes]
    return problems


def test_parse_ptxas_reads_registers_and_spills() -> None:
    log = ("ptxas info    : Compiling entry function 'evo_attn_d64_fp16_full' for 'sm_90a'\n"
           "ptxas info    : Function properties for evo_attn_d64_fp16_full\n"
           "    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 72 registers, used 1 barriers\n")
    assert parse_ptxas(log) == {"evo_attn_d64_fp16_full": EntryReport(72, 12)}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_renders_every_entry(family: str) -> None:
    fam = _family_with_template(family)
    for cand in _sample(fam):
        rendered = render(cand, fam)
        missing = [e.name for e in rendered.entries
                   if not re.search(rf'extern "C" __global__[^;{{]*\b{e.name}\(', rendered.source)]
        assert not missing, f"{cand.label()} does not define {missing}"


def test_faulty_switches_change_the_kernel() -> None:
    fam = _family_with_template("faulty")
    bodies = {v: render(make_candidate(fam, {"FAULT": v}), fam).source.split("\n", 2)[2]
              for v in fam.params["FAULT"].values}
    assert len(set(bodies.values())) == len(bodies), "some FAULT values render the same kernel"


@needs_nvcc
@pytest.mark.parametrize("family", FAMILIES)
def test_default_compiles_without_spills(family: str, tmp_path: Path) -> None:
    fam = _family_with_template(family)
    assert _compile_all([make_candidate(fam)], fam, tmp_path) == []


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_random_configs_compile_without_spills(family: str, tmp_path: Path) -> None:
    fam = _family_with_template(family)
    assert _compile_all(_sample(fam)[1:], fam, tmp_path) == []
