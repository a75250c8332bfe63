"""Hostile input and concurrent runs (issue 25): nothing escapes, nothing is lost, nothing crashes.

Text from a log never drives the terminal or the page; outputs go only where they may; resources
are bounded by the machine; records cannot lie; sweeps into one folder at once lose nothing. The
user mistakes of the command line, one line each, are in ``test_cli.USER_ERRORS``; the standing
fuzz is ``test_fuzz``.
"""

from __future__ import annotations

import html
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from robustgrpo import compute_advantages
from robustgrpo.lab.files import check_output_file, loads_json, plain_text, terminal_text, write_new_file
from robustgrpo.lab.machine import Estimate, check_estimate, check_threads
from robustgrpo.cli import main
from robustgrpo.lab.diagnose import buckets, diagnose
from robustgrpo.inputs import group_by_index
from robustgrpo.book.your_rewards.report import diagnosis_html, write_diagnosis_html
from robustgrpo.lab.rewardlogs import RewardLog, load_reward_log, write_reward_log
from robustgrpo.lab.simulate import SimConfig, simulate
from robustgrpo.lab.simulate.runner import torch_threads
from robustgrpo.lab.sweep import LocalEngine, RayEngine, load_record, load_sweep, run_sweep, sweep_status
from robustgrpo.lab.sweep.record import Record, format_status

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
EXAMPLE = ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"
sys.path.insert(0, str(TESTS))
from test_sweep import TOYS  # noqa: E402  (the toy runnable of the sweep tests)

#: Terminal escapes a log could carry: clear the screen, set the window title (OSC, BEL- and ST-ended), CSI as C1,
#: a bidirectional override.
ESCAPES = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b]2;title\x1b\\", "\x9b31m", "\u202egnp.exe"]
#: Markup a page must show as text.
XSS = ["<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>", "'><svg/onload=alert(1)>",
       "</title><script>alert(2)</script>", "<iframe src=javascript:alert(3)>", "&lt;b&gt;"]
CONTROL = {chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]} | {"\u202e"}


def _log_with(groups: list[str], reward_fn: str = "judge") -> pd.DataFrame:
    """One step; each group has a 10 among 0/1 rewards, so every group id reaches the outlier table."""
    rows = [{"step": 0, "group": g, "reward": r, "reward_fn": reward_fn} for g in groups for r in (0.0, 1.0, 0.0, 10.0)]
    return pd.DataFrame(rows)


def _no_control(text: str) -> None:
    assert not (set(text) & CONTROL), sorted(hex(ord(c)) for c in set(text) & CONTROL)


# ----------------------------------------------------------------------------- the terminal


def test_text_helpers_escape_every_control_character_and_keep_the_rest():
    assert terminal_text("a\tb\nc\x1b[2J") == "a\tb\nc\\x1b[2J"
    assert plain_text("a\tb\nc") == "a\\x09b\\x0ac"
    assert plain_text("\x9b\u202e") == "\\x9b\\u202e"
    assert plain_text("café 1/2 ✓") == "café 1/2 ✓"  # printable Unicode is text
    for s in ESCAPES:
        _no_control(plain_text(s))
        _no_control(terminal_text(s))


