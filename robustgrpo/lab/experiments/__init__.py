"""Real trainer runs (top layer, beside integrations): GRPO with TRL on a tiny model under a contaminated judge.

The drift simulator (:mod:`robustgrpo.lab.simulate`) is a model of training; this is training.
One run (:func:`run_trl`) trains a tiny causal language model with random initial weights
(:mod:`~.model`: a ``LlamaForCausalLM`` built from a config, a character tokenizer built in
code, nothing downloaded) on a toy verifiable task (:mod:`~.task`: name the first letter of a
three-letter word) with :class:`robustgrpo.integrations.trl.RobustGRPOTrainer`, any catalogue
estimator and an optional declared reward range. The rewards go through a judge model
(:mod:`~.judge`): the suite's contamination models (judge glitches, a noisy verifier...) or a
flawed judge that over-scores a fixed token (:class:`PatternHack`). Each step's row holds the
clean and the judged reward, the hack's rate, the policy's exact probabilities, KL, the
estimator's diagnostics and the step's timing (:data:`METRICS`).

A run is the ``trl`` runnable of :mod:`robustgrpo.lab.sweep`, so a grid of estimators x judges x
seeds runs as a sweep, on the local or the Ray engine, into a Parquet record:
``python -m robustgrpo experiment trl CONFIG --out DIR``. Its figures are in
:mod:`robustgrpo.book.real_trainer.report`, and notebooks 08 and 09 read the shipped records.

The second experiment (:func:`run_composite`, the ``trl_composite`` runnable, set by
:class:`CompositeConfig`) is at the shape of real runs: answers of several tokens (:class:`~.task.ReverseTask`:
a word reversed in an answer tag), a small model first warmed up on the format (:mod:`~.warmup`), a
TRL-style sum of reward functions (correctness, format, length) with a judge in front of one of them
(:mod:`~.rewards`), TRL's loss types and per-function normalisation, and exact held-out metrics. Its ``model`` may be a
pretrained language model (:mod:`~.pretrained`: SmolLM2-135M-Instruct from the ``pretrained`` extra, a
Hugging Face folder or a GGUF file) on :class:`~.task.ArithmeticTask` (sums asked in words), with a
held-out greedy evaluation.

Importing this package imports neither trl nor transformers; a run needs the
``integrations`` extra (and, for SmolLM2 or another GGUF file, the ``pretrained`` extra).
"""

from robustgrpo.lab.experiments.composite import RUNNABLE_COMPOSITE, CompositeConfig
from robustgrpo.lab.experiments.composite_trl import COMPOSITE_METRICS, run_composite
from robustgrpo.lab.experiments.config import RUNNABLE, TrlConfig
from robustgrpo.lab.experiments.judge import JUDGE_MODELS, JudgedReward, PatternHack, judge_from_dict, judge_label, judge_to_dict
from robustgrpo.lab.experiments.model import char_tokenizer, tiny_model
from robustgrpo.lab.experiments.task import HACK_TOKEN, ArithmeticTask, FirstLetterTask, ReverseTask
from robustgrpo.lab.experiments.trl import METRICS, ExactProbe, run_trl

__all__ = [
    "RUNNABLE",
    "TrlConfig",
    "JUDGE_MODELS",
    "JudgedReward",
    "PatternHack",
    "judge_from_dict",
    "judge_to_dict",
    "judge_label",
    "char_tokenizer",
    "tiny_model",
    "HACK_TOKEN",
    "FirstLetterTask",
    "METRICS",
    "ExactProbe",
    "run_trl",
    "RUNNABLE_COMPOSITE",
    "CompositeConfig",
    "ReverseTask",
    "ArithmeticTask",
    "COMPOSITE_METRICS",
    "run_composite",
]
