"""Effect declarations: kinds, keys, calls, binding, and how a Loop accepts them."""

from __future__ import annotations

import datetime as dt
import functools
import math
import typing
from typing import Any

import pytest

import loopwright as lw


def _contract() -> lw.Contract:
    return lw.Contract(budget=lw.Budget(max_cycles=2))


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal()


def _ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


@lw.effect("spend")
def pay(invoice: str, amount: float) -> dict[str, Any]:
    return {"paid": invoice, "amount": amount}


# --- declaration ----------------------------------------------------------------------------
def test_decorator_builds_an_effect_with_its_options() -> None:
    pol = lw.RetryPolicy(attempts=2, backoff_s=0.0)

    def rec(key: str) -> None:
        return None

    @lw.effect(
        " publish ",
        name="post",
        idempotent=True,
        key=lambda a: a["slug"],
        reconcile=rec,
        requires_success=False,
        retry=pol,
        timeout_s=3,
    )
    def publish(slug: str) -> str:
        return slug

    assert isinstance(publish, lw.Effect)
    assert (publish.name, publish.kind, publish.idempotent) == ("post", "publish", True)
    assert publish.reconcile_fn is rec
    assert publish.requires_success is False
    assert publish.retry is pol
    assert publish.timeout_s == 3
    assert repr(publish) == "Effect('post', kind='publish', idempotent=True)"
    # defaults
    assert (pay.name, pay.idempotent, pay.requires_success) == ("pay", False, True)
    assert pay.retry is None
    assert pay.compensate_fn is None


@pytest.mark.parametrize("kind", ["", "   ", None, 5])
def test_an_effect_needs_a_kind(kind: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.effect(kind)(lambda: None)
    assert str(err.value.field).endswith(".kind")


def test_a_bare_effect_decorator_is_refused_where_it_is_written() -> None:
    """``@lw.effect`` without its kind (outside probe outside50a) took the function as the
    kind and returned the decorator: ``pay`` became a plain function, and the first
    ``pay.call(...)``, inside an actor, was an ``AttributeError``."""

    def pay(invoice: str, *, key: str) -> None: ...

    with pytest.raises(lw.ConfigError, match=r'@effect\("spend"\)') as err:
        lw.effect(pay)  # type: ignore[arg-type]
    assert err.value.field == "effects.pay.kind"
    assert "pay" in str(err.value)


def test_bad_timeout_and_non_callable() -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.effect("spend", timeout_s=0)(pay.fn)
    assert err.value.field == "effects.pay.timeout_s"
    with pytest.raises(lw.ConfigError):
        lw.Effect("not callable", kind="spend")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        # "false" was True: a non-idempotent effect left in doubt was run again
        ({"idempotent": "false"}, "idempotent"),
        ({"idempotent": 0}, "idempotent"),
        ({"requires_success": "no"}, "requires_success"),
        ({"timeout_s": "5"}, "timeout_s"),  # (TypeError)
        ({"timeout_s": math.nan}, "timeout_s"),  # a timeout that never fires
        ({"timeout_s": math.inf}, "timeout_s"),
        ({"timeout_s": True}, "timeout_s"),
        ({"key": 3}, "key"),
        ({"reconcile": "x"}, "reconcile"),
        ({"compensate": 5}, "compensate"),
        ({"describe": "x"}, "describe"),
        # how a compensation a crash interrupted is settled: "no" was taken as run it again
        ({"compensate_idempotent": "no"}, "compensate_idempotent"),
        ({"compensate_idempotent": 1}, "compensate_idempotent"),
        ({"compensate_reconcile": "x"}, "compensate_reconcile"),
        ({"retry": 3}, "retry"),
        ({"name": "a:b"}, "name"),  # the journal key "a:b:c" was also effect a's key "b:c"
        ({"name": 3}, "name"),
    ],
)
def test_odd_effect_settings_are_config_errors(kw: dict[str, Any], field: str) -> None:
    # an outside probe (probe42a): each was taken as given, or raised TypeError
    with pytest.raises(lw.ConfigError) as err:
        lw.effect("spend", **kw)(pay.fn)
    assert str(err.value.field).endswith(f".{field}")


