"""A plain verifier function given to ``Loop(verifiers=[...])`` is accepted at run time (made a
``Check``); its type said ``Sequence[Check]``, so ``mypy --strict`` refused a user's loop that
the docs write (outside50a). The field takes functions too; ``Loop.checks`` is the typed
tuple of ``Check`` the engine reads."""

from __future__ import annotations

import typing

import loopwright as lw
from loopwright._loop import VerifierFn


def _check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def test_the_verifiers_field_takes_plain_functions_for_the_callers_checker() -> None:
    hint = typing.get_type_hints(lw.Loop)["verifiers"]
    (item,) = typing.get_args(hint)
    assert VerifierFn in typing.get_args(item)
    assert lw.Check in typing.get_args(item)


def test_checks_holds_every_verifier_as_a_check() -> None:
    loop = lw.Loop(
        name="typed",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": 1}),
        verifiers=[_check, lw.Check(fn=_check, name="other", held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    assert [c.name for c in loop.checks] == ["_check", "other"]
    assert all(isinstance(c, lw.Check) for c in loop.checks)
    assert tuple(loop.verifiers) == loop.checks
    assert [c.name for c in loop.held_out] == ["other"]
    assert typing.get_type_hints(lw.Loop.checks.fget)["return"] == tuple[lw.Check, ...]
