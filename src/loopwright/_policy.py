"""The approval policy: which effects run freely, which need a person, which never run.

Rules are checked in order; the first that matches decides. Without a matching rule the five
built-in sensitive kinds (``publish``, ``spend``, ``send``, ``overwrite_accepted``,
``share_private``) need approval and a kind of your own is allowed — a new sensitive action is
never silently permitted. Edits that touch accepted parts are checked as kind
``overwrite_accepted``; with no rule for that kind they are refused (invariant 6, docs/concepts.md) and
the actor is told why.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import _shapes as shapes
from ._effects import EFFECT_KINDS
from ._errors import ConfigError

__all__ = ["Action", "ApprovalPolicy", "EarnedAuthority", "PolicyDecision", "PolicyRule"]

Action = Literal["allow", "require", "deny"]
#: A role's name as users hold it (``loopwright users add --role`` stores it lower-cased).
ROLE_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,39}")
_ACTIONS = ("allow", "require", "deny")
Condition = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyRule:
    """One rule: for effects of ``kind`` (``"*"`` for any) meeting every given condition, take
    ``action``.

    Attributes:
        kind: an effect kind, or ``"*"`` for any kind except ``overwrite_accepted``, which
            only a rule naming it can allow (accepted work stays protected by default).
        action: ``allow``, ``require`` (park for a person's approval) or ``deny`` (escalate).
        name: shown in requests and packets; defaults to ``"<kind>-<action>"``.
        effect: only effects with this name (glob).
        field: the argument the numeric / list conditions read (default ``amount``).
        above: matches when ``args[field] > above``.
        outside: matches when ``args[field]`` is not in this list (``publish`` outside
            approved targets).
        when: a callable ``args -> bool`` for anything else.
        reason: why, in words, for the approval request.
        expires_after_s: a request this rule raises expires (and escalates) after this long.
        role: only a person holding this role (as well as ``approver``) may decide a request
            this rule raises (docs/permissions.md).
        approvers: how many distinct people must approve (a denial by any one is final).
        separate: separation of duties — the person who started the run or edited its parts
            cannot decide. Implied by ``approvers`` of 2 or more.
    """

    kind: str
    action: Action
    name: str = ""
    effect: str | None = None
    field: str = "amount"
    above: float | None = None
    outside: tuple[str, ...] | None = None
    when: Condition | None = None
    reason: str = ""
    expires_after_s: float | None = None
    role: str | None = None
    approvers: int = 1
    separate: bool = False

    def __post_init__(self) -> None:
        where = f"approvals.{self.name or self.kind}"
        if self.role is not None and (
            not isinstance(self.role, str) or not ROLE_NAME.fullmatch(self.role)
        ):
            # "Finance" named a role no user can hold (roles are stored lower-cased): its
            # requests could never be approved, which showed only when someone tried
            raise ConfigError(
                f"must be a role name (lower-case letters, digits, '_', '.', '-'), got "
                f"{self.role!r}",
                field=f"{where}.role",
            )
        if (
            isinstance(self.approvers, bool)
            or not isinstance(self.approvers, int)
            or not 1 <= self.approvers <= 10
        ):
            raise ConfigError(
                f"must be a whole number from 1 to 10, got {self.approvers!r}",
                field=f"{where}.approvers",
            )
        if not isinstance(self.separate, bool):
            raise ConfigError("must be true or false", field=f"{where}.separate")
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError("every rule needs a kind ('*' for any)", field=f"{where}.kind")
        if self.action not in _ACTIONS:
            raise ConfigError(
                f"must be one of {list(_ACTIONS)}, got {self.action!r}", field=f"{where}.action"
            )
        if not self.name:
            object.__setattr__(self, "name", f"{self.kind}-{self.action}")
        for attr in ("name", "field", "reason"):
            value = getattr(self, attr)
            if not isinstance(value, str) or (attr == "field" and not value):
                raise ConfigError(f"must be text, got {value!r}", field=f"{where}.{attr}")
        if self.effect is not None and (not isinstance(self.effect, str) or not self.effect):
            raise ConfigError(
                f"must be an effect name or pattern, got {self.effect!r}", field=f"{where}.effect"
            )
        if self.above is not None and (
            isinstance(self.above, bool) or not isinstance(self.above, int | float)
        ):
            raise ConfigError(f"must be a number, got {self.above!r}", field=f"{where}.above")
        if self.above is not None and not _finite(self.above):
            # NaN compares false to every amount: a "require above NaN" rule never matched,
            # and the payment fell through to the next rule (an allow) with no one asked
            raise ConfigError(f"must be a finite number, got {self.above}", field=f"{where}.above")
        if self.outside is not None:
            vals = (self.outside,) if isinstance(self.outside, str) else self.outside
            if not isinstance(vals, list | tuple) or not all(isinstance(v, str) for v in vals):
                raise ConfigError("must be a list of strings", field=f"{where}.outside")
            object.__setattr__(self, "outside", tuple(vals))
        if self.when is not None and not callable(self.when):
            raise ConfigError("must be a callable args -> bool", field=f"{where}.when")
        if self.expires_after_s is not None and (
            isinstance(self.expires_after_s, bool)
            or not isinstance(self.expires_after_s, int | float)
            or not 0 < self.expires_after_s < math.inf  # (NaN fails both)
        ):
            raise ConfigError(
                f"must be a finite positive number, got {self.expires_after_s!r}",
                field=f"{where}.expires_after_s",
            )

    def matches(self, kind: str, name: str, args: Mapping[str, Any]) -> bool:
        if self.kind not in ("*", kind):
            return False
        if self.kind == "*" and kind == "overwrite_accepted":
            return False  # protected work is opened only by a rule that names it (invariant 6)
        if self.effect is not None and not fnmatch.fnmatchcase(name, self.effect):
            return False
        if self.above is not None:
            value = args.get(self.field)
            # A missing or non-numeric amount cannot be shown to be under the threshold.
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and not math.isnan(value)
                and not value > self.above
            ):
                return False
        if self.outside is not None and args.get(self.field) in self.outside:
            return False
        return not (self.when is not None and not self.when(args))

    def explain(self, kind: str, args: Mapping[str, Any]) -> str:
        if self.reason:
            return self.reason
        parts = [f"{kind} effects"]
        if self.above is not None:
            parts.append(f"with {self.field} {args.get(self.field)!r} above {self.above:g}")
        if self.outside is not None:
            parts.append(f"with {self.field} {args.get(self.field)!r} outside {list(self.outside)}")
        verb = {"allow": "are allowed", "require": "need approval", "deny": "are denied"}
        return " ".join(parts) + f" {verb[self.action]} (rule {self.name})"

    def who(self) -> dict[str, Any]:
        """Who may decide a request this rule raises, as stored with the request."""
        return {
            "role": self.role,
            "approvers": self.approvers,
            "separate": self.separate or self.approvers > 1,
            "field": self.field,
        }


def _finite(value: float) -> bool:
    """Whether a number is finite; an integer too large for a float is not (it raised
    OverflowError from ``math.isfinite``)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    action: Action
    rule: str | None
    why: str
    expires_after_s: float | None = None
    who: Mapping[str, Any] | None = None  # who may decide (``PolicyRule.who``); None: anyone


@dataclass(frozen=True, kw_only=True, slots=True)
class EarnedAuthority:
    """Authority a loop earns by its record (``[[authority]]`` in a spec; docs/permissions.md).

    Once this loop (name and version) has had ``after`` actions of ``kind`` approved by people
    with no denial, compensation or held-out failure since, its actions of that kind with
    ``args[field] <= up_to`` that a rule sends to a person are approved by ``policy:earned``
    instead, with the approvals that earned it as evidence. Any denial of that kind,
    compensation of that kind, or held-out failure of an accepted run of the loop revokes it
    at once; it is then earned again from zero.
    """

    kind: str
    after: int
    up_to: float
    field: str = "amount"

    def __post_init__(self) -> None:
        where = f"authority.{self.kind}"
        if not isinstance(self.kind, str) or not self.kind or self.kind == "*":
            raise ConfigError("must name one effect kind", field=f"{where}.kind")
        if isinstance(self.after, bool) or not isinstance(self.after, int) or self.after < 1:
            raise ConfigError(
                f"must be a whole number >= 1, got {self.after!r}", field=f"{where}.after"
            )
        if (
            isinstance(self.up_to, bool)
            or not isinstance(self.up_to, int | float)
            or math.isnan(self.up_to)
            or self.up_to < 0
        ):
            raise ConfigError(f"must be a number >= 0, got {self.up_to!r}", field=f"{where}.up_to")
        if not isinstance(self.field, str) or not self.field:
            # (field=3 read args[3]: never there, so the grant never covered anything)
            raise ConfigError(f"must be text, got {self.field!r}", field=f"{where}.field")

    def covers(self, kind: str, args: Mapping[str, Any]) -> bool:
        """Whether an action of ``kind`` with ``args`` is within this grant's limit."""
        value = args.get(self.field)
        return (
            kind == self.kind
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and not math.isnan(value)
            and value <= self.up_to
        )

    @classmethod
    def from_tables(cls, tables: Any) -> tuple[EarnedAuthority, ...]:
        """From the ``[[authority]]`` tables of a spec."""
        if tables is None:
            return ()
        if isinstance(tables, Mapping) or not isinstance(tables, list | tuple):
            raise ConfigError("must be an array of tables ([[authority]])", field="authority")
        known = {"kind", "after", "up_to", "field"}
        out = []
        for i, t in enumerate(tables):
            if not isinstance(t, Mapping):
                raise ConfigError("must be a table", field=f"authority[{i}]")
            extra = sorted(set(t) - known)
            if extra:
                raise ConfigError(
                    f"unknown key {extra[0]!r}; expected one of {sorted(known)}",
                    field=f"authority[{i}].{extra[0]}",
                )
            missing = sorted({"kind", "after", "up_to"} - set(t))
            if missing:
                raise ConfigError(f"missing {missing[0]!r}", field=f"authority[{i}]")
            out.append(cls(**dict(t)))
        kinds = [e.kind for e in out]
        if len(set(kinds)) != len(kinds):
            raise ConfigError("one [[authority]] table per kind", field="authority")
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "after": self.after, "up_to": self.up_to, "field": self.field}


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Ordered rules; the first match decides (see the module docs for the defaults)."""

    rules: tuple[PolicyRule, ...] = ()
    earned: tuple[EarnedAuthority, ...] = ()  # off unless given (docs/permissions.md)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", shapes.tuple_of(self.rules, PolicyRule, "approvals"))
        object.__setattr__(
            self, "earned", shapes.tuple_of(self.earned, EarnedAuthority, "approvals.earned")
        )
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            # (two rules left unnamed of one kind and action share their default name)
            raise ConfigError(
                f"rule names must be unique: {dupes} (a rule without a name is named "
                "<kind>-<action>: give each its own name)",
                field="approvals",
            )

    def match(self, kind: str, name: str, args: Mapping[str, Any]) -> PolicyDecision | None:
        """The decision of the first matching rule, or ``None`` when no rule matches."""
        for rule in self.rules:
            try:
                hit = rule.matches(kind, name, args)
            except Exception as exc:  # a user's condition failing must not run the effect
                return PolicyDecision(
                    "require", rule.name, f"rule {rule.name} could not be evaluated: {exc}"
                )
            if hit:
                return PolicyDecision(
                    rule.action,
                    rule.name,
                    rule.explain(kind, args),
                    rule.expires_after_s,
                    rule.who() if rule.action == "require" else None,
                )
        return None

    def decide(self, kind: str, name: str, args: Mapping[str, Any]) -> PolicyDecision:
        """The first matching rule's decision, else the default for the kind."""
        hit = self.match(kind, name, args)
        if hit is not None:
            return hit
        action: Action = "require" if kind in EFFECT_KINDS else "allow"
        why = (
            f"{kind} effects need approval unless a rule allows them"
            if action == "require"
            else f"no rule restricts {kind} effects"
        )
        return PolicyDecision(action, None, why)

    def earned_for(self, kind: str, args: Mapping[str, Any]) -> EarnedAuthority | None:
        """The earned-authority grant that could cover this action, if the policy has one."""
        for e in self.earned:
            if e.covers(kind, args):
                return e
        return None

    @classmethod
    def from_rules(
        cls, rules: Sequence[Mapping[str, Any]] | None, authority: Any = None
    ) -> ApprovalPolicy:
        """From the ``[[approvals]]`` (and ``[[authority]]``) tables of a spec."""
        earned = EarnedAuthority.from_tables(authority)
        if rules is None:
            return cls(earned=earned)
        if isinstance(rules, Mapping) or not isinstance(rules, list | tuple):
            raise ConfigError("must be an array of tables ([[approvals]])", field="approvals")
        known = set(PolicyRule.__dataclass_fields__) - {"when"}
        built = []
        for i, r in enumerate(rules):
            where = f"approvals[{i}]"
            if not isinstance(r, Mapping):
                raise ConfigError("must be a table", field=where)
            for k in r:
                if k not in known:
                    raise ConfigError(
                        f"unknown key {k!r}; expected one of {sorted(known)}", field=f"{where}.{k}"
                    )
            try:
                built.append(PolicyRule(**dict(r)))
            except TypeError as exc:
                raise ConfigError(str(exc), field=where) from None
            except ConfigError as exc:
                # Name the table by its index: several rules may share a kind.
                text, name = exc.message, exc.field or ""
                leaf = name.rsplit(".", 1)[-1] if "." in name else ""
                raise ConfigError(text, field=f"{where}.{leaf}" if leaf else where) from None
        return cls(tuple(built), earned)

    def to_list(self) -> list[dict[str, Any]]:
        return [
            {
                "name": r.name,
                "kind": r.kind,
                "action": r.action,
                "effect": r.effect,
                "field": r.field,
                "above": r.above,
                "outside": list(r.outside) if r.outside is not None else None,
                "when": getattr(r.when, "__qualname__", None) if r.when else None,
                "expires_after_s": r.expires_after_s,
                "role": r.role,
                "approvers": r.approvers,
                "separate": r.separate,
            }
            for r in self.rules
        ] + [{"authority": e.to_dict()} for e in self.earned]
