"""``Finding``: a located problem a verifier raised (which artifact, part and dimension).

A state holds the last cycle's findings (``TaskState.findings``); a verdict carries its own
(``_proposal.Verdict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from . import _shapes as shapes
from ._errors import ConfigError
from ._frozen import quick_init
from ._parts import part_ref

__all__ = ["Finding"]


@quick_init
@dataclass(frozen=True, slots=True)
class Finding:
    """A located problem: which artifact, which part, which dimension, and what is wrong.

    Attributes:
        message: what is wrong, in words the actor (and a person) can act on.
        artifact: the artifact it concerns, if any.
        part: the part it concerns, if any.
        dimension: what kind of problem (``"amount"``, ``"evidence"``, ``"legibility"``...).
        severity: ``"error"`` blocks acceptance; ``"warning"`` does not.
        verifier: the verifier that raised it (filled in by the engine).
        evidence: supporting data (expected and actual values, a test's output).
    """

    message: str
    artifact: str | None = None
    part: str | None = None
    dimension: str = "general"
    severity: Literal["error", "warning"] = "error"
    verifier: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a verifier that parsed a model's answer may pass None or a number: say so here, not
        # a cycle later inside the engine (loopwright._shapes)
        if (
            type(self.message) is not str
            or (self.artifact is not None and type(self.artifact) is not str)
            or (self.part is not None and type(self.part) is not str)
            or type(self.dimension) is not str
            or type(self.verifier) is not str
            or self.severity
            not in ("error", "warning")  # a tuple: an unhashable value is refused too
            or (type(self.evidence) is not dict and not isinstance(self.evidence, Mapping))
        ):
            shapes.text(self.message, "Finding.message")
            shapes.optional(self.artifact, str, "Finding.artifact")
            shapes.optional(self.part, str, "Finding.part")
            shapes.text(self.dimension, "Finding.dimension")
            shapes.text(self.verifier, "Finding.verifier")
            if self.severity not in ("error", "warning"):
                raise ConfigError(
                    f"must be 'error' or 'warning', got {self.severity!r}",
                    field="Finding.severity",
                )
            if not isinstance(self.evidence, Mapping):
                raise ConfigError(
                    f"must be a mapping, got {type(self.evidence).__name__}",
                    field="Finding.evidence",
                )

    @property
    def ref(self) -> str | None:
        if self.artifact is None:
            return None
        return part_ref(self.artifact, self.part) if self.part else self.artifact

    def touches(self, artifact: str, part: str) -> bool:
        """Whether this finding is about the given part (an artifact-wide finding touches all)."""
        if self.artifact is None:
            return True
        return self.artifact == artifact and (self.part is None or self.part == part)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "artifact": self.artifact,
            "part": self.part,
            "dimension": self.dimension,
            "severity": self.severity,
            "verifier": self.verifier,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        return shapes.stored(  # as recorded: checked when it was made
            cls,
            str(d["message"]),
            d.get("artifact"),
            d.get("part"),
            str(d.get("dimension", "general")),
            d.get("severity", "error"),
            str(d.get("verifier", "")),
            dict(d.get("evidence") or {}),
        )
