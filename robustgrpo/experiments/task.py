r"""The toy verifiable task of the real trainer runs: name the first letter of a short word.

A prompt is ``length`` letters drawn from the first ``letters`` of the alphabet, then ``=``
(``"cab="``); the correct answer is the prompt's first letter (``"c"``). The verifier is exact:
reward 1 when the completion's first character is that letter, else 0. Every prompt of the
alphabet is in the task (``letters ** length`` of them, in lexicographic order), so the answers
are uniform over the alphabet and no constant answer beats chance.

Why this task
-------------
* A randomly initialised model starts near chance, :math:`1 / V` for a vocabulary of
  :math:`V` tokens, and a one-layer transformer learns it from rewards alone within a hundred
  or so GRPO steps on one CPU core: it must learn to attend from the ``=`` back to the first
  position (copying), not a lookup of the last token.
* Completions are one token long, so the policy at the end of a prompt *is* a softmax over
  the vocabulary, the drift simulator's policy over K answers; the probability of the correct
  answer and of the hack are exact functions of one forward pass (no sampling noise).
* The vocabulary holds one token that is never a correct answer, :data:`HACK_TOKEN` (``#``),
  for the flawed judge to over-score (:class:`~robustgrpo.experiments.judge.PatternHack`):
  it is as reachable at the start as the correct answer, and one constant output hacks every
  prompt at once.

>>> task = FirstLetterTask(letters=3, length=2)
>>> task.prompts()[:4]
['aa=', 'ab=', 'ac=', 'ba=']
>>> task.verify(["ba=", "ba=", "ba="], ["b", "a", ""])
[1.0, 0.0, 0.0]
>>> task.vocabulary()
['<pad>', '<s>', '</s>', '<unk>', 'a', 'b', 'c', '=', '#']
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import ParamError, check_int

__all__ = ["SPECIAL_TOKENS", "SEPARATOR", "HACK_TOKEN", "MAX_PROMPTS", "FirstLetterTask"]

#: Special tokens of the character tokenizer, ids 0 to 3: padding, begin and end of sequence, unknown.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
#: The character that ends every prompt.
SEPARATOR = "="
#: The vocabulary's one token that is never a correct answer: what a flawed judge can over-score.
HACK_TOKEN = "#"
#: Most prompts a task may have (``letters ** length``).
MAX_PROMPTS = 100_000


@dataclass(frozen=True)
class FirstLetterTask:
    """Name the first letter of a word of ``length`` letters over an alphabet of ``letters``.

    Parameters
    ----------
    letters : int
        Alphabet size, 2 to 26 (the first letters of ``a`` to ``z``).
    length : int
        Letters per prompt, >= 1; ``letters ** length`` may not exceed :data:`MAX_PROMPTS`.
    """

    letters: int = 8
    length: int = 3

    def __post_init__(self) -> None:
        check_int("letters", self.letters, minimum=2, maximum=26, hint="an alphabet of 2 to 26 letters")
        check_int("length", self.length, minimum=1, hint="letters per prompt")
        if self.length * math.log(self.letters) > math.log(MAX_PROMPTS) + 1e-9 or self.letters ** self.length > MAX_PROMPTS:
            raise ParamError("length", f"gives {self.letters} ** {self.length} prompts, more than {MAX_PROMPTS}",
                             self.length, "use fewer letters or shorter prompts")

    @property
    def alphabet(self) -> str:
        """The letters a prompt is made of, and the possible correct answers."""
        return string.ascii_lowercase[: self.letters]

    def prompts(self) -> list[str]:
        """Every prompt of the task, in lexicographic order: ``letters ** length`` of them."""
        return ["".join(word) + SEPARATOR for word in itertools.product(self.alphabet, repeat=self.length)]

    @staticmethod
    def answer(prompt: str) -> str:
        """The correct answer to ``prompt``: its first letter."""
        return prompt[0]

    def verify(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        """The verifier: 1.0 where the completion's first character is the prompt's first letter, else 0.0.

        An empty completion (the model ended at once, or emitted another special token) is wrong.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"verify needs one completion per prompt, got {len(prompts)} prompts and "
                             f"{len(completions)} completions")
        return [1.0 if completion[:1] == self.answer(prompt) else 0.0 for prompt, completion in zip(prompts, completions)]

    def characters(self) -> list[str]:
        """The characters of the tokenizer after its special tokens: the alphabet, the separator, the hack token."""
        return [*self.alphabet, SEPARATOR, HACK_TOKEN]

    def vocabulary(self) -> list[str]:
        """The tokenizer's tokens in id order: :data:`SPECIAL_TOKENS`, then :meth:`characters`."""
        return [*SPECIAL_TOKENS, *self.characters()]
