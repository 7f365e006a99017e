"""Questions for a person: when the task is ambiguous, ask instead of guessing.

A question parks the run like an approval request; the answer is validated against the
question's small schema, recorded with who gave it, and put in the next cycle's context.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import ConfigError

__all__ = ["Question", "answer_unread"]

AnswerType = Literal["text", "number", "integer", "boolean"]
_TYPES = ("text", "number", "integer", "boolean")
_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}


def _given(answer: Any) -> str:
    """An answer as a refusal quotes it: cut, so a 100 KB paste is not echoed whole to the
    terminal or in the API's 400 detail (probe46c)."""
    shown = repr(answer)
    if len(shown) <= 60:
        return shown
    return f"{shown[:57]}… ({len(str(answer)):,} characters)"


@dataclass(frozen=True, slots=True)
class Question:
    """A question to a person.

    Attributes:
        text: the question.
        choices: when given, the answer must be one of these.
        type: ``text`` (default), ``number``, ``integer`` or ``boolean``; a CLI answer (always a
            string) is converted.
    """

    text: str
    choices: tuple[str, ...] = ()
    type: AnswerType = "text"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ConfigError("a question needs its text", field="question.text")
        if self.type not in _TYPES:
            raise ConfigError(f"must be one of {list(_TYPES)}", field="question.type")
        choices = self.choices
        if not isinstance(choices, list | tuple):
            # (None or a number raised TypeError; a mapping gave its keys; a string is
            # refused too: was "ab" one choice or the two choices "a" and "b"?)
            hint = " (one choice is a list of one)" if isinstance(choices, str) else ""
            raise ConfigError(
                f"must be a list of choices, got {type(choices).__name__}{hint}",
                field="question.choices",
            )
        # An answer is compared stripped: a choice with spaces around it, or a blank one,
        # could never be chosen (the question could only be declined).
        texts = tuple(str(c).strip() for c in choices)
        if not all(texts):
            raise ConfigError("a choice must not be blank", field="question.choices")
        object.__setattr__(self, "choices", texts)

    def validate(self, answer: Any) -> Any:
        """The answer converted to the question's type; ``ConfigError`` saying what is wanted
        when it does not fit."""
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            raise ConfigError("the answer is empty", field="answer")
        if self.choices:
            text = str(answer).strip()
            if text not in self.choices:
                raise ConfigError(
                    f"must be one of {list(self.choices)}, got {_given(text)}", field="answer"
                )
            return text
        if self.type == "text":
            return str(answer).strip()
        if self.type == "boolean":
            if isinstance(answer, bool):
                return answer
            low = str(answer).strip().lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ConfigError(f"must be yes or no, got {_given(answer)}", field="answer")
        if self.type == "integer":
            # Whole numbers are parsed as ints, never through float (exact beyond 2**53).
            if isinstance(answer, int) and not isinstance(answer, bool):
                return answer
            if isinstance(answer, str):
                try:
                    return int(answer.strip())
                except ValueError:
                    digits = answer.strip().lstrip("+-")
                    if digits.isdecimal() and len(digits) > sys.get_int_max_str_digits() > 0:
                        # (float() would read it as inf: "must be a finite integer" said wrong)
                        raise ConfigError(
                            f"must be a whole number of at most {sys.get_int_max_str_digits()} "
                            f"digits, got one of {len(digits)}",
                            field="answer",
                        ) from None
        try:
            if isinstance(answer, bool):
                raise ValueError
            num = float(answer)
        except (TypeError, ValueError, OverflowError):
            article = "an" if self.type[0] in "aeiou" else "a"  # an integer
            raise ConfigError(
                f"must be {article} {self.type}, got {_given(answer)}", field="answer"
            ) from None
        if not math.isfinite(num):
            raise ConfigError(f"must be a finite {self.type}", field="answer")
        if self.type == "integer":
            if num != int(num):
                raise ConfigError(f"must be a whole number, got {_given(answer)}", field="answer")
            return int(num)
        return num

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "choices": list(self.choices), "type": self.type}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Question:
        return cls(str(d["text"]), tuple(d.get("choices") or ()), d.get("type", "text"))


def answer_unread(
    history: Sequence[Mapping[str, Any]], notes: Sequence[Mapping[str, Any]], cycle: int
) -> bool:
    """Whether the last concluded cycle (``cycle``, the last of ``history``) asked a question
    a person answered (its answer among ``notes``), which no actor has read since: the cycle
    after it is the one its answer is for. A state's lists, or a checkpoint's (a fork's
    first, which inherits them: ``Inherited.answer_owed``)."""
    last = history[-1] if history else None
    if not isinstance(last, Mapping) or last.get("decision") != "asked":
        return False
    if last.get("cycle") != cycle:
        return False
    for note in reversed(notes):  # (the answer is among the newest notes)
        if (
            isinstance(note, Mapping)
            and note.get("kind") == "answer"
            and note.get("cycle") == cycle
        ):
            return True
    return False
