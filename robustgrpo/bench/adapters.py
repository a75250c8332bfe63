"""The verl adapter on verl's own layout: token-level rewards and string uids, against the idiomatic GRPO.

Part of :mod:`robustgrpo.bench` (its docstring says what each benchmark measures and its target).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from robustgrpo.bench._common import load_average, load_text
from robustgrpo.bench.estimators import grpo_idiomatic
from robustgrpo.checks import check_int

__all__ = [
    "ADAPTER_TARGET",
    "AdapterBenchRow",
    "AdapterBench",
    "verl_layout",
    "run_adapter_benchmark",
    "format_adapter_table",
]

#: The verl adapter's target: within this many times the idiomatic GRPO on the same batch.
ADAPTER_TARGET = 2.0
_BASELINE = "grpo (idiomatic, groups by position)"


@dataclass(frozen=True)
class AdapterBenchRow:
    """One way to compute a batch's advantages: its median time and its median ratio to the idiomatic GRPO."""

    case: str
    ms: float
    ratio: float
    target: float | None


@dataclass(frozen=True)
class AdapterBench:
    """The adapter benchmark: a row per case, the batch, the torch threads and the load average."""

    rows: tuple[AdapterBenchRow, ...]
    setting: str
    threads: int
    load: tuple[float, ...] | None


def verl_layout(groups: int, G: int, length: int, *, p: float = 0.3, seed: int = 0) -> dict[str, object]:
    """A batch as verl hands it to an advantage estimator: ``groups`` prompts x ``G`` responses of at most ``length`` tokens.

    ``token_level_rewards`` ``[groups * G, length]`` float32 with each response's 0/1 reward
    (Bernoulli(p)) on its last token, ``response_mask`` ``[groups * G, length]`` (lengths uniform
    in 1..length), and ``index``: an object array of Python strings (verl's ``uid``, a uuid4 per
    prompt, here 36 characters), each prompt's responses together, as verl repeats them.

    >>> batch = verl_layout(2, 3, 4)
    >>> batch["token_level_rewards"].shape, batch["index"][:4].tolist()[2:]
    (torch.Size([6, 4]), ['00000000-0000-4000-8000-000000000000', '00000000-0000-4000-8000-000000000001'])
    """
    check_int("groups", groups, minimum=1)
    check_int("G", G, minimum=1)
    check_int("length", length, minimum=1)
    rng = np.random.default_rng(seed)
    n = groups * G
    uids = np.array([f"00000000-0000-4000-8000-{i:012d}" for i in range(groups)], dtype=object)
    lengths = torch.from_numpy(rng.integers(1, length + 1, n))
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float32)
    rewards = torch.zeros(n, length)
    rewards[torch.arange(n), lengths - 1] = torch.from_numpy((rng.random(n) < p).astype(np.float32))
    return {"token_level_rewards": rewards, "response_mask": mask, "index": np.repeat(uids, G), "G": G}


def _idiomatic(batch: dict, eps: float = 1e-6) -> torch.Tensor:
    """The GRPO every trainer writes, on a batch whose groups stand in order (no uids read): the baseline."""
    scores = batch["token_level_rewards"].sum(-1).view(-1, batch["G"])
    return grpo_idiomatic(scores, eps).view(-1, 1) * batch["response_mask"]


def _idiomatic_by_uid(batch: dict, eps: float = 1e-6) -> torch.Tensor:
    """The same GRPO grouping by uid with ``numpy.unique`` (what a trainer must do when the order is not promised)."""
    scores = batch["token_level_rewards"].sum(-1)
    _, inverse = np.unique(batch["index"], return_inverse=True)
    order = torch.from_numpy(np.argsort(inverse, kind="stable"))
    flat = torch.empty_like(scores)
    flat[order] = grpo_idiomatic(scores[order].view(-1, batch["G"]), eps).view(-1)
    return flat.unsqueeze(-1) * batch["response_mask"]


def run_adapter_benchmark(
    *, groups: int = 65536, G: int = 16, length: int = 8, methods: Sequence[str] = ("grpo", "robust"),
    repeats: int = 7, threads: int = 1, progress: bool = True,
) -> AdapterBench:
    """Time the verl adapter (:func:`robustgrpo.integrations.verl.verl_estimator`) on :func:`verl_layout`.

    Cases, each run once per repeat in turn (interleaved, so machine noise hits all alike), at
    ``threads`` torch threads: the idiomatic GRPO on groups by position (the baseline), the same
    grouping by uid with ``numpy.unique``, verl's own ``grpo_vectorized`` where verl is installed,
    and the adapter for each of ``methods``. A row's ratio is the median of its per-repeat ratios
    to the baseline. Target: the adapter within :data:`ADAPTER_TARGET` times the baseline.
    """
    from tqdm.auto import tqdm

    from robustgrpo.integrations.verl import verl_estimator
    from robustgrpo.lab.simulate.runner import torch_threads

    check_int("repeats", repeats, minimum=1)
    check_int("threads", threads, minimum=1)
    batch = verl_layout(groups, G, length)
    args = {k: batch[k] for k in ("token_level_rewards", "response_mask", "index")}
    cases: dict[str, tuple[Callable[[], object], float | None]] = {
        _BASELINE: (lambda: _idiomatic(batch), None),
        "grpo (idiomatic, numpy.unique over the uids)": (lambda: _idiomatic_by_uid(batch), None),
    }
    try:
        from verl.trainer.ppo.core_algos import (
            compute_grpo_vectorized_outcome_advantage as verl_vectorized,
        )
    except ImportError:  # the verl extra is not installed: that row is left out
        verl_vectorized = None
    if verl_vectorized is not None:
        cases["verl's grpo_vectorized"] = (lambda: verl_vectorized(**args), None)
    for method in methods:
        fn = verl_estimator(method)
        cases[f"adapter: {method}"] = (lambda fn=fn: fn(**args), ADAPTER_TARGET)
    times: dict[str, list[float]] = {case: [] for case in cases}
    bar = tqdm(total=repeats + 1, desc="adapter bench", disable=not progress, leave=False)
    with torch_threads(threads):
        for repeat in range(repeats + 1):  # the first round warms up and is not counted
            for case, (fn, _) in cases.items():
                start = time.perf_counter()
                fn()
                if repeat:
                    times[case].append(time.perf_counter() - start)
            bar.update()
    bar.close()
    base = np.array(times[_BASELINE])
    rows = tuple(AdapterBenchRow(case, 1e3 * float(np.median(t)), float(np.median(np.array(t) / base)), target)
                 for case, (_, target), t in zip(cases, cases.values(), times.values()))
    setting = (f"{groups} prompts x G={G} responses of up to {length} tokens (token-level 0/1 rewards, "
               f"36-character string uids, each prompt's responses together), float32 CPU")
    return AdapterBench(rows, setting, threads, load_average())


def format_adapter_table(result: AdapterBench) -> str:
    """Render :func:`run_adapter_benchmark`: median time and ratio to the idiomatic GRPO per case, and the targets."""
    lines = [f"torch {torch.__version__}, {result.threads} torch thread(s) of {os.cpu_count()} cores; load average "
             f"{load_text(result.load)}", result.setting, "",
             f"{'case':<48}{'ms':>9}{'x grpo':>9}   target"]
    for r in result.rows:
        target = "" if r.target is None else f"<= {r.target:g}x: {'met' if r.ratio <= r.target else 'NOT met'}"
        lines.append(f"{r.case:<48}{r.ms:>9.1f}{r.ratio:>9.2f}   {target}")
    return "\n".join(lines)