def test_group_ids_and_names_with_terminal_escapes_are_printed_inert(tmp_path, capsys):
    log = write_reward_log(_log_with(ESCAPES, reward_fn="\x1b]0;fn\x07"), tmp_path / "esc.csv")
    assert main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    _no_control(out.replace("\n", "").replace("\t", ""))
    assert "\\x1b[2J\\x1b[H" in out and "\\x1b]0;pwned\\x07" in out and "\\x9b31m" in out and "\\u202egnp.exe" in out
    assert "reward function: \\x1b]0;fn\\x07" in out
    # an error line quoting the log (a bad reward, a file name) is inert too
    bad = tmp_path / "bad\x1b[2J.csv"
    bad.write_text("step,group,reward\n0,a,\x1b]0;x\x07\n")
    assert main(["diagnose", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    _no_control(err[:-1])
    assert "bad\\x1b[2J.csv" in err


def test_the_html_page_shows_markup_from_the_log_as_text(tmp_path):
    name = "log<script>alert(0)</script>.csv"
    log = write_reward_log(_log_with(XSS + ESCAPES, reward_fn="<b onmouseover=alert(4)>"), tmp_path / name)
    page = diagnosis_html(diagnose(log))
    for payload in (*XSS, "<b onmouseover=alert(4)>", "<script>alert(0)</script>"):
        if payload != "&lt;b&gt;":
            assert payload not in page
    assert html.escape(XSS[0]) in page and "&amp;lt;b&amp;gt;" in page  # escaped once, shown as written
    assert "<script" not in page.lower()
    _no_control(page.replace("\n", ""))


def test_a_file_name_with_dollar_signs_does_not_become_mathtext(tmp_path, capsys):
    log = write_reward_log(_log_with(["a"]), tmp_path / "run$x^{$.csv")
    out = tmp_path / "r.html"
    assert main(["diagnose", str(log), "--html", str(out)]) == 0, capsys.readouterr().err
    assert out.read_text().count("data:image/png;base64,") == 3


# ------------------------------------------------------------------------------ outputs


def test_html_never_replaces_the_log_follows_a_link_or_overwrites_without_force(tmp_path, capsys):
    log = tmp_path / "log.csv"
    log.write_bytes(EXAMPLE.read_bytes())
    before = log.read_bytes()
    (tmp_path / "alias.csv").symlink_to(log)
    os.link(log, tmp_path / "hard.csv")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out.html").symlink_to(victim)
    for target, message in ((log, "is an input of this command"),
                            (tmp_path / "hard.csv", "is an input of this command"),
                            (tmp_path / "alias.csv", "is a symbolic link"),
                            (tmp_path / "out.html", "is a symbolic link"),
                            (tmp_path / "sub" / ".." / "x.html", "does not exist"),
                            (victim, "exists; pass another path, or --force")):
        assert main(["diagnose", str(log), "--html", str(target)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (target, err)
    for target in (log, tmp_path / "alias.csv", tmp_path / "out.html"):  # not even with --force
        assert main(["diagnose", str(log), "--html", str(target), "--force"]) == 2
        capsys.readouterr()
    assert log.read_bytes() == before and victim.read_text() == "keep me"
    assert main(["diagnose", str(log), "--html", str(victim), "--force"]) == 0
    assert victim.read_text().startswith("<!DOCTYPE html>") and not victim.is_symlink()


def test_write_new_file_is_atomic_and_refuses_an_existing_name(tmp_path):
    path = check_output_file(tmp_path / "a.txt")
    write_new_file(path, lambda h: h.write(b"one"))
    with pytest.raises(ValueError, match="exists"):
        write_new_file(path, lambda h: h.write(b"two"))
    assert path.read_bytes() == b"one" and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    write_new_file(path, lambda h: h.write(b"two"), force=True)
    assert path.read_bytes() == b"two"


def test_a_trl_config_cannot_write_outside_the_record_or_turn_on_network_reporting(tmp_path):
    from robustgrpo.lab.experiments.config import TrlConfig, check_reporting, run_root

    for bad, message in (("../../x", "'..' is not allowed"), ("a/../../x", "'..' is not allowed"),
                         ("/tmp/x", "not an absolute path"), ("C:\\x", "not an absolute path"), ("", "folder name")):
        with pytest.raises(ValueError, match=message):
            TrlConfig(output_dir=bad)
    assert TrlConfig(output_dir="runs/trl").output_dir == "runs/trl"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "escape").symlink_to(tmp_path)
    assert run_root("runs", tmp_path / "out") == (tmp_path / "out" / "runs").resolve()
    with pytest.raises(ValueError, match="leads outside .* through a symbolic link"):
        run_root("escape/x", tmp_path / "out")
    from robustgrpo.lab.sweep.runnables import _trl_preflight  # a sweep's check before any cell runs: the same refusal

    _trl_preflight({"output_dir": "runs"}, folder=tmp_path / "out")
    with pytest.raises(ValueError, match="leads outside .* through a symbolic link"):
        _trl_preflight({"output_dir": "escape/x"}, folder=tmp_path / "out")
    check_reporting(("tensorboard",), False)
    for names in (("wandb",), ("all",), ("mlflow", "tensorboard")):
        with pytest.raises(ValueError, match="may send the run's data over the network"):
            check_reporting(names, False)
        check_reporting(names, True)
    # the sweep refuses before it writes anything
    spec = {"runnable": "trl", "fixed": {"steps": 2, "output_dir": "runs", "report_to": "wandb"}}
    with pytest.raises(ValueError, match="report_to names \\['wandb'\\]"):
        run_sweep(spec, tmp_path / "rec", progress=False)
    assert not (tmp_path / "rec").exists()


def test_a_trl_run_loads_weights_without_a_thread_pool_and_says_so_when_no_thread_starts(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    import transformers

    from robustgrpo.lab.experiments import TrlConfig, run_trl

    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD", raising=False)

    def refuse(*args, **kwargs):
        assert os.environ["HF_DEACTIVATE_ASYNC_LOAD"] == "1"
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", refuse)
    with pytest.raises(RuntimeError, match=r"the machine could not start another thread for the run .*\(OMP_NUM_THREADS=1\)"):
        run_trl(TrlConfig(steps=1, prompts_per_step=2, G=2, eval_prompts=0), 0)


# ---------------------------------------------------------------------------- resources


def test_thread_counts_are_bounded_by_the_machine():
    with pytest.raises(ValueError, match=rf"threads must be an integer in \[1, {os.cpu_count()}\], got 100000; "):
        with torch_threads(100_000):
            pass
    assert check_threads("n", os.cpu_count()) == os.cpu_count()
    sweep = load_sweep({"runnable": "agreement", "cpus_per_cell": 10**6})
    with pytest.raises(ValueError, match=r"cpus_per_cell is 1000000, more than this machine's \d+ CPUs"):
        LocalEngine().check(sweep)
    with pytest.raises(ValueError, match=r"more than the \d+ CPUs of the local Ray instance"):
        RayEngine().check(sweep)


def test_runs_far_beyond_the_machine_are_refused_before_anything_is_allocated(tmp_path):
    start = time.perf_counter()
    for changes in ({"n_prompts": 10**8}, {"n_answers": 10**8}, {"G": 10**8}):
        with pytest.raises(ValueError, match=r"this run needs at least .* of memory .*, more than this machine's"):
            simulate(SimConfig(**changes), [0], progress=False)
    with pytest.raises(ValueError, match=r"make it smaller, or pass yes=True \(--yes\)"):
        check_estimate(SimConfig(steps=10**12).estimate(1))
    with pytest.raises(ValueError, match=r"this run needs at least .* more than 1 days on this machine"):
        check_estimate(Estimate("x", 1.0, 1e9))
    assert check_estimate(Estimate("x", 1e30, 1e30), yes=True).bytes == 1e30
    with pytest.raises(ValueError, match=r"declares 1,000,000 cells \(1000 x x 1 draws x 1000 seeds\), more than 100,000"):
        load_sweep({"runnable": "toy", "grid": {"x": list(range(1000))}, "seeds": 1000}, runnables=TOYS)
    with pytest.raises(ValueError, match=r"declares 10,000,000,000 cells"):
        load_sweep({"runnable": "toy", "seeds": 10**10}, runnables=TOYS)  # refused before range(10**10) is made
    with pytest.raises(ValueError, match=r"this run needs at least"):
        run_sweep({"runnable": "simulate", "fixed": {"steps": 10**12}}, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
    assert time.perf_counter() - start < 10


def test_a_diverging_simulation_stops_with_an_error_instead_of_a_nan_record(tmp_path, capsys):
    for optimizer in ("adam", "sgd"):
        with pytest.raises(ValueError, match=r"became NaN or infinite at step 0 .*lower lr"):
            simulate(SimConfig(lr=1e300, optimizer=optimizer, steps=5), [0], progress=False)
    config = SimConfig(lr=1e300, steps=5, n_prompts=4).to_file(tmp_path / "lr.json")
    assert main(["simulate", str(config), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert not (tmp_path / "out" / "record.parquet").exists()
    assert "diverged" in capsys.readouterr().err


def test_diagnose_on_ragged_groups_is_fast_and_small(tmp_path):
    """One group of 10,000 beside 10,000 one-sample groups (the issue's log): was 2 min 14 s and 14.9 GB."""
    rng = np.random.default_rng(0)
    frame = pd.concat([pd.DataFrame({"step": 0, "group": "big", "reward": rng.integers(0, 2, 10_000).astype(float)}),
                       pd.DataFrame({"step": 0, "group": [f"s{i}" for i in range(10_000)],
                                     "reward": rng.integers(0, 2, 10_000).astype(float)})])
    log = write_reward_log(frame, tmp_path / "ragged.csv")
    # the peak is this process's own (VmHWM): ru_maxrss would carry over the RSS of the test process it was spawned from
    code = ("import re, sys, time; from robustgrpo.lab.diagnose import diagnose; t = time.perf_counter(); "
            "d = diagnose(sys.argv[1]); seconds = time.perf_counter() - t; "
            "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1); "
            "print(seconds, int(hwm) * 1024, len(d.groups))")
    done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    seconds, peak, groups = done.stdout.split()
    assert int(groups) == 10_001
    assert float(seconds) < 30 and int(peak) < 1.5e9, (seconds, peak)
    grouping = group_by_index(frame["group"].to_numpy(), len(frame))
    slots = sum(len(b.rows) * b.width for b in buckets(grouping))
    assert slots < 2 * len(frame) and grouping.n_groups * grouping.group_size == 10_001 * 10_000


def test_diagnose_by_blocks_gives_the_padded_layouts_numbers():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 40, 120)
    frame = pd.DataFrame({"step": np.repeat(np.arange(len(sizes)) % 4, sizes),
                          "group": np.repeat([f"g{i}" for i in range(len(sizes))], sizes)})
    frame["reward"] = np.where(rng.random(len(frame)) < 0.05, 9.0, rng.integers(0, 2, len(frame)).astype(float))
    frame["line"] = np.arange(2, len(frame) + 2)
    d = diagnose(RewardLog(frame, Path("x.csv"), {}, len(frame)))
    keys = frame["step"].astype(str) + "/" + frame["group"]
    batch = frame["step"].to_numpy()  # each step a training batch of its own
    for method in ("grpo", "batch_std", "rank", "robust", "batch_huber", "winsor"):
        for step in range(4):
            rows = (frame["step"] == step).to_numpy()
            rewards = frame["reward"].to_numpy(copy=True)  # (a writable array: pandas 3 hands out read-only ones)
            ref = compute_advantages(rewards, "grpo", index=keys.to_numpy()).advantages[rows]
            other = compute_advantages(rewards, method, index=keys.to_numpy(), batch=batch).advantages[rows]
            cos = float(ref @ other / (np.linalg.norm(ref) * np.linalg.norm(other)))
            got = d.agreement.set_index(["step", "method"]).loc[(step, method), "cosine_to_grpo"]
            assert got == pytest.approx(cos, rel=1e-12, abs=1e-12), (method, step)


# --------------------------------------------------------------------------------- inputs


def test_index_keys_of_two_kinds_or_none_are_refused():
    with pytest.raises(ValueError, match=r"index mixes kinds of keys \(number 1, string '1'\): 1 and '1' would be read as one"):
        compute_advantages([1.0, 0.0, 1.0, 0.0], "grpo", index=[1, "1", 1, "1"])
    with pytest.raises(ValueError, match=r"index holds None at position 1"):
        compute_advantages([1.0, 0.0], "grpo", index=["a", None])
    with pytest.raises(ValueError, match=r"index holds NaN at position 0"):
        compute_advantages([1.0, 0.0], "grpo", index=np.array([np.nan, 1.0]))
    out = compute_advantages([1.0, 0.0, 1.0, 0.0], "grpo", index=[1, 2, 1, 2])  # one kind: as before
    assert out.advantages == pytest.approx([0.0, 0.0, 0.0, 0.0])
    assert group_by_index(np.array(["a", "b", "a"], dtype=object), 3).n_groups == 2


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_steps_are_exact_integers_in_every_format(tmp_path, suffix):
    frame = pd.DataFrame({"step": [2**53, 2**53, 2**53 + 1, 2**53 + 1, 2**63 - 1, 2**63 - 1], "group": "a",
                          "reward": [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]})
    log = load_reward_log(write_reward_log(frame, tmp_path / f"s{suffix}"))
    assert log.frame["step"].tolist() == frame["step"].tolist() and log.frame["step"].dtype == np.int64
    assert diagnose(log).steps["step"].tolist() == [2**53, 2**53 + 1, 2**63 - 1]  # three steps, none merged


@pytest.mark.parametrize("text, why", [
    ("1e30", r"not an exact integer < 2\*\*63"), ("1e19", r"not an exact integer < 2\*\*63"),
    ("9223372036854775808", r"not an exact integer < 2\*\*63"), ("9007199254740993.0", r"not an exact integer < 2\*\*63"),
    ("-1", "not an integer >= 0"), ("2.5", "not an integer >= 0"), ("inf", "not a number"), ("x", "not a number"),
])
def test_steps_that_are_not_exact_integers_name_the_line(tmp_path, text, why):
    path = tmp_path / "s.csv"
    path.write_text(f"step,group,reward\n0,a,1\n{text},a,1\n")
    with pytest.raises(ValueError, match=rf"s.csv: line 3, column 'step': {why}"):
        load_reward_log(path)


def test_typed_columns_that_are_not_numbers_are_bad_rows_not_tracebacks(tmp_path):
    stamps = pd.DataFrame({"step": pd.to_datetime(["2024-01-01", "2024-01-02"]), "group": "a", "reward": [0.0, 1.0]})
    stamps.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"t.parquet: row 1, column 'step': not a number: '2024-01-01'"):
        load_reward_log(tmp_path / "t.parquet")
    path = tmp_path / "big.jsonl"
    path.write_text('{"step": 0, "group": "a", "reward": 1' + "0" * 400 + '}\n{"step": 0, "group": "a", "reward": 1}\n')
    with pytest.raises(ValueError, match=r"line 1, column 'reward': not finite: '1000"):
        load_reward_log(path)
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"step": 0, "group": {"a": 1}, "reward": 1}\n')
    with pytest.raises(ValueError, match=r"line 1, column 'group': not a string or number"):
        load_reward_log(nested)
    assert load_reward_log(path, skip_bad=True).skipped["reason"].tolist() == ["reward not finite"]


def test_deep_json_and_foreign_bytes_name_the_file_and_place(tmp_path):
    deep = "[" * 50_000 + "]" * 50_000
    for loader, suffix in ((SimConfig.from_file, ".json"), (load_sweep, ".json")):
        path = tmp_path / f"deep{suffix}"
        path.write_text(deep)
        with pytest.raises(ValueError, match=r"deep.json: JSON nested more than 64 levels deep"):
            loader(path)
    with pytest.raises(ValueError, match=r"x: JSON nested more than 64 levels deep"):
        loads_json("[" * 65 + "]" * 65, "x")
    assert loads_json("[" * 64 + "]" * 64, "x") is not None
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"step": 0, "group": "a", "reward": 1}\n{"step": 0, "group": "caf\xe9", "reward": 1}\n')
    with pytest.raises(ValueError, match=r"latin.jsonl: not UTF-8 text: byte 0xe9 at line 2, column 26"):
        load_reward_log(path)


def test_negative_numbers_in_float_notation_are_values(capsys):
    assert main(["diagnose", str(EXAMPLE), "--reward-range", "-1e3", "1"]) == 0
    assert "declared reward range: [-1000, 1]" in capsys.readouterr().out
    assert main(["diagnose", str(EXAMPLE), "--reward-range", "-.5", "1.5e0"]) == 0
    assert "declared reward range: [-0.5, 1.5]" in capsys.readouterr().out


def test_float64_rewards_that_overflow_are_told_what_to_do_instead():
    with pytest.raises(ValueError, match=r"float64 .* rescale them \(divide by a constant"):
        compute_advantages([[1.7e308, -1.7e308, 0.0, 0.0]], "rloo")
    with pytest.raises(ValueError, match=r"pass float64 rewards or rescale them"):
        compute_advantages(torch.tensor([[3e38, -3e38, 0.0, 0.0]]), "rloo")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_scale_of_zero_is_named_with_the_setting_that_allowed_it(dtype):
    """mc_grpo with eps = 0 on a 0/1 group (its raw MAD is 0) divides by 0: the error names the group and eps, not a
    reward overflow (whose advice, float64 or rescaling, cannot help)."""
    r = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 1.0]], dtype=dtype)
    with pytest.raises(ValueError, match=r"^mc_grpo divides by a scale of 0 in 1 group\(s\) \(the first: group 1, "
                                         r"whose rewards tie too much for its scale\); pass eps > 0$"):
        compute_advantages(r, "mc_grpo", eps=0.0)
    assert compute_advantages(r[:1], "mc_grpo", eps=0.0).advantages.tolist() == [[-1.5, -0.5, 0.5, 1.5]]