def test_an_effect_may_not_take_a_compensations_name() -> None:
    # its runs were taken for compensations: never offered for reversal, nor listed
    eff = lw.effect("spend", name="pay.compensate")(pay.fn)
    with pytest.raises(lw.ConfigError, match="compensation") as err:
        lw.Loop(
            name="l",
            actor=lambda ctx: lw.Proposal(),
            verifiers=[lambda s, p: lw.Verdict(passed=True)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
            effects=[eff],
        )
    assert err.value.field == "effects.pay.compensate.name"


def test_hook_decorators_attach_and_return_the_function() -> None:
    eff = lw.effect("spend")(lambda invoice: invoice)

    @eff.reconciler
    def check(key: str) -> None:
        return None

    @eff.compensation
    def refund(key: str, result: Any, args: Any) -> None:
        return None

    @eff.compensation_reconciler
    def refunded(key: str) -> None:
        return None

    assert eff.reconcile_fn is check
    assert eff.compensate_fn is refund
    assert eff.compensate_reconcile_fn is refunded
    assert callable(check)
    assert callable(refund)
    with pytest.raises(lw.ConfigError) as err:
        eff.compensation_reconciler(3)  # type: ignore[arg-type]
    assert str(err.value.field).endswith(".compensate_reconcile")


def test_hook_decorators_keep_the_hooks_type_for_the_callers_checker() -> None:
    """Outside probe (pyapi47): ``@pay.reconciler`` returned ``Callable[[str], Any |
    Awaitable[Any]]``, so ``paid(key)`` lost its declared type under mypy, and the README's
    compensation (``args: dict``) was refused by ``mypy --strict``: its hook type said
    ``Mapping``, though the hook is handed a ``dict``. The decorators are generic in the
    function they return (a TypeVar bound by the hook's shape), and the shape says ``dict``."""

    for hook in (lw.Effect.reconciler, lw.Effect.compensation, lw.Effect.compensation_reconciler):
        hints = typing.get_type_hints(hook)
        assert isinstance(hints["fn"], typing.TypeVar), hook
        assert hints["return"] is hints["fn"], hook
    bound = typing.get_type_hints(lw.Effect.compensation)["fn"].__bound__
    assert typing.get_args(bound)[0][2] == dict[str, Any]

    seen: list[object] = []
    eff = lw.effect("spend")(lambda invoice: invoice)
    eff.compensation(lambda key, result, args: seen.append(args))
    from loopwright._reversal import _undo

    _undo(eff.compensate_fn, "k", None, {"invoice": "A"})
    assert seen == [{"invoice": "A"}] and type(seen[0]) is dict  # what the shape promises


def test_a_call_is_checked_against_the_effects_signature_when_asked_for() -> None:
    """Outside probe pyapi47: ``pay.call(inv="A")`` (no amount) or a misspelt argument was
    accepted, journaled and put before a person; only running it, after the approval, raised
    a TypeError. It is refused when the actor asks for it, naming the effect and the argument."""

    @lw.effect("spend", key=lambda a: a["inv"])
    def pay(inv: str, amount: float, *, key: str) -> None:
        return None

    assert pay.call(inv="A", amount=1.0).args == {"inv": "A", "amount": 1.0}
    assert pay.call(inv="A", amount=1.0, key="k").key == "k"  # key= is the call's own
    with pytest.raises(lw.ConfigError, match="missing a required argument: 'amount'") as err:
        pay.call(inv="A")
    assert err.value.field == "pay"
    with pytest.raises(lw.ConfigError, match="'amonut'"):
        pay.call(inv="A", amonut=1.0)

    @lw.effect("send")
    def post(**fields: Any) -> None:  # anything goes, as declared
        return None

    assert post.call(to="x", body="y").args == {"to": "x", "body": "y"}

    def injects(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(**kw: Any) -> Any:
            return fn(client="c", **kw)

        return wrapper

    @lw.effect("send")
    @injects
    def mail(client: str, to: str) -> None:
        return None

    assert mail.call(to="x").args == {"to": "x"}  # a decorator's own arguments: not checked


def test_a_compensation_is_settled_as_the_effect_declares() -> None:
    eff = lw.effect("spend", compensate_idempotent=True, compensate_reconcile=len)(pay.fn)
    assert (eff.compensate_idempotent, eff.compensate_reconcile_fn) == (True, len)
    plain = lw.effect("spend")(pay.fn)
    assert (plain.compensate_idempotent, plain.compensate_reconcile_fn) == (False, None)


# --- calls ----------------------------------------------------------------------------------
def test_call_builds_an_effect_call() -> None:
    c = pay.call(invoice="A-1", amount=12.5)
    assert c == lw.EffectCall("pay", {"invoice": "A-1", "amount": 12.5}, None)
    k = pay.call(invoice="A-1", amount=12.5, key="biz-1")
    assert k.key == "biz-1"
    assert "key" not in k.args
    assert lw.EffectCall.from_dict(k.to_dict()) == k


def test_call_rejects_arguments_that_cannot_be_serialised() -> None:
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(lw.ConfigError, match="JSON") as err:
        pay.call(invoice=circular, amount=1)
    assert err.value.field == "pay"


@pytest.mark.parametrize(
    "value", [{1, 2}, dt.datetime(2024, 1, 1, tzinfo=dt.UTC), object()], ids=["set", "dt", "obj"]
)
def test_call_rejects_non_json_values(value: Any) -> None:
    with pytest.raises(lw.ConfigError):
        pay.call(invoice=value, amount=1)


def test_canonical_is_order_independent() -> None:
    a = lw.EffectCall("pay", {"a": 1, "b": 2})
    b = lw.EffectCall("pay", {"b": 2, "a": 1})
    assert a.canonical() == b.canonical()
    assert a.canonical() != lw.EffectCall("pay", {"a": 1, "b": 3}).canonical()
    assert a.canonical() != lw.EffectCall("pay", {"a": 1, "b": 2}, "k").canonical()


# --- keys ---------------------------------------------------------------------------------------
def test_default_key_depends_on_run_cycle_and_args() -> None:
    c = pay.call(invoice="A-1", amount=10)
    base = pay.key_for("run1", 1, c)
    assert base.startswith("pay:")
    assert len(base) == len("pay:") + 24
    assert pay.key_for("run1", 1, pay.call(amount=10, invoice="A-1")) == base  # order-free
    assert pay.key_for("run2", 1, c) != base
    assert pay.key_for("run1", 2, c) != base
    assert pay.key_for("run1", 1, pay.call(invoice="A-1", amount=11)) != base
    other = lw.effect("spend", name="charge")(pay.fn)
    assert other.key_for("run1", 1, lw.EffectCall("charge", c.args)).startswith("charge:")


def test_key_fn_makes_a_business_key() -> None:
    eff = lw.effect("spend", key=lambda a: a["invoice"])(pay.fn)
    c1 = eff.call(invoice="A-1", amount=10)
    c2 = eff.call(invoice="A-1", amount=99)
    assert eff.key_for("r", 1, c1) == "pay:A-1"
    assert eff.key_for("other-run", 7, c2) == "pay:A-1"
    assert eff.key_for("r", 1, eff.call(invoice="B", amount=10)) == "pay:B"


def test_per_call_key_wins_over_key_fn_and_hash() -> None:
    eff = lw.effect("spend", key=lambda a: a["invoice"])(pay.fn)
    assert eff.key_for("r", 1, eff.call(invoice="A-1", amount=1, key="x9")) == "pay:x9"
    assert pay.key_for("r", 1, pay.call(invoice="A", amount=1, key="x9")) == "pay:x9"
    assert pay.key_for("r", 2, pay.call(invoice="B", amount=2, key="x9")) == "pay:x9"


# --- binding --------------------------------------------------------------------------------
def test_bind_passes_key_only_when_the_function_takes_it() -> None:
    seen: list[dict[str, Any]] = []

    def with_key(invoice: str, *, key: str) -> str:
        seen.append({"invoice": invoice, "key": key})
        return key

    def with_kwargs(**kw: Any) -> dict[str, Any]:
        seen.append(kw)
        return kw

    def without(invoice: str) -> str:
        seen.append({"invoice": invoice})
        return invoice

    assert lw.effect("spend")(with_key).bind({"invoice": "A"}, "pay:A")() == "pay:A"
    assert lw.effect("spend")(with_kwargs).bind({"invoice": "A"}, "k")() == {
        "invoice": "A",
        "key": "k",
    }
    assert lw.effect("spend")(without).bind({"invoice": "A"}, "k")() == "A"  # no TypeError
    assert seen == [
        {"invoice": "A", "key": "pay:A"},
        {"invoice": "A", "key": "k"},
        {"invoice": "A"},
    ]


def test_bind_with_a_partial_and_a_builtin() -> None:
    def base(prefix: str, invoice: str, key: str) -> str:
        return f"{prefix}{invoice}{key}"

    eff = lw.Effect(functools.partial(base, "p-"), kind="spend", name="partial")
    assert eff.bind({"invoice": "A"}, "K")() == "p-AK"
    # a callable without an inspectable signature is called without key=
    builtin = lw.Effect(dict, kind="notify", name="d")
    assert builtin.bind({"a": 1}, "K")() == {"a": 1}


def test_bind_copies_the_arguments() -> None:
    args = {"invoice": "A", "amount": 1}
    fn = pay.bind(args, "k")
    args["amount"] = 999
    assert fn() == {"paid": "A", "amount": 1}


def test_describe() -> None:
    assert pay.describe({"invoice": "A", "amount": 2}) == "spend: pay(invoice='A', amount=2)"
    eff = lw.effect("send", describe=lambda a: f"mail {a['to']}")(lambda to: to)
    assert eff.describe({"to": "bob"}) == "mail bob"


# --- loops ------------------------------------------------------------------------------------
def test_loop_accepts_effects_and_finds_them_by_name() -> None:
    other = lw.effect("notify", name="ping")(lambda: None)
    loop = lw.Loop(
        name="l", actor=_actor, verifiers=[_ok], contract=_contract(), effects=[pay, other]
    )
    assert loop.effects == (pay, other)
    assert loop.effect("ping") is other
    assert loop.effect("nope") is None


def test_loop_rejects_duplicate_effect_names() -> None:
    twin = lw.effect("spend", name="pay")(lambda: None)
    with pytest.raises(lw.ConfigError, match=r"unique: \['pay'\]") as err:
        lw.Loop(name="l", actor=_actor, verifiers=[_ok], contract=_contract(), effects=[pay, twin])
    assert err.value.field == "effects"


@pytest.mark.parametrize("bad", [pay.fn, "pay", pay.call(invoice="A", amount=1)])
def test_loop_rejects_non_effect_objects(bad: Any) -> None:
    with pytest.raises(lw.ConfigError, match="not an Effect") as err:
        lw.Loop(name="l", actor=_actor, verifiers=[_ok], contract=_contract(), effects=[pay, bad])
    assert err.value.field == "effects"


def test_loop_rejects_a_non_policy_and_a_non_retry() -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.Loop(name="l", actor=_actor, verifiers=[_ok], contract=_contract(), approvals=[])  # type: ignore[arg-type]
    assert err.value.field == "approvals"
    with pytest.raises(lw.ConfigError) as err:
        lw.Loop(
            name="l", actor=_actor, verifiers=[_ok], contract=_contract(), retry={"attempts": 2}
        )  # type: ignore[arg-type]
    assert err.value.field == "retry"


def test_proposal_digest_binds_the_effects() -> None:
    a = lw.Proposal(effects=(pay.call(invoice="A", amount=1),))
    b = lw.Proposal(effects=(pay.call(invoice="A", amount=2),))
    assert a.digest() != b.digest()
    assert a.digest() != lw.Proposal().digest()
    assert a.kind == "effects"
    assert lw.Proposal.from_dict(a.to_dict()) == a


@pytest.mark.parametrize("held_out", [(), (True,)])
def test_a_loop_without_a_visible_check_is_refused(held_out: tuple[bool, ...]) -> None:
    """Nothing could accept a proposal or show progress: every run spent its whole budget
    (``budget_cycles`` after max_cycles), with no word of why. A held-out check alone does
    not count: it never decides success."""
    checks = [lw.Check(fn=_ok, name="h", held_out=True) for _ in held_out]
    with pytest.raises(lw.ConfigError, match="at least one visible check") as err:
        lw.Loop(name="l", actor=_actor, verifiers=checks, contract=_contract())
    assert err.value.field == "verifiers"
    assert ("held-out" in str(err.value)) == bool(held_out)


def test_check_names_compensations_a_crash_would_leave_in_doubt() -> None:
    from loopwright.cli._check import review

    def answer(eff: lw.Effect) -> str:
        loop = lw.Loop(
            name="l",
            actor=lambda ctx: lw.Proposal(),
            verifiers=[lambda s, p: lw.Verdict(passed=True)],
            contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
            effects=[eff],
        )
        (found,) = [a for a in review(loop) if a["question"].startswith("What can it do")]
        return found["answer"]

    refund = lambda key, result, args: None  # noqa: E731
    bare = lw.effect("spend", idempotent=True, compensate=refund)(pay.fn)
    assert "the compensations of pay have neither" in answer(bare)  # a name, not ['pay']
    risky = lw.effect("spend", compensate=refund)(pay.fn)  # neither idempotent nor reconciled
    assert "; pay: neither a reconcile hook nor idempotent=True" in answer(risky)
    assert "['" not in answer(risky)
    dedup = lw.effect("spend", idempotent=True, compensate=refund, compensate_idempotent=True)
    assert "compensations of" not in answer(dedup(pay.fn))
    asked = lw.effect("spend", idempotent=True, compensate=refund, compensate_reconcile=len)
    assert "compensations of" not in answer(asked(pay.fn))


def test_an_effect_may_take_an_argument_named_self() -> None:
    """``Effect.call``'s own ``self`` is positional-only: an effect with a parameter named
    ``self`` (a method's name reused) got "multiple values for argument 'self'" (probe47b)."""

    @lw.effect("note")
    def note(self: str, text: str) -> None:
        return None

    call = note.call(self="a", text="b")
    assert (call.name, dict(call.args)) == ("note", {"self": "a", "text": "b"})
