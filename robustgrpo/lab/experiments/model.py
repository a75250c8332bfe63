r"""A character tokenizer built in code and a tiny causal language model with random weights.

Nothing is downloaded: the tokenizer is a ``tokenizers`` word-level model over single
characters (one token per character, split by a regular expression), wrapped in
``transformers.PreTrainedTokenizerFast``; the model is a ``LlamaForCausalLM`` built from a
``LlamaConfig`` with random weights drawn from a seed.

The special tokens take ids 0 to 3 (:data:`~robustgrpo.lab.experiments.task.SPECIAL_TOKENS`:
padding, begin and end of sequence, unknown); the characters follow in the order given. The
tokenizer adds no special token of its own, so ``"cab="`` is four tokens, and decoding joins the
tokens without spaces (``"[cba]"``). A character outside the vocabulary becomes ``<unk>``.

The model: ``layers`` decoder layers of width ``hidden_size``, ``heads`` attention heads (the
head size ``hidden_size / heads`` must be an even integer, for the rotary position code), an
MLP of width ``2 * hidden_size``, untied input and output embeddings. At the defaults of the
experiment (32 wide, one layer, 14 tokens) it has 11,232 parameters.

transformers and tokenizers are imported when a function here is called, not when the module
is imported (they come with the ``integrations`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from robustgrpo.checks import ParamError, check_int
from robustgrpo.lab.params import check_seed
from robustgrpo.lab.experiments.task import SPECIAL_TOKENS

__all__ = ["char_tokenizer", "check_architecture", "tiny_model", "model_config", "n_parameters"]


def char_tokenizer(characters: Sequence[str]) -> Any:
    """A ``PreTrainedTokenizerFast`` with one token per character: the special tokens, then ``characters``.

    Parameters
    ----------
    characters : sequence of str
        Distinct single characters, none of them a special token.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        Padding ``<pad>`` (id 0), ``<s>`` (1), ``</s>`` (2, end of sequence), ``<unk>`` (3).
    """
    chars = list(characters)
    if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars):
        raise ParamError("characters", "must be a non-empty sequence of single characters", characters,
                         'e.g. list("abc=#")')
    if len(set(chars)) != len(chars):
        raise ParamError("characters", "must not repeat a character", characters, "drop the repeats")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *chars])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS[3]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # decoded tokens are joined as they are: "[cba]", not "[ c b a ]"
    pad, bos, eos, unk = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=pad, bos_token=bos, eos_token=eos, unk_token=unk)


def check_architecture(hidden_size: int, layers: int, heads: int) -> tuple[int, int, int]:
    """The checked ``(hidden_size, layers, heads)``: positive integers, heads of an even integer size."""
    hidden_size = check_int("hidden_size", hidden_size, minimum=2)
    layers = check_int("layers", layers, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    if hidden_size % heads or (hidden_size // heads) % 2:
        raise ParamError("heads", f"must split hidden_size={hidden_size} into heads of an even size", heads,
                         "e.g. hidden_size=32 with heads=2 (heads of 16)")
    return hidden_size, layers, heads


def model_config(vocab_size: int, *, hidden_size: int = 32, layers: int = 1, heads: int = 2,
                 max_positions: int = 32) -> Any:
    """The ``LlamaConfig`` of :func:`tiny_model` (checked with :func:`check_architecture`)."""
    vocab_size = check_int("vocab_size", vocab_size, minimum=len(SPECIAL_TOKENS) + 1)
    hidden_size, layers, heads = check_architecture(hidden_size, layers, heads)
    max_positions = check_int("max_positions", max_positions, minimum=2)
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=max_positions, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       tie_word_embeddings=False)


def tiny_model(vocab_size: int, *, hidden_size: int = 32, layers: int = 1, heads: int = 2, max_positions: int = 32,
               seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` with random weights from ``seed`` (the global torch RNG is left as it was).

    Parameters
    ----------
    vocab_size : int
        Tokens of the tokenizer (special tokens included).
    hidden_size, layers, heads, max_positions : int
        The architecture (see the module's docstring).
    seed : int
        Seed of the initial weights: the same seed gives the same model.
    """
    config = model_config(vocab_size, hidden_size=hidden_size, layers=layers, heads=heads, max_positions=max_positions)
    seed = check_seed(seed)
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def n_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