# -------------------------------------------------------------------------- sweep records


def _toy_record(tmp_path: Path, n: int = 3) -> tuple[Path, dict]:
    spec = {"runnable": "toy", "grid": {"x": list(range(n))}}
    out = tmp_path / "rec"
    assert run_sweep(spec, out, progress=False, runnables=TOYS).ran == n
    return out, spec


@pytest.mark.parametrize("damage", ["truncate", "flip", "swap", "empty"])
def test_a_damaged_cell_file_is_corrupt_not_done_and_the_rerun_repairs_it(tmp_path, damage):
    out, spec = _toy_record(tmp_path)
    files = sorted((out / "cells").glob("*.parquet"))
    target = files[0]
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # the last byte of a column's data page: its payload (a page header has no checksum)
        first = Record(out)
        import pyarrow.parquet as pq

        column = pq.read_metadata(target).row_group(0).column(1)
        offset = column.data_page_offset + column.total_compressed_size - 1 - (column.data_page_offset - (
            column.dictionary_page_offset or column.data_page_offset))
        target.write_bytes(data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1:])
        assert first.check_cell(target.stem) is not None
    elif damage == "swap":  # another cell's (whole, valid) file under this cell's name
        target.write_bytes(files[1].read_bytes())
    else:
        target.write_bytes(b"")
    status = sweep_status(out)
    assert len(status.done) == 2 and [c["id"] for c in status.corrupt] == [target.stem] and not status.complete
    text = format_status(status)
    assert "corrupt       1" in text and "run the failed, missing and corrupt cells" in text
    with pytest.raises(ValueError, match=r"(corrupt cell file|not finished)"):
        load_record(out)
    again = run_sweep(spec, out, progress=False, runnables=TOYS)
    assert (again.skipped, again.ran, again.repaired) == (2, 1, 1) and "1 corrupt cell file(s) replaced" in again.summary()
    assert sweep_status(out).complete and len(load_record(out)) == 6


