"""What verifiers return: ``Verdict``, a verifier's judgement of the candidate state after a
proposal, with its findings, evidence and cost."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _shapes as shapes
from ._errors import ConfigError
from ._frozen import quick_init
from ._record_codec import packed_finding, packed_verdict
from ._state import Finding
from ._usage import Usage, plain_usage

__all__ = ["HeldOutWords", "Verdict", "held_out_words", "independent"]


def _finding_dicts(findings: tuple[Finding, ...]) -> list[dict[str, Any]]:
    """Each finding's ``to_dict`` (a loop: a verdict is written out several times a cycle)."""
    out: list[dict[str, Any]] = []
    for f in findings:
        out.append(f.to_dict())
    return out


@quick_init
@dataclass(frozen=True, slots=True)
class Verdict:
    """A verifier's judgement of the candidate state after a proposal.

    Attributes:
        passed: whether the check passed.
        score: quality in [0, 1]; defaults to 1.0 when passed, else 0.0.
        findings: located problems (artifact, part, dimension).
        evidence: what the judgement rests on (shown to people, kept in the trace).
        usage: what the check cost (a model reviewer's tokens, a sandbox's seconds).
        checked: the part references this verifier looked at; ``None`` means all parts.
    """

    passed: bool
    score: float | None = None
    findings: tuple[Finding, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    usage: Usage | None = None
    checked: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        f, u, c = self.findings, self.usage, self.checked
        if not (  # a verifier's usual verdict, in a few type tests (several are built a cycle)
            type(self.passed) is bool
            and type(f) is tuple
            and (not f or (len(f) == 1 and type(f[0]) is Finding))
            and type(self.evidence) is dict
            and (u is None or type(u) is Usage)
            and (c is None or type(c) is tuple)
        ):
            self._check_shapes()
        s = self.score
        if s is not None and not (type(s) is float and 0.0 < s <= 1.0):
            self._check_score(s)  # (0.0 too: a -0.0 is made 0.0 there)

    def _check_score(self, s: Any) -> None:
        """A score in [0, 1], past a float sum's rounding: ``0.1 * 3 + 0.7`` is
        1.0000000000000002, which escalated the run as out of range; within
        ``shapes.FLOAT_SLACK`` of the range it is clamped to it."""
        slack = shapes.FLOAT_SLACK
        if not isinstance(s, int | float) or isinstance(s, bool) or math.isnan(s):
            ok = False
        elif 0.0 <= s <= 1.0:
            if s == 0 and isinstance(s, float):
                # -0.0: recorded and shown as "-0.00" (``show``), where 0.0 is meant
                object.__setattr__(self, "score", 0.0)
            return  # an int 0 or 1, or a float subclass
        else:
            ok = -slack <= s <= 1.0 + slack
        if not ok:
            # a user's mistake, named (a ConfigError is a ValueError, as this was before)
            raise ConfigError(
                f"must be a number in [0, 1], got {type(s).__name__}: {s!r:.60}",
                field="Verdict.score",
            )
        object.__setattr__(self, "score", min(1.0, max(0.0, float(s))))

    def _check_shapes(self) -> None:
        p = self.passed
        if type(p) is not bool:
            # "false" is truthy: a verdict parsed from a model's text must not pass by accident
            if type(p).__name__ in ("bool_", "bool") or (type(p) is int and p in (0, 1)):
                object.__setattr__(self, "passed", bool(p))  # numpy's bool (bool_ before 2.0), 0, 1
            else:
                raise ConfigError(
                    f"must be True or False, got {type(p).__name__}: {p!r:.60}",
                    field="Verdict.passed",
                )
        object.__setattr__(
            self, "findings", shapes.tuple_of(self.findings, Finding, "Verdict.findings")
        )
        if not isinstance(self.evidence, Mapping):
            raise ConfigError(
                f"must be a mapping, got {type(self.evidence).__name__}", field="Verdict.evidence"
            )
        shapes.optional(self.usage, Usage, "Verdict.usage")
        object.__setattr__(self, "usage", plain_usage(self.usage))
        if self.checked is not None and type(self.checked) is not tuple:
            if isinstance(self.checked, str):
                raise ConfigError(
                    "takes a tuple of part references; wrap the single one: (ref,)",
                    field="Verdict.checked",
                )
            object.__setattr__(self, "checked", tuple(self.checked))

    @property
    def value(self) -> float:
        if self.score is not None:
            return float(self.score)
        return 1.0 if self.passed else 0.0

    @property
    def vacuous(self) -> bool:
        """Whether the check had nothing to check (``evidence["vacuous"]`` is true: a test
        verifier with no tests). A contract refuses success on a vacuous pass unless
        ``contract.success.allow_vacuous`` says otherwise."""
        return self.evidence.get("vacuous") is True

    def to_dict(self) -> dict[str, Any]:
        s = self.score  # (``value`` written out: no property call, twice a cycle)
        return {
            "passed": self.passed,
            "score": float(s) if s is not None else 1.0 if self.passed else 0.0,
            "findings": _finding_dicts(self.findings),
            "evidence": dict(self.evidence),
            "usage": self.usage.to_dict() if self.usage else None,
            "checked": list(self.checked) if self.checked is not None else None,
        }

    def to_packed_dict(self, name: str) -> dict[str, Any]:
        """``to_dict`` as the stored record of a cycle holds it under the check ``name``
        (``_record_codec.pack``'s: defaults left out, a finding's ``verifier`` where it is
        ``name``), built so (a unit test holds the two together)."""
        s = self.score
        findings: list[dict[str, Any]] = []
        for f in self.findings:  # (Finding.to_dict's values, by position in its order)
            findings.append(
                packed_finding(
                    f.message,
                    f.artifact,
                    f.part,
                    f.dimension,
                    f.severity,
                    f.verifier,
                    dict(f.evidence),
                    name,
                )
            )
        return packed_verdict(
            self.passed,
            float(s) if s is not None else 1.0 if self.passed else 0.0,
            findings,
            dict(self.evidence),
            self.usage.to_dict() if self.usage else None,
            list(self.checked) if self.checked is not None else None,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        checked = d.get("checked")
        return cls(
            passed=bool(d["passed"]),
            score=d.get("score"),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            evidence=dict(d.get("evidence") or {}),
            usage=Usage.from_dict(d["usage"]) if d.get("usage") else None,
            checked=tuple(checked) if checked is not None else None,
        )


def self_reported_count(evidence: Any) -> int:
    """How many tests behind a verdict whose ``evidence`` this is the candidate's own process
    decided: the sandbox's ``evidence["self_reported"]`` (0 for any other verifier's)."""
    mine = evidence.get("self_reported") if isinstance(evidence, Mapping) else None
    return len(mine) if isinstance(mine, list) else 0


def not_judged_count(evidence: Any) -> int:
    """How many tests behind a verdict whose ``evidence`` this is ``judged_only`` refused (the
    sandbox's ``evidence["not_judged"]``: failed unrun, not of the judged form whoever the
    candidate is; a refusal the candidate caused is not marked), when the
    verdict's failure rests on them alone (every other test passed); else 0. Such a failure
    is no more the held-out checks' than a pass on self-reported tests: nothing was decided."""
    if not isinstance(evidence, Mapping):
        return 0
    refused, passed, total = (evidence.get(k) for k in ("not_judged", "passed", "total"))
    if not isinstance(refused, list) or not refused or type(passed) is not int:
        return 0
    return len(refused) if passed + len(refused) == total else 0


def held_out_mark(verdicts: Iterable[tuple[bool, int, int]]) -> int:
    """How many tests behind a held-out verdict (the run's ``held_out_self_reported``) were
    not decided independently of the candidate, from each check's ``(passed, self-reported,
    not judged)`` (``self_reported_count``, ``not_judged_count``): a pass's self-reported
    tests; a failure's refused tests when every failing check failed on them alone; else 0
    (a failure some test decided is a failure). Any: the verdict is not an independent one."""
    seen = list(verdicts)
    if all(p for p, _m, _r in seen):
        return sum(m for _p, m, _r in seen)
    failing = [r for p, _m, r in seen if not p]
    return sum(failing) if all(failing) else 0


def stored_mark(verdict: Mapping[str, Any]) -> tuple[bool, int, int]:
    """``held_out_mark``'s triple for one stored verdict (``Verdict.to_dict``)."""
    ev = verdict.get("evidence")
    return bool(verdict.get("passed")), self_reported_count(ev), not_judged_count(ev)


def independent(passed: bool | None, mark: int | None) -> bool | None:
    """A held-out verdict (``held_out_passed``) as an independent one: ``None`` (no verdict to
    count) when ``mark`` (``held_out_mark``, a run's ``held_out_self_reported``) says tests
    behind it were not decided outside the candidate's process: a pass it could have forged,
    a failure nothing decided. A ``mark`` of ``None`` (unknown: a run ended before stop 55)
    leaves the verdict as it was counted then. The one rule: ``RunRecord``, ``RunMetrics``,
    metrics, replays and ``held_out_words`` all ask it (stop 56)."""
    return None if passed is not None and mark else passed


@dataclass(frozen=True, slots=True)
class HeldOutWords:
    """How a run's held-out verdict is said (``held_out_words``), the same in every place a
    person reads it: ``loopwright runs``, ``show`` and ``diff``, the dashboard's runs list,
    run page and compare page, ``/api/runs`` (``kind``) and the trace (``kind``).

    Attributes:
        kind: ``None`` (no held-out verdict), ``"pass"``, ``"fail"`` (both independent),
            ``"pass_self_reported"`` (a pass resting on tests the candidate's own process
            decided) or ``"fail_not_judged"`` (a failure resting only on tests
            ``judged_only`` refused): the last two are neither a held-out pass nor a failure.
        independent: the verdict as metrics count it (``independent``).
        cell: a list's short cell: ``-``, ``pass``, ``FAIL``, ``pass*``, ``fail*``.
        word: in words: ``-``, ``pass``, ``FAIL``, ``pass (self-reported)``,
            ``fail (not judged)``.
        tone: ``""``, ``"pass"``, ``"fail"`` or ``"warn"`` (a marked verdict).
        legend: what a starred ``cell`` means, one line (under a list), else ``""``.
        note: this verdict's mark with its count (a tooltip, ``show``'s row), else ``""``.
    """

    kind: str | None
    independent: bool | None
    cell: str
    word: str
    tone: str
    legend: str
    note: str


PASS_STAR_LEGEND = (
    "pass*: a held-out pass resting on self-reported tests (decided in the candidate's own "
    "process, or by a judge within its reach, so it could have forged them): not counted as "
    "a held-out pass by false_success_rate"
)
FAIL_STAR_LEGEND = (
    "fail*: a held-out failure resting only on tests judged_only refused (not of the form the "
    "judge decides: nothing decided them): not counted as a held-out failure by "
    "false_success_rate"
)


def held_out_words(passed: bool | None, mark: int | None) -> HeldOutWords:
    """A run's held-out verdict (``held_out_passed``) and its mark (``held_out_self_reported``)
    as words (``HeldOutWords``); ``independent`` decides which."""
    fair = independent(passed, mark)
    if passed is None:
        return HeldOutWords(None, None, "-", "-", "", "", "")
    if fair is not None:
        if fair:
            return HeldOutWords("pass", True, "pass", "pass", "pass", "", "")
        return HeldOutWords("fail", False, "FAIL", "FAIL", "fail", "", "")
    n = f"{mark} test{'' if mark == 1 else 's'}"
    if passed:
        note = (
            f"{n} self-reported: decided in the candidate's own process, or by a judge within "
            "its reach, so it could have forged them; not counted as a held-out pass by "
            "false_success_rate"
        )
        return HeldOutWords(
            "pass_self_reported",
            None,
            "pass*",
            "pass (self-reported)",
            "warn",
            PASS_STAR_LEGEND,
            note,
        )
    note = (
        f"{n} not judged: judged_only refused them and every other test passed, so nothing "
        "decided the failure; not counted as a held-out failure by false_success_rate"
    )
    return HeldOutWords(
        "fail_not_judged", None, "fail*", "fail (not judged)", "warn", FAIL_STAR_LEGEND, note
    )


def undecided_note(verdict: Mapping[str, Any]) -> str:
    """What a person reading a verdict (stored form, ``Verdict.to_dict``) must know of the tests
    behind it not decided outside the candidate's process: a pass's tests its own process
    decided (the sandbox's ``evidence.self_reported``, stop 54), ``"3 of 40 tests
    self-reported: the candidate could have forged them"``, or every test where the judge was
    within its reach (``evidence.not_separated``, stop 56, which the note names); a failure resting only on tests
    ``judged_only`` refused for their form (``not_judged_count``, stop 56), ``"1 of 2 tests not
    judged, refused by judged_only: nothing decided the failure"``; else ``""``. Any other
    failure is a failure whoever decided its tests."""
    ev = verdict.get("evidence")
    if not isinstance(ev, Mapping):
        return ""
    total = ev.get("total")
    of = f" of {total}" if isinstance(total, int) and not isinstance(total, bool) else ""
    if verdict.get("passed") is not True:
        n = not_judged_count(ev)
        if not n or verdict.get("passed") is not False:
            return ""
        tests = "test" if n == 1 and not of else "tests"
        return f"{n}{of} {tests} not judged, refused by judged_only: nothing decided the failure"
    mine = ev.get("self_reported")
    if not isinstance(mine, list) or not mine:
        return ""
    tests = "test" if len(mine) == 1 and not of else "tests"
    apart = ev.get("not_separated")
    if isinstance(apart, str) and apart:  # (every test: the judge's lines were in its reach)
        return (
            f"{len(mine)}{of} {tests} self-reported: the judge was not separated from the "
            f"candidate ({apart}), which could have forged them"
        )
    return f"{len(mine)}{of} {tests} self-reported: the candidate could have forged them"
