"""The command line, run as users run it."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import robustgrpo
import torch

from robustgrpo import ESTIMATORS
from robustgrpo.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
REF = {k: v["value"] for k, v in json.loads((ROOT / "data" / "reference" / "seed_000.json").read_text())["values"].items()}


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "robustgrpo", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout


def _table_rows(text: str, title: str) -> dict[str, list[str]]:
    block = text.split(title, 1)[1].split("\n\n", 1)[0].splitlines()
    header = next(i for i, line in enumerate(block) if line.startswith("estimator"))
    return {line.split()[0]: line.split() for line in block[header + 1 :]}


def _table_header(out: str, title: str) -> list[str]:
    block = out.split(title, 1)[1].strip().split("\n\n", 1)[0].splitlines()
    return next(line for line in block if line.startswith("estimator")).split()


def test_demo_prints_the_true_numbers():
    # the subprocess's numbers are compared as printed, to three decimals: the rounding is the tolerance (the closest
    # to a rounding midpoint, seed_mad's 0.2855062, is 6e-6 from it; kernels that sum in another order move it by 1e-16)
    out = _run("demo")
    assert f"mean {REF['mean']:.3f}" in out
    assert f"std {REF['std_bessel']:.3f} (Bessel, ddof=1; {REF['std_population']:.3f} with ddof=0)" in out
    poisoned = _table_rows(out, "Advantages, poisoned group:")
    clean = _table_rows(out, "Advantages, clean reference")
    # the default estimator (compute_advantages with no method) is marked with a star in both tables
    default = robustgrpo.RECOMMENDED
    assert {n.rstrip("*") for n in poisoned} == set(ESTIMATORS) == {n.rstrip("*") for n in clean}
    assert f"{default}*" in poisoned and f"{default}*" in clean and sum(n.endswith("*") for n in clean) == 1
    poisoned, clean = ({n.rstrip("*"): row for n, row in t.items()} for t in (poisoned, clean))
    assert clean[default][2] == "0.875" and clean[default][1] == "-0.125"  # the lone success kept
    assert clean["winsor"][3:5] == ["zero,", "silenced"]  # winsor's zero said to be a silenced group
    assert (f"* {default} is the default, compute_advantages(rewards) with nothing said about the rewards: it keeps the "
            f"lone success of the clean group (0.875, each wrong answer -0.125)") in " ".join(out.split())
    # columns: name, one advantage per distinct reward (0 x6, 1, 10; clean: 0 x7, 1), verdict on the correct answer,
    # fallback, clipped
    assert _table_header(out, "Advantages, poisoned group:") == ["estimator", "r=0", "x6", "r=1", "r=10", "correct",
                                                               "answer", "fallback", "clipped"]
    assert _table_header(out, "Advantages, clean reference") == ["estimator", "r=0", "x7", "r=1", "correct", "answer",
                                                                "fallback", "clipped"]
    assert poisoned["grpo"][2] == f"{REF['grpo_correct_bessel']:.3f}" == "-0.107"
    assert poisoned["grpo"][4] == "NEGATIVE"
    assert poisoned["seed_mad"][2] == f"{REF['seed_mad_correct']:.3f}" == "0.286"
    assert poisoned["seed_mad"][5] == "yes"  # fell back to the std
    assert poisoned["robust"][2] == f"{REF['robust_correct']:.3f}"
    assert poisoned["robust"][3] == "2.500" and poisoned["robust"][4] == "positive"
    assert poisoned["mc_grpo"][1:4] == ["0.000", "1000.000", "10000.000"]
    assert clean["grpo"][2] == f"{REF['clean_grpo_correct']:.3f}" == "2.475"
    assert all(row[3] == "positive" for name, row in clean.items() if name != "winsor")
    for title in ("Advantages, poisoned group:", "Advantages, clean reference"):  # a Lab column's width, no wrapping
        assert max(len(line) for line in out.split(title, 1)[1].strip().split("\n\n", 1)[0].splitlines()) <= 80
    assert "seed_mad gives it 0.286 instead of about 2.47" in out


def test_estimators_lists_the_catalogue(capsys):
    assert main(["estimators"]) == 0
    out = capsys.readouterr().out
    for name, est in ESTIMATORS.items():
        assert re.search(rf"^{name}\s", out, re.M)
        for p in est.parameters:
            assert f"{p.name}={p.default!r}" in out


@pytest.mark.parametrize("mode", ["dashboard", "lessons"])
def test_bench_threads_set_for_the_run_and_restored(monkeypatch, capsys, mode):
    import robustgrpo.bench as bench
    from robustgrpo.cli import main

    seen = []
    monkeypatch.setattr(bench, f"run_{mode}_benchmark", lambda **kw: seen.append(torch.get_num_threads()) or "result")
    monkeypatch.setattr(bench, f"format_{mode}_table", lambda result: f"table of {result}")
    before = torch.get_num_threads()
    assert main(["bench", f"--{mode}", "--threads", "1", "--no-progress"]) == 0
    assert seen == [1] and torch.get_num_threads() == before
    assert capsys.readouterr().out == "table of result\n"
    assert main(["bench", f"--{mode}", "--no-progress"]) == 0
    assert seen == [1, before]


def test_the_scaling_bench_times_every_size_and_its_memory_probe_sees_the_output():
    """``bench --scaling`` at small sizes: a row per method and size with its step from the size before, and a memory
    probe that sees what a call must hold (the idiomatic GRPO's output alone is one input) and marks the target."""
    from robustgrpo.bench import MEMORY_TARGET, format_scaling_table, peak_memory, run_scaling_benchmark

    result = run_scaling_benchmark(["robust"], batches=(100, 400), group_sizes=(4, 16), repeats=1, memory_shapes=(),
                                   progress=False)
    timed = ("grpo (idiomatic)", "robust", "r - 1, new array", "r - 1, into buffer")  # (and the two reference rows)
    assert [(r.sweep, r.method, r.B, r.G) for r in result.rows] == [
        ("B", m, b, 16) for b in (100, 400) for m in timed] + [("G", m, 2**20 // g, g) for g in (4, 16) for m in timed]
    assert all(r.ns_per_reward > 0 for r in result.rows)
    first, second = result.rows[1], result.rows[5]  # robust at B = 100, then 400
    assert math.isnan(first.step) and second.step == pytest.approx(second.ns_per_reward / first.ns_per_reward)
    text = format_scaling_table(result)
    assert "ns per reward as B grows at G = 16" in text and re.search(r"^robust +[\d.]+[ *] +[\d.]+[ *]$", text, re.M)
    assert re.search(r"^r - 1, into buffer +[\d.]+[ *] +[\d.]+[ *]$", text, re.M) and "the price of fresh memory" in text
    one_input = 4 * 4096 * 256
    extra = peak_memory("grpo (idiomatic)", (4096, 256))
    assert one_input <= extra <= MEMORY_TARGET * one_input  # its output, and the mean and std rows
    with pytest.raises(ValueError, match="method must be one of"):
        peak_memory("nope", (8, 8))


@pytest.mark.slow
@pytest.mark.parametrize("method", ESTIMATORS)
def test_every_estimator_holds_at_most_four_inputs_beyond_its_input(method):
    """Issue 23's memory target, probed as ``bench --scaling`` probes it: a call on 2**20 float32 rewards (G = 16 and
    256) raises the process's peak resident memory by at most MEMORY_TARGET times the input's bytes."""
    from robustgrpo.bench import MEMORY_TARGET, peak_memory

    for shape in ((65536, 16), (4096, 256)):
        extra = peak_memory(method, shape)
        assert extra <= MEMORY_TARGET * 4 * shape[0] * shape[1], (method, shape, extra / (4 * shape[0] * shape[1]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize("mode", ["fresh", "reuse"])
def test_bench_pins_the_allocator_when_asked_and_says_so(mode):
    """--malloc pins glibc's thresholds in the bench's own process (a subprocess here: the setting lasts) and prints
    what it set above the table."""
    from robustgrpo.bench._common import ALLOCATOR_MODES

    out = _run("bench", "--shapes", "64x16", "--repeats", "1", "--no-progress", "--malloc", mode)
    assert out.splitlines()[0] == f"allocator: glibc thresholds pinned ({mode}): {ALLOCATOR_MODES[mode][2]}"
    assert "grpo (idiomatic)" in out


def test_pin_allocator_refuses_what_it_cannot_set():
    from robustgrpo.bench._common import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, pin_allocator

    class Libc:  # records the calls; refuses them when told to
        def __init__(self, accept):
            self.accept, self.calls = accept, []

        def mallopt(self, param, value):
            self.calls.append((param, value))
            return int(self.accept)

    ok = Libc(True)
    assert pin_allocator("fresh", libc=ok).startswith("allocator: glibc thresholds pinned (fresh): ")
    assert ok.calls == [(M_MMAP_THRESHOLD, 128 * 1024), (M_TRIM_THRESHOLD, 128 * 1024)]
    with pytest.raises(ValueError, match=r"^--malloc needs glibc's allocator \(Linux\)"):
        pin_allocator("reuse", libc=Libc(False))
    with pytest.raises(ValueError, match=r"^allocator mode must be one of \['fresh', 'reuse'\], got 'warm'$"):
        pin_allocator("warm")


def test_bench_prints_a_table_with_ratios():
    out = _run("bench", "--shapes", "256x16", "64x64", "--repeats", "2", "--no-progress")
    for name in (*ESTIMATORS, "grpo (idiomatic)", "robust (numpy+scipy)", "median, MAD, clip (np)"):
        assert name in out
    # one thread and torch's default count side by side (one column pair only where the default is one thread:
    # OMP_NUM_THREADS=1, or a machine of one core)
    counts = [int(k) for k in re.search(r"torch threads ([\d and]+) side by side", out).group(1).split(" and ")]
    assert counts[0] == 1 and len(counts) in (1, 2) and "load average" in out
    # one row per estimator, shape and kind of rewards: ms and x grpo at each thread count
    rows = [line for line in out.splitlines()
            if re.match(rf"^\S.*\s\d+x\d+\s+(uniform\+outlier|0/1|0/1\+jitter)(\s+[\d.]+){{{2 * len(counts)}}}$", line)]
    # (+3: the idiomatic grpo and the two numpy references; +9: grpo, robust and rank with a range, glitched, both)
    assert len(rows) == 2 * 3 * (len(ESTIMATORS) + 3 + 9)
    # the columns line up: every row's shape ends where the header's "shape" does, the longest label included
    header = next(line for line in out.splitlines() if line.startswith("estimator "))
    assert {re.search(r"\d+x\d+", r).end() for r in rows} == {header.index("shape") + len("shape")}
    assert all(float(x) > 0 for r in rows for x in r.split()[-2 * len(counts):])
    assert all(set(r.split()[-2 * len(counts) + 1::2]) == {"1.00"} for r in rows if r.startswith("grpo (idiomatic)"))
    for kind in ("uniform+outlier", "0/1", "0/1+jitter"):
        assert f"faster than numpy+scipy at 256x16 ({kind}, 1 thread)" in out
        line = f"target median, MAD and clip by one numpy sort per row < 1x grpo at 256x16 ({kind}, 1 thread)"
        assert re.search(re.escape(line) + r": \d+\.\d\dx, (met|NOT met) \(robust \d+\.\dx this floor\)$", out, re.M), line
        for G, shape in ((16, "256x16"), (64, "64x64")):
            for name in ESTIMATORS:  # (issue 41's targets: 3x, and 6x for rank and huber_m, at one thread)
                line = f"target {name} <= {6 if name in ('rank', 'huber_m') else 3}x grpo at G={G} ({shape}, {kind}, 1 thread)"
                assert re.search(re.escape(line) + r": \d+\.\d\dx, (met|NOT met)$", out, re.M), line
            for name in ("grpo", "robust", "rank"):
                for glitched in ("", ", masking a glitch in 1 group of 100"):
                    line = f"adds <= 20% to {name} at {shape} ({kind}{glitched}, 1 thread)"
                    assert re.search(r"^target a declared reward_range \(\S+, \S+\) " + re.escape(line)
                                     + r": [+-]\d+%, (met|NOT met)$", out, re.M), line


# Every command's user errors, in process (fast): one line on stderr naming the problem, status 2, no traceback.
# Every option of every command has its bad values here (a test checks that none is missing).
# {file} is an existing non-directory path, {tmp} a fresh folder, {log} the example reward log, {sim} a valid
# simulator config, {sweep} a valid sweep config, {trl} the shipped config of the trl experiment, {list} a JSON file
# holding a list.
USER_ERRORS = [
    ([], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["demo", "extra"], "unrecognized arguments: extra"),
    (["estimators", "--verbose"], "unrecognized arguments: --verbose; estimators's options: --help, --json"),
    (["estimators", "--json=1"], "argument --json: ignored explicit argument '1'"),
    (["bench", "--shapes", "16by8"], "shape must look like 65536x16, got '16by8'"),
    (["bench", "--shapes", "8x"], "shape must look like 65536x16, got '8x'"),
    (["bench", "--shapes", "0x8"], "shape sizes must be positive, got '0x8'"),
    (["bench", "--shapes"], "argument --shapes: expected at least one argument"),
    (["bench", "--shapes", "100000x100000", "--no-progress"],
     "shape 100000x100000 holds 10,000,000,000 rewards; the bench times at most 134,217,728 per shape"),
    (["bench", "--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    (["bench", "--repeats", "x"], "argument --repeats: must be an integer, got 'x'"),
    (["bench", "--repeats", "1.5"], "argument --repeats: must be an integer, got '1.5'"),
    (["bench", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["bench", "--dashboard", "x"], "unrecognized arguments: x"),
    (["bench", "--simulate=yes"], "argument --simulate: ignored explicit argument 'yes'"),
    (["bench", "--sweep=1"], "argument --sweep: ignored explicit argument '1'"),
    (["bench", "--trainer=1"], "argument --trainer: ignored explicit argument '1'"),
    (["bench", "--adapters=1"], "argument --adapters: ignored explicit argument '1'"),
    (["bench", "--scaling=1"], "argument --scaling: ignored explicit argument '1'"),
    (["bench", "--lessons=1"], "argument --lessons: ignored explicit argument '1'"),
    (["bench", "--dashboard", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    (["bench", "--threads", "1", "--shapes", "8x4"], "--threads applies to --dashboard and --lessons only"),
    (["bench", "--malloc", "warm"], "argument --malloc: invalid choice: 'warm' (choose from 'fresh', 'reuse')"),
    (["figures"], "the following arguments are required: --out"),
    (["figures", "--out"], "argument --out: expected one argument"),
    (["figures", "--out", "{tmp}", "--only", "no_such_figure"], "unknown report figure(s) ['no_such_figure']; known: 01_"),
    (["figures", "--out", "{tmp}", "--only"], "argument --only: expected at least one argument"),
    (["figures", "--out", "{tmp}", "--formats", "gif"], "argument --formats: invalid choice: 'gif'"),
    (["figures", "--out", "{tmp}", "--formats"], "argument --formats: expected at least one argument"),
    (["figures", "--out", "{file}", "--only", "02_breakdown", "--no-progress"],
     "cannot make the folder '{file}' (File exists); pass a folder you can write to"),
    (["figures", "--out", "{file}/sub", "--only", "02_breakdown", "--no-progress"],
     "cannot make the folder '{file}/sub' (Not a directory)"),
    (["figures", "--out", "{tmp}", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["notebooks"], "the following arguments are required: --out"),
    (["notebooks", "--out", "{tmp}", "--only", "nope"], "no notebook 'nope'; pass an .ipynb file or one of the series: 01_"),
    (["notebooks", "--out", "{tmp}", "--only", "x.ipynb"], "no notebook 'x.ipynb'"),
    (["notebooks", "--out", "{tmp}", "--only"], "argument --only: expected at least one argument"),
    (["notebooks", "--out", "{file}", "--only", "01_outlier_poisoning"], "cannot make the folder '{file}/figures' (Not a directory)"),
    (["notebooks", "--out", "{tmp}", "--timeout", "0"], "argument --timeout: must be >= 1, got 0"),
    (["notebooks", "--out", "{tmp}", "--timeout", "x"], "argument --timeout: must be an integer, got 'x'"),
    (["notebooks", "--out", "{tmp}", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["trap-page"], "the following arguments are required: --out"),
    (["trap-page", "--out", "{file}"], "cannot make the folder '{file}' (File exists); pass a folder you can write to"),
    (["book"], "the following arguments are required: --out"),
    (["book", "--out", "{file}", "--executed", "{tmp}"], "cannot make the folder '{file}' (File exists)"),
    (["book", "--out", "{tmp}/b", "--executed", "{tmp}/none"], "{tmp}/none lacks the executed chapter(s) 01_outlier_poisoning"),
    (["book", "--out", "{tmp}/b", "--report", "{tmp}"], "{tmp} holds no index.md; pass the folder python -m robustgrpo figures"),
    (["book", "--out", "{tmp}/b", "--trap-page", "{file}"], "{file} is not a trap lesson page; pass the trap_lesson.html"),
    (["book", "--out", "{tmp}/b", "--timeout", "0"], "argument --timeout: must be >= 1, got 0"),
    (["book", "--out", "{tmp}/b", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["battery", "--quick", "--write"], "--write ships the full battery; drop --quick"),
    (["bench", "--battery=yes"], "argument --battery: ignored explicit argument 'yes'"),
    (["battery", "--out", "{file}/sub", "--quick"], "cannot make the folder"),
    (["battery", "--no-progress=yes"], "argument --no-progress: ignored explicit argument 'yes'"),
    (["diagnose", "{log}", "--reward-kind", "judge"], "argument --reward-kind: invalid choice: 'judge'"),
    (["diagnose"], "the following arguments are required: file"),
    (["diagnose", "{tmp}/none.csv"], "none.csv: no such file or folder; pass the path of a reward log"),
    (["diagnose", "{tmp}/no_such_run"], "no_such_run: no such file or folder; pass the path of a reward log"),
    (["diagnose", "{log}", "--json=yes"], "argument --json: ignored explicit argument 'yes'"),
    (["diagnose", "{log}", "--reward-rnage", "0", "1"], "unrecognized arguments: --reward-rnage 0 1; did you mean '--reward-range'? "
                                                       "diagnose's options: --help, --reward-range, --reward-fn, --reward-kind"),
    (["diagnose", "{log}", "--reward-kind", "binry"], "invalid choice: 'binry' (choose from 'binary', 'composite', "
                                                     "'continuous', 'any'); did you mean 'binary'?"),
    (["diagnoze", "{log}"], "invalid choice: 'diagnoze' (choose from 'demo'"),
    (["diagnose", "{file}"], "unknown file type '.txt'; reward logs are read from .csv"),
    (["diagnose", "{log}", "--reward-range", "1", "0"], "reward_range"),
    (["diagnose", "{log}", "--reward-range", "0"], "argument --reward-range: expected 2 arguments"),
    (["diagnose", "{log}", "--reward-range", "a", "b"], "argument --reward-range: invalid float value: 'a'"),
    (["diagnose", "{log}", "--reward-range", "nan", "1"], "reward_range lo must be a finite number, got nan"),
    (["diagnose", "{log}", "--reward-range", "0", "inf"], "reward_range hi must be a finite number, got inf"),
    (["diagnose", "{log}", "--column", "bad"], "--column must look like group=prompt_id, got 'bad'"),
    (["diagnose", "{log}", "--column", "colour=x"], "unknown field(s) ['colour']; the fields are ['step', 'group'"),
    (["diagnose", "{log}", "--column", "group=nope"], "no column 'nope' (given for group)"),
    (["diagnose", "{log}", "--reward-fn", "nope"], "nope"),
    (["diagnose", "{log}", "--skip-bad=yes"], "argument --skip-bad: ignored explicit argument 'yes'"),
    (["diagnose", "{log}", "--html", "{tmp}"], "'{tmp}' is a folder; pass the file to write inside it"),
    (["diagnose", "{log}", "--html", "{file}/sub/report.html"], "the folder '{file}/sub' does not exist; make it first"),
    (["diagnose", "{tmp}"], "no run logs found: TRL writes output_dir/completions/completions_<step>.parquet"),
    (["diagnose", "{run}", "--group-size", "0"], "argument --group-size: must be >= 1, got 0"),
    (["diagnose", "{run}", "--group-size", "8"], "rows 1-8 (a group of num_generations=8) hold 2 prompts"),
    (["diagnose", "{log}", "--group-size", "4"], "--group-size and --reward-weights apply to"),
    (["diagnose", "{run}", "--reward-weights", "1"], "--reward-weights must be 2 finite numbers"),
    (["diagnose", "{run}", "--reward-weights", "x"], "argument --reward-weights: invalid float value: 'x'"),
    (["diagnose", "{run}", "--skip-bad"], "--column and --skip-bad apply to reward log files"),
    (["simulate"], "the following arguments are required: config, --out"),
    (["simulate", "{tmp}/none.json", "--out", "{tmp}"], "no config file at"),
    (["simulate", "{file}", "--out", "{tmp}"], "invalid JSON at line 1"),
    (["simulate", "{list}", "--out", "{tmp}"], "a simulator config must be a JSON object (a dict), got list"),
    (["simulate", "{sim}"], "the following arguments are required: --out"),
    (["simulate", "{sim}", "--out", "{file}"], "cannot make the folder '{file}' (File exists)"),
    (["simulate", "{tmp}/none.json", "--out", "{tmp}", "--seeds", "-1"], "argument --seeds: seeds must be >= 0, got -1"),
    (["simulate", "{tmp}/none.json", "--out", "{tmp}", "--seeds", "x"], "argument --seeds: seeds must be integers, got 'x'"),
    (["simulate", "{sim}", "--out", "{tmp}", "--seeds", "1", "1"], "--seeds must be distinct, got [1, 1]"),
    (["simulate", "{sim}", "--out", "{tmp}", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["sweep"], "the following arguments are required: CONFIG | status DIR"),
    (["sweep", "status"], "usage: sweep status DIR"),
    (["sweep", "status", "{tmp}"], "holds no sweep record (no manifest.json); pass the --out folder of a sweep"),
    (["sweep", "status", "{tmp}/none"], "none: no such folder; pass the --out folder of a sweep"),
    (["sweep", "{sweep}", "--out", "{tmp}", "--json"], "--json applies to sweep status DIR"),
    (["sweep", "{sweep}", "{sweep}", "--out", "{tmp}"], "sweep takes one CONFIG file"),
    (["sweep", "{sweep}"], "sweep CONFIG needs --out DIR"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}"], "no sweep config at"),
    (["sweep", "{list}", "--out", "{tmp}"], "a sweep config must be a JSON object, got list"),
    (["sweep", "{sweep}", "--out", "{file}", "--no-progress"], "cannot make the folder '{file}/cells' (Not a directory)"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}", "--retries", "-1"], "argument --retries: must be >= 0, got -1"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}", "--engine", "dask"], "argument --engine: invalid choice: 'dask'"),
    (["sweep", "{sweep}", "--out", "{tmp}", "--address", "auto"], "--address applies to the ray engine; add --engine ray"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}", "--num-cpus", "0"], "argument --num-cpus: must be >= 1, got 0"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}", "--cpus-per-cell", "0"], "argument --cpus-per-cell: must be >= 1, got 0"),
    (["sweep", "{tmp}/none.json", "--out", "{tmp}", "--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
    (["sweep", "{sweep}", "--out", "{tmp}", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    (["experiment", "verl", "{tmp}/none.json", "--out", "{tmp}"], "argument trainer: invalid choice: 'verl'"),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}"], "no sweep config at"),
    (["experiment", "trl", "{file}", "--out", "{tmp}"], "invalid JSON at line 1"),
    (["experiment", "trl", "{tmp}/none.json"], "the following arguments are required: --out"),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}", "--retries", "-1"], "argument --retries: must be >= 0, got -1"),
    (["experiment", "trl", "{sweep}", "--out", "{tmp}"],
     "is a sweep of the 'agreement' runnable; experiment trl runs a config whose \"runnable\" is \"trl\""),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}", "--engine", "dask"], "argument --engine: invalid choice: 'dask'"),
    (["experiment", "trl", "{trl}", "--out", "{tmp}", "--address", "auto"], "--address applies to the ray engine; add --engine ray"),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}", "--num-cpus", "0"], "argument --num-cpus: must be >= 1, got 0"),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}", "--cpus-per-cell", "x"],
     "argument --cpus-per-cell: must be an integer, got 'x'"),
    (["experiment", "trl", "{tmp}/none.json", "--out", "{tmp}", "--batch-size", "4"], "unrecognized arguments: --batch-size 4"),
    (["experiment", "trl", "{trl}", "--out", "{tmp}", "--no-progress=1"], "argument --no-progress: ignored explicit argument '1'"),
    # issue 25: hostile input; resources bounded by the machine; outputs only where they may go
    (["bench", "--dashboard", "--threads", "100000"], "argument --threads: must be an integer in [1, {cpus}], got 100000; "
                                                      "this machine has {cpus} CPUs (os.cpu_count())"),
    (["diagnose", "{log}", "--force"], "--force applies to --html (replace an existing page); add --html OUT"),
    (["diagnose", "{log}", "--html", "{log}"], "is an input of this command"),
    (["diagnose", "{log}", "--html", "{file}"], "'{file}' exists; pass another path, or --force to replace it"),
    (["diagnose", "{log}", "--html", "{link}"], "'{link}' is a symbolic link; outputs never follow one"),
    (["diagnose", "{log}", "--html", "{tmp}/no/such/../r.html"], "the folder '{tmp}/no/such/..' does not exist"),
    (["diagnose", "{latin1}"], "latin1.csv: not UTF-8 text: byte 0xe9 at line 2, column 6 (byte offset 23); save the file as UTF-8"),
    (["diagnose", "{deep_jsonl}"], "deep.jsonl: line 2 nests JSON more than 64 levels deep"),
    (["diagnose", "{huge_step}"], "huge_step.csv: line 2, column 'step': not an exact integer < 2**63: '1e30'"),
    (["diagnose", "{huge_reward}"], "huge_reward.jsonl: line 1, column 'reward': not finite"),
    (["simulate", "{sim}", "--out", "{tmp}", "--seeds", "100000000000000000000"],
     "argument --seeds: seeds must be integers in [0, 2**63), got 100000000000000000000"),
    (["simulate", "{sim}", "--out", "{tmp}", "--yes=1"], "argument --yes: ignored explicit argument '1'"),
    (["simulate", "{sim_lr}", "--out", "{tmp}/lr", "--no-progress"], "the policy's parameters became NaN or infinite at step 0"),
    (["simulate", "{sim_long}", "--out", "{tmp}", "--no-progress"], "this run needs at least "),
    (["simulate", "{sim_big}", "--out", "{tmp}", "--no-progress", "--yes"], "more than this machine's"),
    (["simulate", "{sim_steps}", "--out", "{tmp}"], "steps must be an integer >= 1 that fits in 64 bits"),
    (["simulate", "{deep_json}", "--out", "{tmp}"], "deep.json: JSON nested more than 64 levels deep"),
    (["simulate", "{latin1_json}", "--out", "{tmp}"], "latin1.json: not UTF-8 text: byte 0xe9 at line 1"),
    (["simulate", "{out_config}", "--out", "{tmp}/out"], "is an input of this command"),
    (["sweep", "{sweep}", "--out", "{tmp}/c", "--cpus-per-cell", "100000", "--no-progress"],
     "cpus_per_cell is 100000, more than this machine's {cpus} CPUs (os.cpu_count())"),
    (["sweep", "{sweep_cpus}", "--out", "{tmp}/c", "--no-progress"], "cpus_per_cell is 1000000, more than this machine's"),
    (["sweep", "{sweep_huge}", "--out", "{tmp}/h"], "declares 1,000,000 cells (100 G x 100 c x 1 draws x 100 seeds), more than 100,000"),
    (["sweep", "{sweep_long}", "--out", "{tmp}/l", "--no-progress"], "this run needs at least "),
    (["sweep", "{sweep_seed}", "--out", "{tmp}/s"], "seeds: each seed must be an integer in [0, 2**63), got 100000000000000000000"),
    (["sweep", "{sweep}", "--out", "{tmp}", "--connect-timeout", "0"], "argument --connect-timeout: must be a number of seconds > 0"),
    (["sweep", "{sweep}", "--out", "{tmp}", "--yes=1"], "argument --yes: ignored explicit argument '1'"),
    (["sweep", "{sweep}", "--out", "{tmp}/r", "--allow-remote-reporting"], "--allow-remote-reporting applies to trainer runs"),
    (["sweep", "status", "{no_cells}"], "manifest.json: not a sweep manifest (no 'cells' key)"),
    (["sweep", "status", "{bad_cells}"], "manifest.json: not a sweep manifest (cells[0] is a int, not an object)"),
    (["sweep", "status", "{broken}"], "manifest.json: invalid JSON at line 1, column 2"),
    (["notebooks", "--out", "{tmp}", "--only", "{fake_notebook}"], "fake.ipynb: not a valid Jupyter notebook (ValidationError"),
    (["notebooks", "--out", "{tmp}", "--update-prose=1"], "argument --update-prose: ignored explicit argument '1'"),
    (["experiment", "trl", "{trl_up}", "--out", "{tmp}"], "fixed.output_dir: output_dir must stay inside the record folder"),
    (["experiment", "trl", "{trl_abs}", "--out", "{tmp}"], "output_dir must be a folder relative to the record folder"),
    (["experiment", "trl", "{trl_wandb}", "--out", "{tmp}/w"], "report_to names ['wandb'], which may send the run's data over "
                                                               "the network"),
    (["experiment", "trl", "{trl_big}", "--out", "{tmp}/b", "--no-progress"], "this run needs at least "),
    (["experiment", "trl", "{trl}", "--out", "{tmp}", "--connect-timeout", "x"], "argument --connect-timeout: must be a number of seconds"),
    (["experiment", "trl", "{trl}", "--out", "{tmp}", "--yes=1"], "argument --yes: ignored explicit argument '1'"),
    (["experiment", "trl", "{trl}", "--out", "{tmp}", "--allow-remote-reporting=1"],
     "argument --allow-remote-reporting: ignored explicit argument '1'"),
]


def _commands():
    return build_parser()._subparsers._group_actions[0].choices


def test_every_command_and_every_option_has_its_user_errors_tested():
    assert {argv[0] for argv, _ in USER_ERRORS if argv} - {"frobnicate", "diagnoze"} == set(_commands())
    for name, command in _commands().items():
        tried = {a.split("=")[0] for argv, _ in USER_ERRORS if argv[:1] == [name] for a in argv[1:]}
        for action in command._actions:
            if action.option_strings and action.dest != "help":
                assert tried & set(action.option_strings), f"{name} {action.option_strings[0]}: no bad value tested"


@pytest.fixture
def fill(tmp_path):
    from robustgrpo.lab.simulate import SimConfig

    file = tmp_path / "not_a_folder.txt"
    file.write_text("plain text\n")
    (tmp_path / "list.json").write_text("[1, 2]\n")
    (tmp_path / "sweep.json").write_text(json.dumps({"runnable": "agreement", "fixed": {"n_groups": 100}, "grid": {"G": [4]}}))
    (tmp_path / "link.html").symlink_to(file)

    def write(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return str(path)

    sim = SimConfig(n_prompts=6, G=4, steps=2, estimators=("grpo",))
    deep = "[" * 100_000 + "]" * 100_000
    trl = {"runnable": "trl", "fixed": {"steps": 2}}
    manifest = {"format": 1, "runnable": "toy", "specs": []}
    return {"tmp": str(tmp_path), "file": str(file), "log": str(ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"),
            "sim": str(sim.to_file(tmp_path / "sim.json")),
            "sweep": str(tmp_path / "sweep.json"), "list": str(tmp_path / "list.json"),
            "trl": str(ROOT / "data" / "sweeps" / "trl_contamination.json"),
            "cpus": str(os.cpu_count()), "link": str(tmp_path / "link.html"),
            "latin1": write("latin1.csv", "step,group,reward\n0,caf\xe9,1\n".encode("latin-1")),
            "deep_jsonl": write("deep.jsonl", '{"step": 0, "group": "a", "reward": 1}\n' + deep + "\n"),
            "huge_step": write("huge_step.csv", "step,group,reward\n1e30,a,1\n"),
            "huge_reward": write("huge_reward.jsonl", '{"step": 0, "group": "a", "reward": 1' + "0" * 400 + "}\n"),
            "sim_lr": str(sim.replace(lr=1e300).to_file(tmp_path / "sim_lr.json")),
            "sim_long": str(sim.replace(steps=10**12).to_file(tmp_path / "sim_long.json")),
            "sim_big": str(SimConfig(n_prompts=10**8).to_file(tmp_path / "sim_big.json")),
            "sim_steps": write("sim_steps.json", json.dumps({"steps": 10**30})),
            "deep_json": write("deep.json", deep),
            "latin1_json": write("latin1.json", '{"quality": "caf\xe9"}'.encode("latin-1")),
            "out_config": str(sim.to_file((tmp_path / "out").mkdir() or tmp_path / "out" / "config.json")),
            "sweep_cpus": write("cpus.json", json.dumps({"runnable": "agreement", "fixed": {"n_groups": 10}, "cpus_per_cell": 10**6})),
            "sweep_huge": write("huge.json", json.dumps({"runnable": "agreement", "grid": {"G": list(range(2, 102)),
                                                         "c": [1.0 + i for i in range(100)]}, "seeds": 100})),
            "sweep_long": write("long.json", json.dumps({"runnable": "simulate", "fixed": {"steps": 10**12}})),
            "sweep_seed": write("seed.json", json.dumps({"runnable": "agreement", "seeds": [10**20]})),
            "no_cells": str(Path(write("nocells/manifest.json", json.dumps(manifest))).parent),
            "bad_cells": str(Path(write("badcells/manifest.json", json.dumps({**manifest, "cells": [3]}))).parent),
            "broken": str(Path(write("broken/manifest.json", "{oops")).parent),
            "fake_notebook": write("fake.ipynb", json.dumps({"cells": "not a list"})),
            "trl_up": write("trl_up.json", json.dumps({**trl, "fixed": {"steps": 2, "output_dir": "../../x"}})),
            "trl_abs": write("trl_abs.json", json.dumps({**trl, "fixed": {"steps": 2, "output_dir": "/tmp/x"}})),
            "trl_wandb": write("trl_wandb.json", json.dumps({**trl, "fixed": {"steps": 2, "output_dir": "runs",
                                                                              "report_to": "wandb"}})),
            "trl_big": write("trl_big.json", json.dumps({**trl, "fixed": {"steps": 2, "prompts_per_step": 10**8}})),
            "run": str(ROOT / "data" / "run_logs" / "trl"),
            }


@pytest.mark.parametrize("argv, message", USER_ERRORS, ids=[" ".join(a) or "(nothing)" for a, _ in USER_ERRORS])
def test_user_errors_are_one_line_on_stderr_and_status_2(fill, capsys, argv, message):
    try:
        status = main([a.format(**fill) for a in argv])
    except SystemExit as stop:  # argparse's usage errors leave through SystemExit
        status = stop.code
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("python -m robustgrpo") and ": error: " in captured.err
    assert message.format(**fill) in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_a_user_error_from_the_shell_is_one_line_without_traceback():
    done = subprocess.run([sys.executable, "-m", "robustgrpo", "bench", "--repeats", "0"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("python -m robustgrpo bench: error: argument --repeats: must be >= 1, got 0 "
                           "(see python -m robustgrpo bench --help)\n")
