"""Every file the suite writes is the same, byte for byte, when built again in a fresh process.

The figure style promises identical files (PNG, SVG, PDF), and sweeps and simulations promise
reproducible Parquet records. A second build in the same process would miss what changes
between processes (a random SVG id salt, a timestamp, a hash seed), so each build here runs
the command line in its own Python process, into its own folder, and the two folders are
compared file by file.

The two builds run on one machine, in one test run, with the same environment (the same torch
vector kernel and thread count), so byte equality is what the code owes: nothing here compares a
build with a file made elsewhere. Across processors the bytes are not promised: a record's floats
come from reductions whose summation order follows torch's vector kernel (a 3-step simulation's
record differs by up to 7e-12 relative between ATEN_CPU_CAPABILITY=default and avx2 or avx512,
measured), and a figure drawn from such numbers can move with them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from robustgrpo.lab.simulate import SimConfig

ROOT = Path(__file__).resolve().parents[1]
#: Two quick report figures: a line plot with a legend and a bar chart with text.
FIGURES = ("01_seed_sensitivity", "02_breakdown")


def _build(folder: Path, sim: Path, sweep: Path) -> None:
    """Run each writing command once into ``folder``, each in a fresh Python process."""
    commands = [
        ["figures", "--out", str(folder / "figures"), "--only", *FIGURES, "--formats", "png", "svg", "pdf", "--no-progress"],
        ["simulate", str(sim), "--out", str(folder / "simulate"), "--seeds", "2", "--no-progress"],
        ["sweep", str(sweep), "--out", str(folder / "sweep"), "--no-progress"],
    ]
    for argv in commands:
        subprocess.run([sys.executable, "-m", "robustgrpo", *argv], cwd=ROOT, check=True, capture_output=True, text=True)
    code = ("import sys, pandas as pd; from robustgrpo.lab.rewardlogs import load_reward_log, write_reward_log; "
            "write_reward_log(load_reward_log(sys.argv[1]).frame, sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"),
                    str(folder / "log" / "rewards.parquet")], cwd=ROOT, check=True)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("determinism")
    sim = SimConfig(n_prompts=6, G=4, steps=3, estimators=("grpo", "rank")).to_file(tmp / "sim.json")
    sweep = tmp / "sweep.json"
    sweep.write_text(json.dumps({"runnable": "agreement", "fixed": {"n_groups": 200}, "grid": {"G": [4, 8]}, "seeds": 2}))
    first, second = tmp / "first", tmp / "second"
    for folder in (first, second):
        _build(folder, sim, sweep)
    return first, second


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf", ".parquet", ".json", ".md"])
def test_a_second_build_in_a_fresh_process_writes_the_same_bytes(builds, suffix):
    first, second = (_files(f) for f in builds)
    assert first.keys() == second.keys()
    chosen = [name for name in first if name.endswith(suffix)]
    assert chosen, f"the builds wrote no {suffix} file"
    differ = [name for name in chosen if first[name] != second[name]]
    assert not differ, f"{suffix} files differ between two builds: {differ}"


@pytest.mark.slow
def test_the_builds_cover_every_format_the_suite_writes(builds):
    names = set(_files(builds[0]))
    for expected in (*(f"figures/{f}.{fmt}" for f in FIGURES for fmt in ("png", "svg", "pdf")),
                     "simulate/record.parquet", "simulate/simulation.png", "simulate/simulation.svg",
                     "sweep/manifest.json", "log/rewards.parquet"):
        assert expected in names, expected
    assert sum(name.startswith("sweep/cells/") and name.endswith(".parquet") for name in names) == 4
