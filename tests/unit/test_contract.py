"""Contract validation: every invalid contract is refused with a message naming the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwright as lw
from loopwright._contract import status_for


def _err(fn: Any, *args: Any, **kwargs: Any) -> lw.ConfigError:
    with pytest.raises(lw.ConfigError) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_cycles": -1}, "contract.budget.max_cycles"),
        ({"max_cost_usd": -0.01}, "contract.budget.max_cost_usd"),
        ({"max_tokens": -5}, "contract.budget.max_tokens"),
        ({"max_seconds": -1.0}, "contract.budget.max_seconds"),
        ({"max_seconds": math.nan}, "contract.budget.max_seconds"),
        ({"max_cycles": 0}, "contract.budget.max_cycles"),
        ({"max_cycles": 2.5}, "contract.budget.max_cycles"),
        ({"max_tokens": True}, "contract.budget.max_tokens"),
        ({"max_cost_usd": "3"}, "contract.budget.max_cost_usd"),
    ],
)
def test_bad_budget_names_field(kwargs: dict[str, Any], field: str) -> None:
    err = _err(lw.Budget, **kwargs)
    assert err.field == field
    assert field in str(err)


def test_negative_budget_from_dict_names_field() -> None:
    err = _err(lw.Contract.from_dict, {"budget": {"max_cost_usd": -3}})
    assert "contract.budget.max_cost_usd" in str(err)
    assert "negative" in str(err)


def test_unknown_key_names_the_full_path() -> None:
    err = _err(lw.Contract.from_dict, {"budget": {"max_cycle": 3}})
    assert err.field == "contract.budget.max_cycle"
    assert "contract.budget.max_cycle" in str(err)
    assert "max_cycles" in str(err)  # the message lists what was expected


def test_unknown_top_level_key() -> None:
    err = _err(lw.Contract.from_dict, {"budget": {"max_cycles": 1}, "sucess": {}})
    assert err.field == "contract.sucess"


def test_marginal_return_needs_its_value() -> None:
    err = _err(lw.Contract.from_dict, {"budget": {"max_cycles": 1}, "marginal_return": {}})
    assert err.field == "contract.marginal_return"


def test_marginal_return_round_trips_and_estimates_from_its_table() -> None:
    c = lw.Contract.from_dict(
        {
            "marginal_return": {
                "value_per_success_usd": 2.0,
                "hazard": [[[3, 4], [0, 5]], [[1, 10]]],
            }
        }
    )
    mr = c.marginal_return
    assert mr is not None
    assert mr.p_success(1, 0) == pytest.approx((3 + 1) / (4 + 4))
    assert mr.p_success(1, 7) == pytest.approx((0 + 1) / (5 + 4))  # last column stands for more
    assert mr.p_success(9, 0) == pytest.approx((1 + 1) / (10 + 4))  # last row for later cycles
    assert lw.Contract.from_dict(c.to_dict()) == c
    bad = _err(
        lw.Contract.from_dict,
        {"marginal_return": {"value_per_success_usd": 1, "hazard": [[[5, 2]]]}},
    )
    assert bad.field == "contract.marginal_return.hazard"


@pytest.mark.parametrize("cell", [[1.5, 2], [True, 2], [1, 2, 3], ["1", 2]])
def test_a_hazard_count_that_is_not_a_whole_number_is_refused(cell: list[Any]) -> None:
    """int() read 1.5 as 1 and true as 1, and a third number was dropped: the table the run
    used was not the one written."""
    bad = _err(
        lw.Contract.from_dict,
        {"marginal_return": {"value_per_success_usd": 1, "hazard": [[cell]]}, "budget": {}},
    )
    assert bad.field == "contract.marginal_return.hazard"
    # whole numbers written as floats (a JSON tool's) still read
    c = lw.Contract.from_dict(
        {"marginal_return": {"value_per_success_usd": 1, "hazard": [[[1.0, 2.0]]]}}
    )
    assert c.marginal_return is not None and c.marginal_return.hazard == (((1, 2),),)


@pytest.mark.parametrize("reason", [5, ["why"]])
def test_a_risk_rules_reason_must_be_text(reason: Any) -> None:
    """The reason is the approval request's "why": a number or a list was stored as its
    repr instead of being named as the mistake."""
    bad = _err(
        lw.Contract.from_dict,
        {
            "risk": [{"name": "n", "touches": "doc/*", "reason": reason}],
            "budget": {"max_cycles": 1},
        },
    )
    assert bad.field == "contract.risk.n.reason"
    # a snapshot's null still loads: no reason of its own
    rule = lw.Contract.from_dict(
        {"risk": [{"name": "n", "touches": "doc/*", "reason": None}], "budget": {"max_cycles": 1}}
    ).risk[0]
    assert rule.reason == ""


def test_marginal_return_alone_is_an_exit() -> None:
    c = lw.Contract.from_dict({"marginal_return": {"value_per_success_usd": 1.0}})
    assert c.marginal_return is not None and c.marginal_return.p_success(3, 1) == 0.2


@pytest.mark.parametrize("score", [-0.1, 1.01, 2, math.nan, math.inf])
def test_min_score_outside_unit_interval(score: float) -> None:
    err = _err(lw.Success, min_score=score)
    assert err.field == "contract.success.min_score"
    err = _err(
        lw.Contract.from_dict, {"success": {"min_score": score}, "budget": {"max_cycles": 1}}
    )
    assert "contract.success.min_score" in str(err)


def test_no_exit_at_all_is_refused() -> None:
    err = _err(lw.Contract)
    assert err.field == "contract.budget"
    assert "no exit" in str(err)
    _err(lw.Contract.from_dict, {})
    _err(lw.Contract.from_dict, {"success": {"min_score": 0.5}})


@pytest.mark.parametrize(
    "exit_",
    [
        {"no_progress": lw.NoProgress()},
        {"budget": lw.Budget(max_seconds=1)},
        {"marginal_return": lw.MarginalReturn(value_per_success_usd=1.0)},
    ],
    ids=lambda e: next(iter(e)),
)
def test_one_exit_is_enough(exit_: dict[str, Any]) -> None:
    c = lw.Contract(**exit_)
    [(name, given)] = exit_.items()
    assert getattr(c, name) is given
    exits = [c.no_progress is not None, c.budget.bounded, c.marginal_return is not None]
    assert exits.count(True) == 1  # the only exit the contract has


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"risk": [{"name": "r"}]}, "contract.risk.r"),  # no trigger at all
        ({"risk": [{"touches": ["a/*"]}]}, "contract.risk[0]"),  # no name
        ({"risk": [{"name": "r", "touches": ["a/*"], "colour": 1}]}, "contract.risk[0].colour"),
        ({"risk": {"name": "r", "touches": ["a/*"]}}, "contract.risk"),  # a table, not an array
        ({"risk": ["oops"]}, "contract.risk[0]"),
        ({"risk": [{"name": "r", "touches": [1]}]}, "contract.risk.r.touches"),
        ({"risk": [{"name": "r", "check": 5}]}, "contract.risk.r.check"),
        (
            {"risk": [{"name": "r", "touches": ["a"]}, {"name": "r", "findings": ["x"]}]},
            "contract.risk",
        ),
        (
            {"risk": [{"name": "r", "touches": ["a"], "expires_after_s": -1}]},
            "contract.risk.r.expires_after_s",
        ),
    ],
)
def test_bad_risk_rule(data: dict[str, Any], field: str) -> None:
    err = _err(lw.Contract.from_dict, {"budget": {"max_cycles": 3}, **data})
    assert err.field == field, str(err)


def test_a_lone_pattern_string_is_one_pattern_not_characters() -> None:
    # Iterating "invoice/total" would give "i", "n", ... and a "*" would match every part.
    rule = lw.RiskRule(name="pay", touches="invoice/*")  # type: ignore[arg-type]
    assert rule.touches == ("invoice/*",)
    c = lw.Contract.from_dict(
        {
            "budget": {"max_cycles": 1},
            "success": {"required": "fields"},
            "risk": [{"name": "pay", "touches": "invoice/payment"}],
        }
    )
    assert c.success.required == ("fields",)
    assert c.risk[0].touches == ("invoice/payment",)


def test_section_must_be_a_table() -> None:
    assert _err(lw.Contract.from_dict, {"budget": 3}).field == "contract.budget"
    assert _err(lw.Contract.from_dict, [1, 2]).field == "contract"  # type: ignore[arg-type]


def test_accept_parts_values() -> None:
    assert _err(lw.Success, accept_parts="sometimes").field == "contract.success.accept_parts"  # type: ignore[arg-type]


def test_no_progress_validation() -> None:
    assert _err(lw.NoProgress, cycles=0).field == "contract.no_progress.cycles"
    assert _err(lw.NoProgress, min_delta=-0.1).field == "contract.no_progress.min_delta"


FULL = {
    "success": {"min_score": 0.9, "required": ["fields", "evidence"], "accept_parts": "on_success"},
    "no_progress": {"cycles": 3, "min_delta": 0.05},
    "budget": {"max_cycles": 6, "max_cost_usd": 3.0, "max_tokens": 10000, "max_seconds": 90.0},
    "risk": [
        {
            "name": "payment",
            "touches": ["invoice/payment"],
            "reason": "money moves",
            "expires_after_s": 3600.0,
        },
        {"name": "conflict", "findings": ["conflicting_evidence"]},
    ],
    "escalation": {"owner": "ap-team", "route": "queue:ap", "recommended_action": "call them"},
}


def test_round_trip_from_dict_to_dict() -> None:
    c = lw.Contract.from_dict(FULL)
    d = c.to_dict()
    assert lw.Contract.from_dict(d) == c
    assert d["budget"] == FULL["budget"]
    assert d["success"]["required"] == ["fields", "evidence"]
    assert d["risk"][0]["touches"] == ["invoice/payment"]
    assert d["escalation"]["owner"] == "ap-team"


def test_to_dict_names_callable_checks() -> None:
    def big_payment(state: Any, proposal: Any, verdicts: Any) -> str | None:
        return None

    c = lw.Contract(
        budget=lw.Budget(max_cycles=1), risk=(lw.RiskRule(name="r", check=big_payment),)
    )
    ref = c.to_dict()["risk"][0]["check"]
    assert isinstance(ref, str)
    assert ref.endswith("big_payment")


def test_status_for_every_reason() -> None:
    assert status_for("success") == "accepted"
    assert status_for("escalated") == "escalated"
    assert status_for("cancelled") == "cancelled"
    assert status_for("error") == "failed"
    for r in ("no_progress", "budget_cycles", "budget_cost", "budget_tokens", "budget_time"):
        assert status_for(r) == "stopped"
    assert set(lw.STOP_REASONS) >= {"success", "no_progress", "marginal_return", "error"}


# --- properties -------------------------------------------------------------------------
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6))


@given(numbers)
def test_min_score_valid_iff_in_unit_interval(x: float) -> None:
    ok = not math.isnan(x) and 0 <= x <= 1
    if ok:
        assert lw.Success(min_score=x).min_score == x
    else:
        with pytest.raises(lw.ConfigError, match=r"contract\.success\.min_score"):
            lw.Success(min_score=x)


@given(st.integers(-1000, 1000))
def test_max_cycles_valid_iff_positive(n: int) -> None:
    if n >= 1:
        assert lw.Budget(max_cycles=n).max_cycles == n
    else:
        with pytest.raises(lw.ConfigError, match=r"contract\.budget\.max_cycles"):
            lw.Budget(max_cycles=n)


@given(st.sampled_from(["max_cost_usd", "max_seconds"]), numbers)
def test_float_budgets_valid_iff_not_negative(name: str, x: float) -> None:
    if math.isfinite(x) and x >= 0:  # no limit is None: inf and NaN are refused
        assert getattr(lw.Budget(**{name: x}), name) == x
    else:
        with pytest.raises(lw.ConfigError, match=rf"contract\.budget\.{name}"):
            lw.Budget(**{name: x})


@given(
    st.builds(
        dict,
        max_cycles=st.integers(1, 100),
        max_cost_usd=st.floats(0, 1e6, allow_nan=False),
        max_tokens=st.integers(0, 10**9),
        max_seconds=st.floats(0, 1e6, allow_nan=False),
    ),
    st.floats(0, 1),
    st.integers(1, 10),
    st.floats(0, 1),
)
def test_round_trip_property(
    budget: dict[str, Any], min_score: float, cycles: int, delta: float
) -> None:
    data = {
        "budget": budget,
        "success": {"min_score": min_score},
        "no_progress": {"cycles": cycles, "min_delta": delta},
    }
    c = lw.Contract.from_dict(data)
    assert lw.Contract.from_dict(c.to_dict()) == c
    assert c.to_dict()["budget"] == budget


def test_from_dict_refuses_the_engine_mark_a_snapshot_loader_keeps_it() -> None:
    """The default ceiling's mark is the engine's: the public ``Contract.from_dict`` refuses it
    as ``Budget(...)`` does (it ran inside the engine's marks, so a caller's table passed);
    the engine's own loader of a run's snapshot keeps it."""
    marked = {
        "budget": {
            "max_cost_usd": 1.0,
            "max_cycles": 1000,
            "max_cycles_default": True,
        }
    }
    err = _err(lw.Contract.from_dict, marked)
    assert err.field == "contract.budget.max_cycles_default"
    from loopwright._contract import DEFAULT_MAX_CYCLES, contract_from_snapshot

    snap = lw.Contract(budget=lw.Budget(max_cost_usd=1.0)).with_default_ceiling().to_dict()
    assert snap["budget"]["max_cycles_default"] is True
    _err(lw.Contract.from_dict, snap)
    loaded = contract_from_snapshot(snap)
    assert (loaded.budget.max_cycles, loaded.budget.max_cycles_default) == (
        DEFAULT_MAX_CYCLES,
        True,
    )
    assert contract_from_snapshot(snap).to_dict() == snap  # the round trip a resume needs
    plain = lw.Contract.from_dict({"budget": {"max_cycles": 3, "max_cycles_default": False}})
    assert plain.budget.max_cycles_default is False
