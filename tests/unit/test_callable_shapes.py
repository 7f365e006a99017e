"""A loop's callables are refused when they cannot be called as the engine calls them
(newuser46): a verifier written ``def check(state)`` passed ``Loop(...)`` and ``loopwright
check``, then failed in every run, after the actor's paid call, escalating each run with a
``TypeError``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._spec import load_spec


def actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("a", {"x": 1})


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True)


def one_arg(state: lw.TaskState) -> lw.Verdict:
    return lw.Verdict(passed=True)


def _loop(**kw: Any) -> lw.Loop:
    given: dict[str, Any] = {
        "actor": actor,
        "verifiers": [lw.Check(fn=check)],
        "contract": lw.Contract(budget=lw.Budget(max_cycles=2)),
        **kw,
    }
    return lw.Loop(name="shapes", **given)


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        (lambda: lw.Check(fn=one_arg), "verifiers.one_arg", "one_arg(state) must take (state"),
        (lambda: _loop(verifiers=[one_arg]), "verifiers.one_arg", "must take (state, proposal)"),
        (lambda: _loop(actor=lambda: None), "actor", "<lambda>() must take (ctx)"),
        (lambda: _loop(actor=lambda *, ctx: None), "actor", "must take (ctx)"),
        (lambda: _loop(actor=lambda ctx, model: None), "actor", "missing a required argument"),
        (lambda: _loop(init=lambda: None), "init", "must take (task)"),
        (lambda: _loop(reflector=lambda ctx: None), "reflector", "must take (ctx, verdicts)"),
        (
            lambda: _loop(
                contract=lw.Contract(
                    budget=lw.Budget(max_cycles=2),
                    risk=(lw.RiskRule(name="pay", check=lambda state, proposal: None),),
                )
            ),
            "contract.risk.pay.check",
            "must take (state, proposal, verdicts)",
        ),
    ],
)
def test_a_callable_of_the_wrong_shape_is_refused_naming_it(
    make: Any, field: str, words: str
) -> None:
    with pytest.raises(lw.ConfigError) as err:
        make()
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_callables_the_engine_can_call_are_let_through() -> None:
    class Judge:
        def __call__(self, state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
            return lw.Verdict(passed=True)

    async def async_actor(ctx: lw.Context) -> lw.Proposal:
        return actor(ctx)

    loop = _loop(
        actor=functools.partial(lambda model, ctx: actor(ctx), "m"),
        verifiers=[
            Judge(),
            lw.Check(fn=lambda *args: lw.Verdict(passed=True), name="star"),
            lw.Check(fn=lambda s, p, extra=1: lw.Verdict(passed=True), name="defaults"),
        ],
        reflector=lambda ctx, verdicts, *more: None,
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=2),
            risk=(lw.RiskRule(name="pay", check=lambda state, proposal, verdicts: None),),
        ),
    )
    assert [c.name for c in loop.verifiers] == ["Judge", "star", "defaults"]
    assert _loop(actor=async_actor).actor is async_actor
    assert _loop(actor=print).actor is print  # a builtin's signature may not be readable


def test_loopwright_check_refuses_a_spec_whose_verifier_takes_one_argument(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(
        "import loopwright as lw\n"
        "def actor(ctx):\n    return lw.Proposal.edit('a', {'x': 1})\n"
        "def check(state):\n    return lw.Verdict(passed=True)\n"
    )
    (tmp_path / "loop.toml").write_text(
        'name = "s"\n[actor]\nref = "mod.py:actor"\n[[verifiers]]\nref = "mod.py:check"\n'
        "[contract.budget]\nmax_cycles = 2\n"
    )
    with pytest.raises(lw.ConfigError, match=r"check\(state\) must take \(state, proposal\)"):
        load_spec(tmp_path / "loop.toml")


def test_an_effect_hook_of_the_wrong_shape_is_refused_when_it_is_attached() -> None:
    """A reconciler is called only when a payment is in doubt after a crash: one of the wrong
    shape was found then, escalating the run it was meant to settle."""

    @lw.effect("spend", key=lambda a: a["invoice"])
    def pay(invoice: str, *, key: str) -> dict[str, str]:
        return {"id": key}

    for attach, hook, words in [
        (pay.reconciler, "reconcile", "paid(key, run) must take (key)"),
        (pay.compensation, "compensate", "must take (key, result, args)"),
        (pay.compensation_reconciler, "compensate_reconcile", "must take (key)"),
    ]:

        def paid(key: str, run: str) -> None:
            return None

        with pytest.raises(lw.ConfigError) as err:
            attach(paid)
        assert err.value.field == f"effects.pay.{hook}" and words in str(err.value)
    assert pay.reconcile_fn is pay.compensate_fn is pay.compensate_reconcile_fn is None
    with pytest.raises(lw.ConfigError, match=r"effects\.pay\.compensate: must be callable"):
        pay.compensation(5)  # type: ignore[arg-type]
    with pytest.raises(lw.ConfigError, match=r"effects\.refund\.key: <lambda>\(\) must take"):
        lw.effect("spend", name="refund", key=lambda: "k")(lambda *, key: None)
    assert pay.reconciler(lambda key: None) is pay.reconcile_fn
    assert pay.compensation(lambda key, result, args: None) is pay.compensate_fn


def _with_client(fn: Any) -> Any:
    """A decorator that supplies an argument: the wrapper takes (ctx), the function (ctx,
    client); ``functools.wraps`` makes the signature read the function's."""

    @functools.wraps(fn)
    def wrapper(ctx: lw.Context) -> Any:
        return fn(ctx, "client")

    return wrapper


def _logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def test_a_decorated_callable_is_judged_by_the_shape_it_is_called_with() -> None:
    """A decorator supplying the actor's client (``wrapper(ctx)`` calling ``fn(ctx, client)``)
    was refused for the wrapped function's two parameters, though the engine calls it with
    one; a pass-through wrapper (``*args, **kwargs``) still shows the wrapped function's."""

    @_with_client
    def client_actor(ctx: lw.Context, client: str) -> lw.Proposal:
        return actor(ctx)

    assert _loop(actor=client_actor).actor is client_actor
    with pytest.raises(lw.ConfigError, match=r"must take \(state, proposal\)"):
        lw.Check(fn=_logged(one_arg))
