"""The approval policy: rule matching, ordering, defaults, spec loading and explanations."""

from __future__ import annotations

import math
from typing import Any

import pytest

import loopwright as lw
from loopwright._policy import PolicyDecision

R = lw.PolicyRule
P = lw.ApprovalPolicy


# --- defaults ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", lw.EFFECT_KINDS)
def test_builtin_kinds_need_approval_without_a_rule(kind: str) -> None:
    d = P().decide(kind, "x", {})
    assert d == PolicyDecision("require", None, d.why)
    assert kind in d.why
    assert P().match(kind, "x", {}) is None


@pytest.mark.parametrize("kind", ["archive", "notify_slack", "Spend"])
def test_custom_kinds_are_allowed_without_a_rule(kind: str) -> None:
    d = P().decide(kind, "x", {"amount": 10**9})
    assert d.action == "allow"
    assert d.rule is None
    assert kind in d.why


def test_an_unmatched_rule_falls_back_to_the_kind_default() -> None:
    policy = P((R(kind="send", action="allow"),))
    assert policy.decide("spend", "pay", {}).action == "require"
    assert policy.decide("send", "mail", {}).action == "allow"


# --- matching and ordering -------------------------------------------------------------------
def test_first_matching_rule_wins() -> None:
    policy = P(
        (
            R(kind="spend", action="deny", name="huge", above=10_000),
            R(kind="spend", action="require", name="big", above=100),
            R(kind="spend", action="allow", name="small"),
        )
    )
    assert policy.decide("spend", "pay", {"amount": 50}).rule == "small"
    assert policy.decide("spend", "pay", {"amount": 100}).rule == "small"  # not above
    assert policy.decide("spend", "pay", {"amount": 100.01}).action == "require"
    assert policy.decide("spend", "pay", {"amount": 20_000}).action == "deny"
    # the same rules in another order decide differently
    flipped = P(tuple(reversed(policy.rules)))
    assert flipped.decide("spend", "pay", {"amount": 20_000}).rule == "small"


def test_wildcard_kind_and_effect_glob() -> None:
    policy = P(
        (
            R(kind="*", action="deny", effect="wire_*"),
            R(kind="spend", action="allow", effect="pay"),
        )
    )
    assert policy.decide("spend", "wire_out", {}).action == "deny"
    assert policy.decide("custom", "wire_in", {}).action == "deny"
    assert policy.decide("spend", "pay", {}).action == "allow"
    # the glob is case-sensitive and anchored
    assert policy.decide("spend", "payroll", {}).rule is None
    assert policy.decide("spend", "Wire_out", {}).rule is None


@pytest.mark.parametrize(
    ("args", "hit"),
    [
        ({"amount": 5}, False),
        ({"amount": 500}, True),
        ({"amount": True}, True),  # a bool is not a number: cannot be shown to be small
        ({}, True),  # missing
        ({"amount": "5"}, True),  # non-numeric
        ({"amount": None}, True),
        ({"amount": math.inf}, True),
    ],
)
def test_above_with_missing_or_non_numeric_field_matches(args: dict[str, Any], hit: bool) -> None:
    rule = R(kind="spend", action="require", above=100)
    assert rule.matches("spend", "pay", args) is hit


def test_above_with_nan_amount_matches() -> None:
    # NaN compares False with everything: it must not pass for "not above the threshold"
    policy = P(
        (
            R(kind="spend", action="require", above=100),
            R(kind="spend", action="allow"),
        )
    )
    assert policy.decide("spend", "pay", {"amount": math.nan}).action == "require"


def test_field_and_outside() -> None:
    rule = R(kind="publish", action="require", field="target", outside=("blog", "docs"))
    assert not rule.matches("publish", "post", {"target": "blog"})
    assert rule.matches("publish", "post", {"target": "twitter"})
    assert rule.matches("publish", "post", {})  # a missing target is not an approved one
    qty = R(kind="spend", action="deny", field="qty", above=3)
    assert qty.matches("spend", "buy", {"qty": 4, "amount": 1})
    assert not qty.matches("spend", "buy", {"qty": 2, "amount": 1_000})


def test_outside_accepts_a_lone_string_and_lists() -> None:
    assert R(kind="publish", action="allow", outside="blog").outside == ("blog",)  # type: ignore[arg-type]
    assert R(kind="publish", action="allow", outside=["a", "b"]).outside == ("a", "b")  # type: ignore[arg-type]


def test_when_condition_and_a_failing_condition_requires_approval() -> None:
    policy = P(
        (
            R(kind="send", action="deny", name="no-ceo", when=lambda a: a["to"] == "ceo"),
            R(kind="send", action="allow"),
        )
    )
    assert policy.decide("send", "mail", {"to": "ceo"}).action == "deny"
    assert policy.decide("send", "mail", {"to": "team"}).action == "allow"
    d = policy.decide("send", "mail", {})  # KeyError inside the condition
    assert d.action == "require"
    assert d.rule == "no-ceo"
    assert "could not be evaluated" in d.why


