"""Write the example run logs of this folder with the trainers themselves (see README.md).

Run from the repository root: ``.venv/bin/python data/run_logs/make_examples.py``. Offline; about
20 seconds on two cores. Writes ``trl/completions/``, ``verl/`` and ``verl_multiturn/`` here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

HERE = Path(__file__).resolve().parent


def trl_example(out: Path) -> None:
    """Three steps of TRL's own GRPOTrainer (4 prompts x num_generations=4), two reward functions weighted 1 and 0.5."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
    from robustgrpo.lab.experiments.task import FirstLetterTask

    task = FirstLetterTask()
    tokenizer = char_tokenizer(task.characters())

    def correct(prompts, completions, **kwargs):
        return task.verify(prompts, completions)

    def short(prompts, completions, **kwargs):  # a length term in tokens; None (unscored) where a '#' appears
        return [None if "#" in c else 1.0 - len(c.split()) / 4 for c in completions]

    with tempfile.TemporaryDirectory() as folder:
        args = GRPOConfig(output_dir=folder, use_cpu=True, seed=0, bf16=False, beta=0.0, per_device_train_batch_size=16,
                          num_generations=4, max_completion_length=4, max_steps=3, learning_rate=1e-2, report_to="none",
                          logging_steps=1, save_strategy="no", disable_tqdm=True, log_completions=True,
                          reward_weights=[1.0, 0.5])
        trainer = GRPOTrainer(model=tiny_model(len(tokenizer), seed=0), reward_funcs=[correct, short], args=args,
                              train_dataset=Dataset.from_dict({"prompt": task.prompts()[:64]}), processing_class=tokenizer)
        trainer.train()
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(Path(folder) / "completions", out)


def verl_examples(out: Path, multiturn: Path) -> None:
    """verl's own dump function (RayPPOTrainer._write_generations, which _dump_generations runs) on two steps.

    ``verl/``: the legacy trainer's layout: no group id; 3 prompts x rollout.n = 4 responses, a reward function
    returning acc and format with score = acc + 0.5 format, one judge glitch of 10. ``verl_multiturn/``: the v1
    trainer's layout (uid = {prompt}_{session}_{output}): 2 prompts x 4 conversations, one with three outputs.
    """
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(multiturn, ignore_errors=True)
    questions = ["2+2=", "3*3=", "7-5="]
    answers = ["4", "9", "2"]
    outputs = [["4", "5", "4", "four"], ["9", "6", "9", "9"], ["2", "3", "1", "2"]]
    for step in (1, 2):
        inputs = [q for q in questions for _ in range(4)]
        outs = [o if step == 1 else o[::-1] for row in outputs for o in row]
        gts = [a for a in answers for _ in range(4)]
        acc = [float(o == a) for o, a in zip(outs, gts)]
        fmt = [float(o.isdigit()) for o in outs]
        score = [a + 0.5 * f for a, f in zip(acc, fmt)]
        if step == 2:
            score[5] = 10.0  # a judge glitch
        RayPPOTrainer._write_generations(inputs, outs, gts, score, {"acc": acc, "format": fmt}, str(out), step)
    keys = ["0_0_0", "0_0_1", "0_0_2", "0_1_0", "0_2_0", "0_3_0", "1_0_0", "1_1_0", "1_2_0", "1_3_0"]
    inputs = ["find x"] * 6 + ["find y"] * 4
    outs = ["call tool", "tool said 3", "x=3", "x=2", "x=3", "x=4", "y=1", "y=1", "y=0", "y=1"]
    score = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    RayPPOTrainer._write_generations(inputs, outs, [None] * 10, score, {"uid": keys}, str(multiturn), 1)


if __name__ == "__main__":
    trl_example(HERE / "trl" / "completions")
    verl_examples(HERE / "verl", HERE / "verl_multiturn")
    print(f"wrote {HERE}")
