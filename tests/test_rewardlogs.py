"""Reward logs: three formats, column aliases, and errors that name the file, the line and the column."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from robustgrpo.lab.rewardlogs import (
    RewardLogError,
    example_reward_log,
    load_reward_log,
    write_reward_log,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "reward_logs" / "binary_judge_glitch.csv"


def _csv(tmp_path: Path, text: str, name: str = "log.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_every_format_round_trips(tmp_path, suffix):
    frame = example_reward_log(n_steps=3, groups_per_step=4, seed=5)
    log = load_reward_log(write_reward_log(frame, tmp_path / f"log{suffix}"))
    pd.testing.assert_frame_equal(log.frame.drop(columns="line"), frame.astype({"length": "float64"}), check_dtype=False)
    assert log.frame["step"].dtype == np.int64 and log.frame["reward"].dtype == np.float64
    first = 2 if suffix == ".csv" else 1  # the CSV header is line 1; Parquet counts rows
    assert log.frame["line"].tolist() == list(range(first, first + len(frame)))
    assert log.reward_fns == ["judge"] and log.skipped.empty and log.n_rows == len(frame)


def test_the_shipped_example_is_what_its_readme_command_makes():
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "example_reward_log('binary_judge_glitch', n_steps=20, groups_per_step=32, seed=0)" in readme
    shipped = load_reward_log(EXAMPLE).frame.drop(columns="line")
    made = example_reward_log("binary_judge_glitch", n_steps=20, groups_per_step=32, seed=0)
    # the same on any processor: the rewards (0, 1, 10) are chosen by comparisons of torch's uniform draws (a serial
    # generator, no vector kernel) and the lengths are exp(normal) rounded to integers, the closest 1.6e-5 from a
    # rounding midpoint, where two exp implementations differ by a unit in the last place (numpy's SIMD exp and the
    # C library's: 2.2e-16 relative, measured)
    pd.testing.assert_frame_equal(shipped, made.astype({"length": "float64"}), check_dtype=False)
    assert len(made) == 20 * 32 * 8 and set(made["reward"]) == {0.0, 1.0, 10.0}


def test_aliases_and_explicit_columns(tmp_path):
    path = _csv(tmp_path, "global_step,uid,score,response_length\n0,a,1,10\n0,a,0,12\n")
    log = load_reward_log(path)
    assert log.source_columns == {"step": "global_step", "group": "uid", "reward": "score", "length": "response_length"}
    assert log.frame["length"].tolist() == [10.0, 12.0]
    path = _csv(tmp_path, "it,question,r\n0,a,1\n0,a,0\n", "custom.csv")
    with pytest.raises(RewardLogError, match=r"custom.csv: missing column 'step' \(accepted names: step, global_step, iteration\)"):
        load_reward_log(path)
    log = load_reward_log(path, columns={"step": "it", "group": "question", "reward": "r"})
    assert log.frame["group"].tolist() == ["a", "a"]
    with pytest.raises(RewardLogError, match=r"no column 'q' \(given for group\)"):
        load_reward_log(path, columns={"step": "it", "group": "q", "reward": "r"})
    both = _csv(tmp_path, "step,prompt_id,uid,reward\n0,a,a,1\n", "both.csv")
    with pytest.raises(RewardLogError, match=r"columns \['prompt_id', 'uid'\] could each be the group"):
        load_reward_log(both)


@pytest.mark.parametrize(
    "text, message",
    [
        ("step,group,reward\n0,a,1\n\n0,a,x\n", r"line 4, column 'reward': not a number: 'x'"),  # the blank line counts
        ("step,group,reward\n0,a,1\n0,a,\n", r"line 3, column 'reward': empty"),
        ("step,group,reward\n0,a,1\n0,a,inf\n", r"line 3, column 'reward': not finite"),
        ("step,group,reward\n0,a,1\n0.5,a,1\n", r"line 3, column 'step': not an integer >= 0"),
        ("step,group,reward\n0,a,1\n-1,a,1\n", r"line 3, column 'step': not an integer >= 0"),
        ("step,group,reward\n0,a,1\n0,,1\n", r"line 3, column 'group': empty"),
        ("step,group,reward\n0,a,1\n1,,1\n1,,0\n", r"step 1 has no groups: the group id is empty on all its 2 rows \(lines 3-4\)"),
    ],
)
def test_malformed_csv_names_file_line_and_column(tmp_path, text, message):
    path = _csv(tmp_path, text)
    with pytest.raises(RewardLogError, match=r"^log.csv: " + message):
        load_reward_log(path)


def test_a_bare_carriage_return_in_the_header_is_an_unreadable_csv(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"\r\x00")
    with pytest.raises(RewardLogError, match=r"^log\.csv: not a readable CSV file \(new-line character seen in unquoted field\)$"):
        load_reward_log(path)


def test_malformed_json_lines_and_parquet(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 0, "group": "a", "reward": 1}\n{"step": 0, "group": "a", "reward": "1"}\n')
    with pytest.raises(RewardLogError, match=r"log.jsonl: line 2, column 'reward': not a number: '1'"):
        load_reward_log(path)
    path.write_text('{"step": 0, "group": "a", "reward": true}\n')
    with pytest.raises(RewardLogError, match=r"line 1, column 'reward': not a number"):
        load_reward_log(path)
    path.write_text('{"step": 0, "group": "a", "reward": 1}\n{"step": 0, "group": "a"\n')
    with pytest.raises(RewardLogError, match=r"log.jsonl: line 2 is not valid JSON"):
        load_reward_log(path)
    path.write_text('[0, "a", 1]\n')
    with pytest.raises(RewardLogError, match=r"line 1 holds a list, not a JSON object"):
        load_reward_log(path)
    pq = tmp_path / "log.parquet"
    pd.DataFrame({"step": [0, 0, 0], "group": ["a", "a", "a"], "reward": [1.0, np.nan, 0.0]}).to_parquet(pq)
    with pytest.raises(RewardLogError, match=r"log.parquet: row 2, column 'reward': empty"):
        load_reward_log(pq)


def test_skip_bad_skips_and_says_how_many_and_why(tmp_path):
    path = _csv(tmp_path, "step,group,reward\n0,a,1\n0,a,x\n0,a,0\n1,b,\n1,,1\n2,c,1\n2,c,oops\n")
    with pytest.raises(RewardLogError, match=r"line 3, column 'reward': not a number: 'x' \(4 bad rows in all\)"):
        load_reward_log(path)
    log = load_reward_log(path, skip_bad=True)
    assert len(log.frame) + len(log.skipped) == log.n_rows == 7  # nothing dropped silently
    assert log.skipped["line"].tolist() == [3, 5, 6, 8]
    assert log.emptied_steps == (1,)
    assert log.summary() == ("log.csv: 3 rows, 2 steps, 2 groups; skipped 4 of 7 rows: 2 reward not a number, "
                             "1 reward empty, 1 group empty; steps that lost every row: [1]")


def test_files_that_cannot_be_read(tmp_path):
    with pytest.raises(RewardLogError, match="no such file"):
        load_reward_log(tmp_path / "missing.csv")
    with pytest.raises(RewardLogError, match=r"unknown file type '.txt'; reward logs are read from .csv, .jsonl"):
        load_reward_log(_csv(tmp_path, "x", "log.txt"))
    with pytest.raises(RewardLogError, match="the file is empty"):
        load_reward_log(_csv(tmp_path, ""))
    with pytest.raises(RewardLogError, match="holds a header but no rows"):
        load_reward_log(_csv(tmp_path, "step,group,reward\n"))
    with pytest.raises(RewardLogError, match="every one of its 1 rows is malformed"):
        load_reward_log(_csv(tmp_path, "step,group,reward\n0,a,x\n"), skip_bad=True)
    with pytest.raises(RewardLogError, match="skip_bad must be True or False"):
        load_reward_log(_csv(tmp_path, "step,group,reward\n0,a,1\n"), skip_bad="yes")


def test_error_messages_are_one_line(tmp_path):
    path = _csv(tmp_path, "step,group,reward\n0,a,1\n0,a,x\n")
    with pytest.raises(RewardLogError) as err:
        load_reward_log(path)
    assert "\n" not in str(err.value) and str(err.value).endswith("fix the file, or pass skip_bad=True to skip bad rows and "
                                                                "report them")  # (the command line names --skip-bad)