def test_decision_carries_the_rule_expiry() -> None:
    policy = P((R(kind="spend", action="require", expires_after_s=30),))
    assert policy.decide("spend", "pay", {}).expires_after_s == 30


# --- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "", "action": "allow"}, ".kind"),
        ({"kind": "spend", "action": "maybe"}, "approvals.spend.action"),
        ({"kind": "spend", "action": "allow", "above": "100"}, "approvals.spend.above"),
        ({"kind": "spend", "action": "allow", "above": True}, "approvals.spend.above"),
        ({"kind": "spend", "action": "allow", "outside": [1]}, "approvals.spend.outside"),
        ({"kind": "spend", "action": "allow", "when": 3}, "approvals.spend.when"),
        ({"kind": "spend", "action": "allow", "expires_after_s": 0}, ".expires_after_s"),
        ({"kind": "spend", "action": "allow", "expires_after_s": True}, ".expires_after_s"),
        # not finite (the spec loader refuses these; Python took them): a "require above
        # NaN" rule never matched, so a payment fell through to the next rule's allow
        ({"kind": "spend", "action": "require", "above": math.nan}, "approvals.spend.above"),
        ({"kind": "spend", "action": "require", "above": math.inf}, "approvals.spend.above"),
        ({"kind": "spend", "action": "allow", "expires_after_s": math.nan}, ".expires_after_s"),
        ({"kind": "spend", "action": "allow", "expires_after_s": math.inf}, ".expires_after_s"),
    ],
)
def test_rule_validation_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(lw.ConfigError) as err:
        R(**kwargs)
    assert str(err.value.field).startswith("approvals.")
    if field.startswith("."):
        assert str(err.value.field).endswith(field)
    else:
        assert err.value.field == field


def test_default_rule_name_and_duplicate_names() -> None:
    assert R(kind="spend", action="deny").name == "spend-deny"
    with pytest.raises(lw.ConfigError, match="unique") as err:
        P((R(kind="spend", action="deny"), R(kind="spend", action="deny", above=5)))
    assert err.value.field == "approvals"


# --- from_rules --------------------------------------------------------------------------------
def test_from_rules_builds_rules_in_order() -> None:
    policy = P.from_rules(
        [
            {"kind": "spend", "action": "require", "above": 100, "expires_after_s": 60},
            {"kind": "publish", "action": "deny", "field": "target", "outside": ["blog"]},
            {"kind": "spend", "action": "allow", "name": "small", "effect": "pay*"},
        ]
    )
    assert [r.name for r in policy.rules] == ["spend-require", "publish-deny", "small"]
    assert policy.rules[1].outside == ("blog",)
    assert policy.decide("spend", "pay", {"amount": 150}).expires_after_s == 60
    assert policy.decide("spend", "pay_now", {"amount": 1}).rule == "small"
    assert P.from_rules(None).rules == ()
    assert P.from_rules([]).rules == ()


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ({"kind": "spend", "action": "allow"}, "approvals"),
        ("spend", "approvals"),
        ([{"kind": "spend", "action": "allow"}, "x"], "approvals[1]"),
        ([{"kind": "spend", "action": "allow", "amount": 5}], "approvals[0].amount"),
        ([{"kind": "spend", "action": "allow", "when": "x"}], "approvals[0].when"),
        ([{"action": "allow"}], "approvals[0]"),
        ([{"kind": "spend"}], "approvals[0]"),
    ],
)
def test_from_rules_errors_name_the_field(rules: Any, field: str) -> None:
    with pytest.raises(lw.ConfigError) as err:
        P.from_rules(rules)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_from_rules_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(lw.ConfigError, match="expected one of") as err:
        P.from_rules([{"kind": "spend", "action": "allow", "limit": 5}])
    assert "'above'" in str(err.value)
    assert "'when'" not in str(err.value)  # code cannot come from a spec


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ([{"kind": "spend", "action": "bogus"}], "approvals[0].action"),
        (
            [
                {"kind": "spend", "action": "allow"},
                {"kind": "spend", "action": "deny", "above": "x"},
            ],
            "approvals[1].above",
        ),
        ([{"kind": "", "action": "allow"}], "approvals[0].kind"),
        ([{"kind": "send", "action": "allow", "outside": [1, 2]}], "approvals[0].outside"),
        (
            [{"kind": "send", "action": "allow", "expires_after_s": -1}],
            "approvals[0].expires_after_s",
        ),
    ],
)
def test_from_rules_value_errors_name_the_table_index(rules: Any, field: str) -> None:
    # several rules may share a kind: the table's index says which one is wrong
    with pytest.raises(lw.ConfigError) as err:
        P.from_rules(rules)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert str(err.value).count(field) == 1


