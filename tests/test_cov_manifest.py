"""Manifests that cannot be used are one-line errors naming the file and what is wrong (a
missing or malformed entry, a constraint or launch formula that does not parse or reads a name
it cannot have), and so are constraint expressions that name an unknown parameter or fail when
evaluated; an unknown backend name too."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.family.backends import backend
from evo.errors import EvoError
from evo.family.expr import evaluate
from evo.family.manifest import load_family_dir

FAMILY = '[family]\nname = "x"\nversion = 1\ntemplate = "k.cu.j2"\n'
LAUNCH = '[launch]\nthreads = "128"\nrows_per_cta = "64"\nsmem_bytes = "0"\n'


@pytest.mark.parametrize(("text", "message"), [
    (FAMILY + LAUNCH + "[params.A]\nvalues = []\n", "parameter A has no values"),
    (FAMILY + LAUNCH + "[params.A]\nvalues = [1, 2]\ndefault = 3\n", r"default of A \(3\) is not in its values"),
    ('[family]\nname = "x"\n' + LAUNCH, r"\[family\] lacks version, template"),
    (FAMILY + '[launch]\nthreads = "128"\nsmem_bytes = "0"\n', r"\[launch\] lacks rows_per_cta"),
    (FAMILY + "[launch\n", "cannot read manifest .*manifest.toml: "),
    (FAMILY.replace("version = 1", 'version = "one"') + LAUNCH,
     r"malformed manifest \(ValueError: invalid literal for int\(\) with base 10: 'one'\)"),
    (FAMILY + LAUNCH + "[[constraints]]\nmessage = \"no expr\"\n", r"malformed manifest \(KeyError: 'expr'\)"),
    (FAMILY + LAUNCH + "[params]\nA = 3\n", r"malformed manifest \(AttributeError: "),
    (FAMILY + LAUNCH + "[params.A]\nvalues = [1]\n[[constraints]]\nexpr = \"A < B\"\n",
     r"constraint 'A < B' reads 'B', which is not a parameter"),
    (FAMILY + LAUNCH + "[params.A]\nvalues = [1]\n[[constraints]]\nexpr = \"A <\"\n",
     r"constraint: bad manifest expression 'A <'"),
    (FAMILY + LAUNCH.replace('threads = "128"', "threads = 128"),
     r"\[launch\] threads must be an expression in a string"),
    (FAMILY + LAUNCH.replace('smem_bytes = "0"', 'smem_bytes = "A * D"'),
     r"\[launch\] smem_bytes 'A \* D' reads 'A', which is not a parameter"),
    (FAMILY + LAUNCH + "[params.A]\nvalues = [1, 2]\nreads = \"A == 1\"\n",
     r"\[params.A\] reads 'A == 1' reads 'A', which is not D, dtype or causal"),
])
def test_a_manifest_that_cannot_be_used_names_the_file_and_the_problem(tmp_path: Path, text: str,
                                                                        message: str) -> None:
    (tmp_path / "manifest.toml").write_text(text)
    with pytest.raises(EvoError, match=message) as info:
        load_family_dir(tmp_path)
    assert str(tmp_path / "manifest.toml") in str(info.value) and "\n" not in str(info.value)


def test_no_manifest_at_all_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EvoError, match=f"cannot read manifest {tmp_path / 'manifest.toml'}"):
        load_family_dir(tmp_path)


def test_the_smallest_valid_manifest_takes_the_documented_defaults(tmp_path: Path) -> None:
    (tmp_path / "manifest.toml").write_text(FAMILY + LAUNCH + "[params.A]\nvalues = [4, 8]\n")
    fam = load_family_dir(tmp_path)
    assert (fam.name, fam.backend, fam.defaults()) == ("x", "cuda", {"A": 4})  # the first value by default
    assert fam.params["A"].kind == "tile"
    assert fam.params["A"].keyed_at_default   # a gene is named in the rendered header unless it says otherwise


def test_a_gene_added_later_is_named_in_the_header_only_off_its_default(tmp_path: Path) -> None:
    from evo.family.space import make_candidate

    (tmp_path / "manifest.toml").write_text(FAMILY + LAUNCH + "[params.A]\nvalues = [4, 8]\n"
                                            "[params.NEW]\nvalues = [false, true]\nkeyed_at_default = false\n")
    fam = load_family_dir(tmp_path)
    assert not fam.params["NEW"].keyed_at_default
    cand = make_candidate(fam, {"A": 8})
    assert cand.key(omit={"NEW"}) == '{"family": "x", "params": {"A": 8}}'   # as before NEW existed
    assert cand.key() == '{"family": "x", "params": {"A": 8, "NEW": false}}'


@pytest.mark.parametrize(("expression", "names", "message"), [
    ("A * B <= 4", {"A": 1}, "manifest expression 'A \\* B <= 4' uses unknown name 'B'"),
    ("A // B", {"A": 1, "B": 0}, "manifest expression 'A // B': integer division or modulo by zero"),
    ("A + B", {"A": 1, "B": "x"}, "manifest expression 'A \\+ B': unsupported operand"),
    ("2 ** A", {"A": 100000.5}, "manifest expression '2 \\*\\* A': .*out of range"),  # OverflowError
])
def test_an_expression_that_cannot_be_evaluated_is_a_manifest_error(expression: str, names: dict,
                                                                    message: str) -> None:
    with pytest.raises(EvoError, match=message):
        evaluate(expression, names)


def test_an_unknown_backend_lists_the_known_ones() -> None:
    assert backend("triton").artifact == "kernel.py" and backend("cuda").comment == "//"
    with pytest.raises(EvoError, match="unknown backend 'hip'; known: cuda, triton"):
        backend("hip")
