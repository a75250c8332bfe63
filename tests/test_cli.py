"""The command line, run as users run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from robustgrpo import ESTIMATORS
from robustgrpo.cli import main

ROOT = Path(__file__).resolve().parents[1]
REF = {k: v["value"] for k, v in json.loads((ROOT / "data" / "reference" / "seed_000.json").read_text())["values"].items()}


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "robustgrpo", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout


def _table_rows(text: str, title: str) -> dict[str, list[str]]:
    block = text.split(title, 1)[1].split("\n\n", 1)[0].splitlines()
    header = next(i for i, line in enumerate(block) if line.startswith("estimator"))
    return {line.split()[0]: line.split() for line in block[header + 1 :]}


def test_demo_prints_the_true_numbers():
    out = _run("demo")
    assert f"mean {REF['mean']:.3f}" in out
    assert f"std {REF['std_bessel']:.3f} (Bessel, ddof=1; {REF['std_population']:.3f} with ddof=0)" in out
    poisoned = _table_rows(out, "Advantages, poisoned group:")
    clean = _table_rows(out, "Advantages, clean reference")
    assert set(poisoned) == set(ESTIMATORS) == set(clean)
    # columns: name, 8 advantages, verdict on the correct answer, fallback, clipped
    assert poisoned["grpo"][7] == f"{REF['grpo_correct_bessel']:.3f}" == "-0.107"
    assert poisoned["grpo"][9] == "NEGATIVE"
    assert poisoned["seed_mad"][7] == f"{REF['seed_mad_correct']:.3f}" == "0.286"
    assert poisoned["seed_mad"][10] == "yes"  # fell back to the std
    assert poisoned["robust"][7] == f"{REF['robust_correct']:.3f}"
    assert poisoned["robust"][8] == "2.500" and poisoned["robust"][9] == "positive"
    assert clean["grpo"][7] == f"{REF['clean_grpo_correct']:.3f}" == "2.475"
    assert all(row[9] == "positive" for name, row in clean.items() if name != "winsor")
    assert "seed_mad gives it 0.286 instead of about 2.47" in out


def test_estimators_lists_the_catalogue(capsys):
    assert main(["estimators"]) == 0
    out = capsys.readouterr().out
    for name, est in ESTIMATORS.items():
        assert re.search(rf"^{name}\s", out, re.M)
        for p in est.parameters:
            assert f"{p.name}={p.default!r}" in out


def test_bench_prints_a_table_with_ratios():
    out = _run("bench", "--shapes", "256x16", "64x64", "--repeats", "2", "--no-progress")
    for name in (*ESTIMATORS, "grpo (idiomatic)", "robust (numpy+scipy)"):
        assert name in out
    rows = [line for line in out.splitlines() if re.match(r"^\S.*\s\d+x\d+\s+[\d.]+\s+[\d.]+$", line)]
    assert len(rows) == 2 * (len(ESTIMATORS) + 2)
    assert all(float(r.split()[-1]) > 0 for r in rows)
    assert "faster than numpy+scipy at 256x16" in out


def test_bad_arguments_exit_with_usage():
    with pytest.raises(SystemExit) as err:
        main(["bench", "--shapes", "16by8"])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        main(["frobnicate"])