# --- explain ----------------------------------------------------------------------------------
def test_explain_says_what_and_which_rule() -> None:
    rule = R(kind="spend", action="require", name="big-pay", above=100)
    text = rule.explain("spend", {"amount": 250})
    assert text == "spend effects with amount 250 above 100 need approval (rule big-pay)"
    out = R(kind="publish", action="deny", field="target", outside=("blog",))
    assert out.explain("publish", {"target": "x"}) == (
        "publish effects with target 'x' outside ['blog'] are denied (rule publish-deny)"
    )
    assert (
        R(kind="*", action="allow").explain("send", {}) == "send effects are allowed (rule *-allow)"
    )


def test_explain_prefers_the_rule_reason_and_decide_uses_it() -> None:
    rule = R(kind="spend", action="require", reason="finance signs off")
    assert rule.explain("spend", {"amount": 1}) == "finance signs off"
    assert P((rule,)).decide("spend", "pay", {}).why == "finance signs off"


def test_to_list_round_trips_through_from_rules() -> None:
    policy = P(
        (
            R(kind="spend", action="require", above=100, expires_after_s=5),
            R(kind="publish", action="deny", field="target", outside=("blog",)),
        )
    )
    listed = policy.to_list()
    assert listed[0]["above"] == 100
    assert listed[1]["outside"] == ["blog"]
    rebuilt = P.from_rules([{k: v for k, v in r.items() if k != "when"} for r in listed])
    assert rebuilt == policy


# --- rules that could never apply, and odd values (an outside probe, probe42a) ---------------
def _deploy_loop(*rules: lw.PolicyRule) -> lw.Loop:
    deploy = lw.effect("deploy", name="deploy_prod")(lambda target: "ok")
    return lw.Loop(
        name="d",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lambda s, p: lw.Verdict(passed=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        effects=[deploy],
        approvals=P(rules),
    )


@pytest.mark.parametrize(
    ("rule", "field", "said"),
    [
        (R(kind="Deploy", action="deny"), "approvals.Deploy-deny.kind", "kind 'Deploy'"),
        (R(kind=" deploy", action="require"), "approvals. deploy-require.kind", "' deploy'"),
        (
            R(kind="deploy", effect="deploy-prod", action="deny"),
            "approvals.deploy-deny.effect",
            "named 'deploy-prod' (its effects: deploy_prod)",
        ),
        (
            R(kind="*", effect="deploy", action="deny"),
            "approvals.*-deny.effect",
            "named 'deploy'",
        ),
    ],
)
def test_a_rule_that_could_never_apply_to_the_loops_effects_is_refused(
    rule: lw.PolicyRule, field: str, said: str
) -> None:
    # A deny with a typo in its kind or effect never matched: the deploy ran, no one asked.
    with pytest.raises(lw.ConfigError, match="would never apply") as err:
        _deploy_loop(rule)
    assert err.value.field == field
    assert said in str(err.value)


def test_rules_that_can_apply_are_kept() -> None:
    loop = _deploy_loop(
        R(kind="deploy", effect="deploy_prod", action="require", name="a"),
        R(kind="deploy", effect="deploy_prod.compensate", action="allow", name="b"),
        R(kind="*", effect="wire_*", action="deny", name="c"),  # a guard for effects to come
        R(kind="spend", action="require", name="d"),  # a built-in kind
        R(kind="overwrite_accepted", action="require", name="e"),
    )
    assert [r.name for r in loop.approvals.rules] == ["a", "b", "c", "d", "e"]
    # a loop with no effects runs none: its rules are not asked about them
    no_effects = lw.Loop(
        name="n",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lambda s, p: lw.Verdict(passed=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        approvals=P((R(kind="deploy", action="deny"),)),
    )
    assert no_effects.approvals.rules[0].kind == "deploy"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"above": 10**400}, "above"),  # (OverflowError from math.isfinite)
        ({"field": 3}, "field"),
        ({"field": ""}, "field"),
        ({"effect": 3}, "effect"),
        ({"effect": ""}, "effect"),
        ({"name": 3}, "name"),
        ({"reason": 5}, "reason"),
    ],
)
def test_odd_rule_values_are_config_errors(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(lw.ConfigError) as err:
        R(kind="spend", action="require", **kw)
    assert str(err.value.field).endswith(f".{field}")


@pytest.mark.parametrize("field", [3, "", None])
def test_an_earned_authoritys_field_is_text(field: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.EarnedAuthority(kind="spend", after=1, up_to=5, field=field)
    assert err.value.field == "authority.spend.field"


@pytest.mark.parametrize("role", ["Finance", "fin ance", "finance!", " finance", 3])
def test_a_rule_role_no_user_could_hold_is_refused(role: Any) -> None:
    # an outside probe (probe42a): roles are stored lower-cased ("users add --role Finance"
    # holds "finance"), so a rule naming "Finance" could never be satisfied, which showed only
    # when a person tried to approve its request
    with pytest.raises(lw.ConfigError) as err:
        R(kind="spend", action="require", role=role)
    assert err.value.field == "approvals.spend.role"
    assert R(kind="spend", action="require", role="finance.eu-1").role == "finance.eu-1"
