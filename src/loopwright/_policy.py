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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._effects import EFFECT_KINDS
from ._errors import ConfigError

__all__ = ["Action", "ApprovalPolicy", "PolicyDecision", "PolicyRule"]

Action = Literal["allow", "require", "deny"]
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

    def __post_init__(self) -> None:
        where = f"approvals.{self.name or self.kind}"
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError("every rule needs a kind ('*' for any)", field=f"{where}.kind")
        if self.action not in _ACTIONS:
            raise ConfigError(
                f"must be one of {list(_ACTIONS)}, got {self.action!r}", field=f"{where}.action"
            )
        if not self.name:
            object.__setattr__(self, "name", f"{self.kind}-{self.action}")
        if self.above is not None and (
            isinstance(self.above, bool) or not isinstance(self.above, int | float)
        ):
            raise ConfigError(f"must be a number, got {self.above!r}", field=f"{where}.above")
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
            or self.expires_after_s <= 0
        ):
            raise ConfigError("must be a positive number", field=f"{where}.expires_after_s")

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


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    action: Action
    rule: str | None
    why: str
    expires_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Ordered rules; the first match decides (see the module docs for the defaults)."""

    rules: tuple[PolicyRule, ...] = ()

    def __post_init__(self) -> None:
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"rule names must be unique: {dupes}", field="approvals")

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
                    rule.action, rule.name, rule.explain(kind, args), rule.expires_after_s
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

    @classmethod
    def from_rules(cls, rules: Sequence[Mapping[str, Any]] | None) -> ApprovalPolicy:
        """From the ``[[approvals]]`` tables of a spec."""
        if rules is None:
            return cls()
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
                text, name = str(exc), exc.field or ""
                if name and text.startswith(f"{name}: "):
                    text = text[len(name) + 2 :]
                leaf = name.rsplit(".", 1)[-1] if "." in name else ""
                raise ConfigError(text, field=f"{where}.{leaf}" if leaf else where) from None
        return cls(tuple(built))

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
            }
            for r in self.rules
        ]