def test_orphan_files_are_listed_and_left_alone(tmp_path):
    out, _ = _toy_record(tmp_path)
    other = tmp_path / "other"
    run_sweep({"runnable": "toy", "grid": {"x": [100]}}, other, progress=False, runnables=TOYS)
    orphan = next((other / "cells").glob("*.parquet"))
    (out / "cells" / orphan.name).write_bytes(orphan.read_bytes())
    (out / "failures" / "0123456789abcdef.json").write_text("{}")
    status = sweep_status(out)
    assert status.orphans == tuple(sorted([f"cells/{orphan.name}", "failures/0123456789abcdef.json"]))
    assert status.complete and "orphan files (of no cell in the manifest)" in format_status(status)


@pytest.mark.parametrize("manifest, message", [
    ("[]", r"not a sweep manifest \(a JSON list, not an object\)"),
    ('{"runnable": "toy", "specs": []}', r"not a sweep manifest \(no 'cells' key\)"),
    ('{"runnable": "toy", "specs": [], "cells": {}}', r"'cells' is a dict, not a list"),
    ('{"runnable": "toy", "specs": [], "cells": [{"id": "x", "seed": 0, "values": {}, "config": {}}]}',
     r"cells\[0\].id 'x' is not a cell id"),
    ('{"runnable": "toy", "specs": [], "cells": [{"id": "0123456789abcdef", "seed": "0", "values": {}, "config": {}}]}',
     r"cells\[0\].seed is missing or not a int"),
    ('{"runnable": 3, "specs": [], "cells": []}', r"'runnable' is a int, not a str"),
    ("{oops", r"manifest.json: invalid JSON at line 1, column 2"),
])
def test_a_damaged_manifest_names_its_file_and_key(tmp_path, manifest, message):
    (tmp_path / "manifest.json").write_text(manifest)
    for read in (load_record, sweep_status):
        with pytest.raises(ValueError, match=message):
            read(tmp_path)


def test_reading_a_record_needs_no_thread(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    out, _ = _toy_record(tmp_path)
    seen = []
    read = pq.ParquetFile.read
    monkeypatch.setattr(pq.ParquetFile, "read", lambda self, *a, **k: seen.append(("read", k.get("use_threads"))) or read(self, *a, **k))

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    assert len(load_record(out)) == 6 and sweep_status(out).complete
    assert seen and all(flag is False for _, flag in seen)


def test_sweeps_into_one_folder_at_once_lose_no_manifest_entry_in_one_process(tmp_path, monkeypatch):
    """The manifest's read-merge-write under the folder's lock, with the write slowed down so that the sweeps
    would overlap without it (the issue lost one config's entries 3 times of 3)."""
    import robustgrpo.lab.sweep.record as record

    write = record._write_json
    monkeypatch.setattr(record, "_write_json", lambda path, value: (time.sleep(0.3) if path.name == "manifest.json" else None)
                        or write(path, value))
    out = tmp_path / "rec"
    specs = [{"runnable": "toy", "grid": {"x": list(range(i * 10, i * 10 + 5))}, "seeds": 2} for i in range(3)]
    errors = []
    threads = [threading.Thread(target=lambda s=s: _run_or_keep(s, out, errors)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["cells"]) == 30 and len(manifest["specs"]) == 3
    assert len(load_record(out)) == 60 and sweep_status(out).complete


def _run_or_keep(spec, out, errors):
    try:
        run_sweep(spec, out, progress=False, runnables=TOYS)
    except Exception as err:  # noqa: BLE001 - reported by the test
        errors.append(err)


CONCURRENT = """
import sys, time
sys.path.insert(0, {tests!r})
from test_sweep import TOYS
import robustgrpo.lab.sweep.record as record
from robustgrpo.lab.sweep import run_sweep
write = record._write_json
def slow(path, value):  # a slow disk: the window in which two unlocked merges lose one config's entries
    if path.name == "manifest.json":
        time.sleep(1.0)
    return write(path, value)
record._write_json = slow
start, first, out = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
while time.time() < start:
    pass
run_sweep({{"runnable": "toy", "grid": {{"x": list(range(first, first + 100))}}, "seeds": 2}}, out, progress=False, runnables=TOYS)
"""


@pytest.mark.slow
def test_two_sweep_processes_started_at_once_into_one_folder_lose_nothing(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(CONCURRENT.format(tests=str(TESTS)))
    for attempt in range(3):
        out = tmp_path / f"rec{attempt}"
        start = time.time() + 8  # both past their imports, then at once
        procs = [subprocess.Popen([sys.executable, str(script), str(start), str(first), str(out)], cwd=ROOT)
                 for first in (0, 1000)]
        assert [p.wait(timeout=300) for p in procs] == [0, 0]
        manifest = json.loads((out / "manifest.json").read_text())
        assert len(manifest["cells"]) == 400 and len(manifest["specs"]) == 2
        record = load_record(out)
        assert len(record) == 800 and record["cell_id"].nunique() == 400


# ------------------------------------------------------------------------------------ Ray


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_sweep_at(address: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """The sweep command with the Ray engine at ``address``, in a fresh process (not connected to Ray)."""
    config = tmp_path / "sweep.json"
    config.write_text(json.dumps({"runnable": "agreement", "fixed": {"n_groups": 20}, "grid": {"G": [4]}}))
    cmd = [sys.executable, "-m", "robustgrpo", "sweep", str(config), "--out", str(tmp_path / "record"),
           "--engine", "ray", "--address", address, "--no-progress", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_an_unreachable_ray_address_is_an_error_at_once(tmp_path):
    pytest.importorskip("ray")
    start = time.perf_counter()
    done = _ray_sweep_at(f"127.0.0.1:{_closed_port()}", tmp_path, "--connect-timeout", "30")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert re.search(r"sweep: error: cannot reach a Ray cluster at '127.0.0.1:\d+': Connection refused", done.stderr)
    assert time.perf_counter() - start < 20


@pytest.mark.slow
def test_a_ray_address_that_never_answers_is_an_error_within_the_timeout(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as server:  # accepts connections, says nothing: Ray itself would retry for minutes
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
        start = time.perf_counter()
        done = _ray_sweep_at(f"127.0.0.1:{port}", tmp_path, "--connect-timeout", "8")
        assert done.returncode != 0 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
        assert re.search(r"(no Ray cluster answered at '127.0.0.1:\d+' within 8 s|cannot reach a Ray cluster)", done.stderr)
        assert time.perf_counter() - start < 30


@pytest.mark.slow
def test_an_address_other_than_the_connected_clusters_is_an_error_not_ignored(ray_cluster):
    engine = RayEngine(f"127.0.0.1:{_closed_port()}")
    with pytest.raises(ValueError, match=r"already connected to the Ray cluster at '.+', not the one named by "
                                         r"address='127.0.0.1:\d+'; call ray.shutdown\(\) first"):
        with engine.connected():
            pass
    for same in (ray_cluster, "auto", None):  # the connected cluster, by its address or implicitly
        with RayEngine(same).connected():
            pass


# ------------------------------------------------------------------- round two (issue 43)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_a_tol_beyond_the_dtypes_largest_number_is_clamped_to_it(dtype):
    """``tol=1e300`` raised torch's RuntimeError for every dtype but float64 (all 710 unexpected exceptions of the
    round-two fuzz); it is now the dtype's largest number: every group whose spread the dtype holds is degenerate."""
    rewards = torch.tensor([[0, 1, 3, 2], [5, 5, 5, 5], [-7, 0, 7, 1]]).to(dtype)
    out = compute_advantages(rewards, "grpo", tol=1e300)
    assert out.advantages.abs().sum().item() == 0 and out.diagnostics.degenerate.tolist() == [True, True, True]
    largest = torch.finfo(out.advantages.dtype).max
    assert torch.equal(out.advantages, compute_advantages(rewards, "grpo", tol=largest).advantages)
    # a tol within the range keeps its meaning: spreads 3 and 14 against tol 3
    assert compute_advantages(rewards, "grpo", tol=3.0).diagnostics.degenerate.tolist() == [True, True, False]


# one reader discipline: the same hostile value gets the same answer in a reward log, a verl dump and a TRL file

RUN_LOGS = ROOT / "data" / "run_logs"


def _jsonl_lines(kind: str, step: str, reward: str) -> str:
    """Eight rows (two groups of four) of a reward log or a verl dump, the first row's step and reward written as given
    (raw JSON text, so that 1e400, NaN and 5,000 digits reach the reader as written)."""
    rows = []
    for i in range(8):
        s, r = (step, reward) if i == 0 else ("1", str(i % 2))
        prompt = "p" if i < 4 else "q"
        rows.append(f'{{"step": {s}, "group": "{prompt}", "reward": {r}}}' if kind == "reward log" else
                    f'{{"input": "{prompt}", "output": "o", "score": {r}, "step": {s}}}')
    return "".join(row + "\n" for row in rows)


def _write_jsonl(tmp_path: Path, kind: str, text: str | bytes) -> Path:
    data = text.encode() if isinstance(text, str) else text
    if kind == "reward log":
        path = tmp_path / "log.jsonl"
        path.write_bytes(data)
        return path
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "1.jsonl").write_bytes(data)
    return tmp_path / "run"


@pytest.mark.parametrize("kind", ["reward log", "verl dump"])
@pytest.mark.parametrize("step, reward, message", [
    ("1e30", "1", r"line 1, column 'step': not an exact integer < 2\*\*63: '1e\+30'"),
    (str(2**63), "1", r"line 1, column 'step': not an exact integer < 2\*\*63: '9223372036854775808'"),
    ("1.7", "1", r"line 1, column 'step': not an integer >= 0: '1.7'"),
    ("-1", "1", r"line 1, column 'step': not an integer >= 0: '-1'"),
    ('"x"', "1", r"line 1, column 'step': not a number: 'x'"),
    ("1", '"high"', r"line 1, column '(reward|score)'( \(score\))?: not a number: 'high'"),
    ("1", "1e400", r"line 1, column '(reward|score)'( \(score\))?: not finite: 'inf'"),
    ("1", "NaN", r"line 1, column '(reward|score)'( \(score\))?: empty \(null or NaN\)"),
    ("1", "1" + "0" * 400, r"line 1, column '(reward|score)'( \(score\))?: not finite: '1000"),
    ("1", "1" + "0" * 5000, r"line 1, column '(reward|score)'( \(score\))?: not finite: '1000"),
    ("1", "true", r"line 1, column '(reward|score)'( \(score\))?: not a number: 'True'"),
])
def test_a_field_is_checked_alike_in_a_reward_log_and_a_verl_dump(tmp_path, capsys, kind, step, reward, message):
    """Issue 43: a verl dump's step of 1e30 printed 'step -9223372036854775808' and exited 0, a score of "high" or NaN
    was "a function returned None", a 400-digit score raised OverflowError: the reward-log checks were not run on it."""
    path = _write_jsonl(tmp_path, kind, _jsonl_lines(kind, step, reward))
    assert main(["diagnose", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    name = "log.jsonl" if kind == "reward log" else "1.jsonl"
    assert re.search(rf"diagnose: error: {name}: {message}", err), err


@pytest.mark.parametrize("kind", ["reward log", "verl dump"])
@pytest.mark.parametrize("data, message", [
    (b'{"step": 1, "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n", r"line 1 nests JSON more than 64 levels deep"),
    (b'{"step": 1, "caf\xe9": 1}\n', r"not UTF-8 text: byte 0xe9 at line 1, column 17"),
    (b'{"step": 1, "step": 2}\n', r"line 1: a JSON object repeats the key 'step'; write each field once per line"),
    (b'{"step": 1,\n', r"line 1 is not valid JSON"),
    (b"[1, 2]\n", r"line 1 holds a list, not a JSON object"),
])
def test_a_damaged_json_lines_file_is_refused_alike_naming_the_file_and_line(tmp_path, capsys, kind, data, message):
    """Issue 43: 50,000-deep nesting raised RecursionError from a verl dump (exit 1), non-UTF-8 bytes an error that did not
    name the file."""
    path = _write_jsonl(tmp_path, kind, data)
    assert main(["diagnose", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(rf"diagnose: error: {'log.jsonl' if kind == 'reward log' else '1.jsonl'}: {message}", err), err


def test_numbers_of_thousands_of_digits_in_a_csv_are_numbers_out_of_range(tmp_path):
    """As in JSON: a reward of 5,000 digits is not finite (pandas gave up on it: "not a number"), a step not exact."""
    path = tmp_path / "long.csv"
    path.write_text(f"step,group,reward\n0,a,1{'0' * 5000}\n0,a,0\n1{'0' * 5000},a,1\n0,a,1_000\n")
    log = load_reward_log(path, skip_bad=True)
    assert log.skipped["reason"].tolist() == ["reward not finite", "step not an exact integer < 2**63", "reward not a number"]


@pytest.mark.parametrize("kind", ["reward log", "verl dump"])
def test_a_byte_order_mark_is_read_alike(tmp_path, kind):
    """A BOM was refused in verl dumps ("Unexpected UTF-8 BOM") where reward logs accepted it."""
    from robustgrpo.lab.runlogs import load_log

    path = _write_jsonl(tmp_path, kind, b"\xef\xbb\xbf" + _jsonl_lines(kind, "1", "1").encode())
    log = load_log(path)
    assert len(log.frame[log.frame["reward_fn"] == "score"] if kind == "verl dump" else log.frame) == 8


def _trl_run(tmp_path: Path, files: dict[str, pd.DataFrame]) -> Path:
    folder = tmp_path / "run" / "completions"
    folder.mkdir(parents=True)
    for name, frame in files.items():
        frame.to_parquet(folder / name)
    return tmp_path / "run"


def _trl_frame(step=1, n_prompts=4, G=4, prefix="p", **columns) -> pd.DataFrame:
    """A TRL completions file: n_prompts x G rows, the prompts in blocks of G, a 0/1 'correct' column."""
    frame = pd.DataFrame({"step": step, "prompt": np.repeat([f"{prefix}{i}" for i in range(n_prompts)], G), "completion": "c",
                          "correct": np.tile(np.arange(G) % 2, n_prompts).astype(float), "advantage": 0.0})
    return frame.assign(**columns)


@pytest.mark.parametrize("columns, message", [
    ({"step": 1e30}, r"row 1, column 'step': not an exact integer < 2\*\*63: '1e\+30' \(16 bad rows in all\)"),
    ({"step": np.uint64(2**64 - 1)}, r"row 1, column 'step': not an exact integer < 2\*\*63: '18446744073709551615'"),
    ({"step": 1.7}, r"row 1, column 'step': not an integer >= 0: '1.7'"),
    ({"correct": np.inf}, r"row 1, column 'correct': not finite: 'inf'"),
    ({"advantage": "x"}, r"row 1, column 'advantage': not a number: 'x'"),
])
def test_a_trl_file_goes_through_the_same_field_checks(tmp_path, capsys, columns, message):
    """Issue 43: TRL steps of 1e30 and 2**64 - 1 wrapped, 1.7 became 1 (exit 0); an inf reward said "no completion has
    a finite reward", a string advantage "could not convert string to float" without the file."""
    run = _trl_run(tmp_path, {"completions_00001.parquet": _trl_frame(**columns)})
    assert main(["diagnose", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(rf"error: completions_00001.parquet: {message}", err), err


def test_a_trl_reward_sum_that_overflows_names_its_row(tmp_path, capsys):
    """It printed numpy's RuntimeWarning, then "rewards are empty"."""
    frame = _trl_frame()
    frame.insert(4, "short", 1.0)
    run = _trl_run(tmp_path, {"completions_00001.parquet": frame})
    assert main(["diagnose", str(run), "--reward-weights", "1e308", "1e308"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeWarning" not in err
    assert re.search(r"completions_00001.parquet: row 2: the sum of the reward functions \['correct', 'short'\] with "
                     r"weights \[1e\+308, 1e\+308\] overflows float64 \(values \[1.0, 1.0\]\); rescale", err), err
    assert main(["diagnose", str(run), "--reward-weights", "1", "1"]) == 0
    capsys.readouterr()


def test_a_csv_or_parquet_header_naming_a_column_twice_is_refused(tmp_path):
    """``step,group,reward,reward`` silently used the first reward column."""
    path = tmp_path / "dup.csv"
    path.write_text("step,group,reward,reward\n0,a,1,5\n0,a,0,6\n")
    with pytest.raises(ValueError, match=r"dup.csv: line 1 names the column 'reward' 2 times \(columns 3, 4\); rename"):
        load_reward_log(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table([[0, 0], ["a", "a"], [1.0, 0.0], [5.0, 6.0]], names=["step", "group", "reward", "reward"]),
                   tmp_path / "dup.parquet")
    with pytest.raises(ValueError, match=r"dup.parquet: the file names the column 'reward' 2 times \(columns 3, 4\)"):
        load_reward_log(tmp_path / "dup.parquet")


# groups that match what the trainer did, or a clear refusal


def test_trl_files_of_one_step_keep_their_groups_apart(tmp_path):
    """Two files at step 1 with 4 groups each were reported as 4 groups of 4, each holding 8 rows from 2 prompts."""
    from robustgrpo.lab.runlogs import load_run_log

    run = load_run_log(_trl_run(tmp_path, {"completions_00001.parquet": _trl_frame(),
                                           "completions_1.parquet": _trl_frame(prefix="q")}))
    groups = run.samples.groupby(["step", "group"])
    assert run.group_size == 4 and groups.ngroups == 8 and (groups.size() == 4).all()
    assert (groups["prompt"].nunique() == 1).all() and run.shared_steps == (1,)
    assert sorted(run.samples["group"].unique())[:2] == ["completions_00001:0", "completions_00001:1"]
    assert "1 step(s) written by several files (1): each file's groups kept apart" in run.summary()
    assert diagnose(run, reward_fn="sum").facts.n_groups == 8


@pytest.mark.parametrize("files, message", [
    ({"completions_00001.parquet": _trl_frame(G=4), "completions_00002.parquet": _trl_frame(step=2, G=3)},
     r"the files do not agree on the group size: their runs of equal consecutive prompts give groups of 3 in "
     r"completions_00002.parquet; groups of 4 in completions_00001.parquet; pass the run's num_generations"),
    ({"completions_00001.parquet": _trl_frame().iloc[:15]},
     r"completions_00001.parquet: its runs of equal consecutive prompts \(lengths 4, 4, 4, 3\) leave a group size of 1, "
     r"and TRL's num_generations is at least 2: the file looks truncated"),
])
def test_a_trl_group_size_that_cannot_be_inferred_consistently_is_an_error(tmp_path, capsys, files, message):
    """Files of G = 4 and G = 3 were read as 28 groups of 1, a truncated file of 15 rows for G = 4 as 15 groups of 1:
    every advantage 0 and a normal-looking report."""
    run = _trl_run(tmp_path, files)
    assert main(["diagnose", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert "--group-size" in err
    assert main(["diagnose", str(run), "--group-size", "4"]) == 2  # given, the size is checked, never silently 1
    assert re.search(r"completions_0000[12].parquet: (15 completions is not a whole number of groups of 4|rows 1-4 \(a "
                     r"group of num_generations=4\) hold 2 prompts)", capsys.readouterr().err)


def test_a_verl_dump_of_one_response_per_prompt_is_not_read_as_groups_of_one(tmp_path, capsys):
    (tmp_path / "1.jsonl").write_text("".join(json.dumps({"input": f"p{i}", "output": "o", "score": 1.0, "step": 1}) + "\n"
                                              for i in range(5)))
    assert main(["diagnose", str(tmp_path)]) == 2
    assert re.search(r"most prompts have one response in the dumps \(5 of 5\), so no group size can be inferred "
                     r"\(GRPO needs rollout.n >= 2\); pass the run's actor_rollout_ref.rollout.n", capsys.readouterr().err)


# outputs never overwrite inputs


@pytest.mark.parametrize("trainer, inputs", [("trl", ["completions/completions_00001.parquet",
                                                      "completions/completions_00003.parquet"]),
                                             ("verl", ["1.jsonl", "2.jsonl"])])
def test_html_never_replaces_a_file_of_the_run_nor_adds_one_the_next_read_would_take(tmp_path, capsys, trainer, inputs):
    """``diagnose RUN --html RUN/completions/completions_00002.parquet --force`` overwrote the run's own log (the check
    compared the page with the folder, not with the files read from it); the next ``diagnose RUN`` then failed."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN_LOGS / trainer, run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for name in inputs:
        assert main(["diagnose", str(run), "--html", str(run / name), "--force"]) == 2
        captured = capsys.readouterr()
        assert "is an input of this command" in captured.err and captured.out == ""  # refused before the work
    new = run / ("completions/completions_00009.parquet" if trainer == "trl" else "9.jsonl")
    assert main(["diagnose", str(run), "--html", str(new)]) == 2
    assert "is a run file's name in the run folder" in capsys.readouterr().err and not new.exists()
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert main(["diagnose", str(run), "--html", str(run / "report.html")]) == 0  # any other name in the folder is fine
    capsys.readouterr()
    assert main(["diagnose", str(run)]) == 0


@pytest.mark.parametrize("target, message", [("", r"the output path is empty; pass the file to write"),
                                             ("/proc/r.html", r"cannot write in the folder '/proc' \(")])
def test_an_empty_or_unwritable_html_path_is_refused_before_the_work(capsys, target, message):
    """``--html ""`` was ignored; ``--html /proc/r.html`` failed after the whole diagnosis, naming a temporary file."""
    if target.startswith("/proc") and not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    assert main(["diagnose", str(EXAMPLE), "--html", target]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and re.search(message, captured.err), captured.err


# records verify their cells' identity


def _rewrite_cell(path: Path, keep_metadata: bool) -> None:
    """What another tool does to a cell file: read it, change one value, write it again (pandas drops the file's
    metadata; pyarrow with the schema kept carries it over)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if keep_metadata:
        table = pq.read_table(path)
        values = table.column("value").to_pylist()
        table = table.set_column(table.schema.get_field_index("value"), "value", pa.array([values[0] + 1.0, *values[1:]]))
        pq.write_table(table, path, write_page_checksum=True)
    else:
        frame = pd.read_parquet(path)
        frame.loc[0, "value"] += 1.0
        frame.to_parquet(path, index=False)


@pytest.mark.parametrize("keep_metadata, why", [
    (False, r"does not carry its cell's identity \(id, config hash, rows' hash\)"),
    (True, r"its rows are not those the sweep wrote \(changed since, by another tool\)"),
])
def test_a_cell_file_rewritten_by_another_tool_is_corrupt_not_done(tmp_path, keep_metadata, why):
    """Issue 43: a cell rewritten with an altered value was accepted as done, and the record returned the value."""
    out, spec = _toy_record(tmp_path)
    target = sorted((out / "cells").glob("*.parquet"))[0]
    _rewrite_cell(target, keep_metadata)
    status = sweep_status(out)
    assert len(status.done) == 2 and [c["id"] for c in status.corrupt] == [target.stem] and not status.complete
    assert re.search(why, status.corrupt[0]["error"]), status.corrupt[0]["error"]
    with pytest.raises(ValueError, match=rf"{target.stem}.parquet: a corrupt cell file"):
        load_record(out)
    assert len(load_record(out, partial=True)) == 4
    again = run_sweep(spec, out, progress=False, runnables=TOYS)
    assert (again.ran, again.repaired) == (1, 1)
    record = load_record(out)
    assert (record["value"] == 100.0 * record["seed"] + 10.0 * record["x"] + record["step"]).all()


def test_a_cell_file_written_for_another_config_of_its_id_is_corrupt(tmp_path):
    """A file whose id is right but whose config hash is not the manifest's config's (the manifest edited, say)."""
    import pyarrow.parquet as pq

    out, _ = _toy_record(tmp_path)
    target = sorted((out / "cells").glob("*.parquet"))[0]
    Record(out)._write_table(target.stem, "0" * 64, pq.read_table(target))
    problem = Record(out).check_cell(target.stem, Record(out).config_hashes()[target.stem])
    assert problem == "the file was written for another config than the manifest's for this cell"
    assert [c["id"] for c in sweep_status(out).corrupt] == [target.stem]


def test_stale_temporary_files_anywhere_in_a_record_are_reported_and_removed_on_resume(tmp_path):
    """A stale root ``.manifest.json.<pid>.tmp`` was never removed (only those in cells/ and failures/ were)."""
    out, spec = _toy_record(tmp_path)
    stale = [out / ".manifest.json.4242.tmp", out / "cells" / ".abc.parquet.4242.tmp", out / "failures" / ".x.json.1.tmp"]
    for path in stale:
        path.write_text("half")
    status = sweep_status(out)
    assert status.partial == 3 and "(3 unfinished write(s) of an interrupted run; the next run removes them)" in format_status(status)
    assert run_sweep(spec, out, progress=False, runnables=TOYS).skipped == 3
    assert not any(p.exists() for p in stale) and sweep_status(out).partial == 0


def test_cells_written_before_they_carried_their_identity_are_adopted_only_when_their_rows_say_so(tmp_path):
    """The records shipped before (data/records) carried no config hash or rows' hash: adopt_cells checks each file's
    rows against its manifest cell (cell_id, seed, config columns) and gives it its identity, rows unchanged."""
    import pyarrow.parquet as pq

    from robustgrpo.lab.sweep.record import adopt_cells

    out, _ = _toy_record(tmp_path)
    before = load_record(out)
    for path in (out / "cells").glob("*.parquet"):  # as an older version wrote them: the rows, no identity
        pq.write_table(pq.read_table(path).replace_schema_metadata(None), path)
    assert len(sweep_status(out).corrupt) == 3
    assert adopt_cells(out, TOYS) == 3 and adopt_cells(out, TOYS) == 0
    pd.testing.assert_frame_equal(load_record(out), before)
    assert sweep_status(out).complete
    target = sorted((out / "cells").glob("*.parquet"))[0]  # a legacy file whose rows are another cell's config
    pd.read_parquet(target).assign(x=99).to_parquet(target, index=False)
    with pytest.raises(ValueError, match=rf"{target.stem}.parquet: its rows' 'x' is not its manifest cell's \(\d\); not "
                                         "adopted: rerun the sweep"):
        adopt_cells(out, TOYS)


@pytest.mark.parametrize("name", ["trl_contamination", "trl_composite"])
def test_the_shipped_records_carry_their_cells_identity(name):
    status = sweep_status(ROOT / "data" / "records" / name)
    assert status.complete and not status.corrupt


# every runnable estimates its size


def test_every_runnable_estimates_its_size_and_a_cell_far_beyond_the_machine_is_refused(tmp_path):
    """Issue 43: the agreement runnable had no estimate: {"n_groups": 10, "G": 10**9} tried to allocate 80 GB."""
    import dataclasses

    from robustgrpo.lab.sweep import RUNNABLES, Runnable

    assert {f.name for f in dataclasses.fields(Runnable) if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING} >= {"estimate"}  # a runnable cannot be declared without one
    for name, runnable in RUNNABLES.items():
        estimate = runnable.estimate(runnable.defaults)
        assert estimate.bytes > 0 and estimate.seconds > 0, name
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"this run needs at least 600 GB of memory .*\(10 groups x G = 1,000,000,000 of "
                                         r"robust\), more than this machine's"):
        run_sweep({"runnable": "agreement", "fixed": {"n_groups": 10, "G": 10**9}}, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists() and time.perf_counter() - start < 10
    assert check_estimate(RUNNABLES["agreement"].estimate(RUNNABLES["agreement"].defaults)).bytes == 60.0 * 10_000 * 8


@pytest.mark.slow
def test_the_agreement_estimate_is_below_what_a_cell_takes():
    """The estimate is a lower bound: a cell of 200,000 x 16 rewards of the costliest method measured (robust) peaks
    above 60 bytes a reward and takes longer than 30 ns a reward."""
    code = ("import re, time; from robustgrpo.lab.sweep import RUNNABLES; r = RUNNABLES['agreement']; "
            "c = r.resolve({'method': 'robust', 'n_groups': 200000, 'G': 16}); "
            "base = int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024; "
            "t = time.perf_counter(); r.run(c, 0); s = time.perf_counter() - t; "
            "peak = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024; "
            "e = r.estimate(c); print(peak - base, e.bytes, s, e.seconds)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    used, estimated, seconds, estimated_seconds = map(float, done.stdout.split())
    assert used > estimated and seconds > estimated_seconds, done.stdout


# long outputs stay readable


def test_a_long_log_is_shown_by_ranges_of_steps_whose_rows_are_exact(tmp_path, capsys):
    """Issue 43: 50,000 steps printed a 50,024-line table (now 74 lines). Beyond 200 steps the table shows 50 ranges
    of consecutive steps, each row the measures over its steps' groups and samples; Diagnosis.steps keeps every step."""
    rng = np.random.default_rng(1)
    n_steps, sizes = 1000, rng.integers(1, 6, 3000)
    frame = pd.DataFrame({"step": np.repeat(np.arange(3000) // 3, sizes), "group": np.repeat([f"g{i}" for i in range(3000)], sizes)})
    frame["reward"] = rng.integers(0, 2, len(frame)).astype(float)
    frame["length"] = rng.integers(10, 100, len(frame)).astype(float)
    log = write_reward_log(frame, tmp_path / "long.csv")
    d = diagnose(log, methods=["grpo"])
    assert len(d.steps) == n_steps
    table, title = d.step_table()
    assert title.startswith("Per range of 20 steps (1,000 steps in 50 ranges") and len(table) == 51
    assert table["step"].tolist()[:2] == ["0-19", "20-39"] and table["step"].iloc[-1] == "all"
    for i in (0, 17, 49):  # each range's row against its rows of the log, computed directly
        part = frame[(frame["step"] // 20) == i]
        groups = part.groupby(["step", "group"])["reward"]
        row = table.iloc[i]
        assert row["n_groups"] == groups.ngroups and row["n_samples"] == len(part)
        assert row["group_size_median"] == groups.size().median() and row["mean_reward"] == pytest.approx(part["reward"].mean(), rel=1e-12)
        assert row["mean_length"] == pytest.approx(part["length"].mean(), rel=1e-12)
        assert row["frac_reward_zero_std"] == pytest.approx(((groups.size() > 1) & (groups.std() == 0)).mean(), rel=1e-12)
    short, title = diagnose(frame[frame["step"] < 200].pipe(write_reward_log, tmp_path / "short.csv"), methods=["grpo"]).step_table()
    assert title == "Per step (last row: the whole log)" and len(short) == 201
    assert main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 120 and "every step: the 'steps' of diagnose --json" in out
