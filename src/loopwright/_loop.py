"""A loop's live definition: the actor, the verifiers, the contract."""

from __future__ import annotations

import fnmatch
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._contract import Contract
from ._effects import EFFECT_KINDS, Effect
from ._errors import ConfigError
from ._keys import check_declared_name, check_name, check_unpadded
from ._memory_search import RECALL_RANKED, check_ranked
from ._policy import ApprovalPolicy, PolicyRule
from ._proposal import Context, Proposal, Verdict
from ._retry import RetryPolicy
from ._shapes import takes as _takes
from ._state import TaskState

__all__ = [
    "ActorFn",
    "Check",
    "InitFn",
    "Loop",
    "VerifierFn",
    "check_declared_names",
    "declared_names",
    "other_loop",
]

ActorFn = Callable[[Context], Proposal | Awaitable[Proposal]]
VerifierFn = Callable[[TaskState, Proposal], Verdict | Awaitable[Verdict]]
InitFn = Callable[[Mapping[str, Any]], TaskState]
ReflectFn = Callable[[Context, Mapping[str, Verdict]], "str | Awaitable[str | None] | None"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """A verifier registered in a loop.

    Attributes:
        fn: ``(state, proposal) -> Verdict`` (sync or async). ``state`` is the candidate state
            with the proposal applied; verifiers must not modify it.
        name: unique within the loop; defaults to the function's name.
        held_out: a held-out check's verdicts are recorded and shown to people, and never reach
            the actor, its memory or its reflections.
        required: whether success needs this (visible) check to pass.
        weight: its weight in the aggregate visible score.
        timeout_s: per-call timeout; a timed-out call is a transient failure (retried under
            ``retry``, then the run escalates).
        retry: attempts and backoff for transient failures; ``None`` uses the loop's ``retry``.
    """

    fn: VerifierFn
    name: str = ""
    held_out: bool = False
    required: bool = True
    weight: float = 1.0
    timeout_s: float | None = None
    retry: RetryPolicy | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"{self.fn!r} is not callable", field="verifiers.fn")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.fn, "__name__", type(self.fn).__name__))
        if not isinstance(self.name, str):  # a verdict, its findings and the contract name it
            raise ConfigError(f"must be a string, got {self.name!r}", field="verifiers.name")
        _takes(self.fn, 2, "(state, proposal)", f"verifiers.{self.name}")
        _check_number(self.weight, f"verifiers.{self.name}.weight", positive=False)
        if self.timeout_s is not None:
            _check_number(self.timeout_s, f"verifiers.{self.name}.timeout_s", positive=True)


# (None for a setting that has a default: the hint says how to have the default)
_LEAVE_OUT = ": leave it out for {}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Loop:
    """Everything needed to run (and resume) a governed loop.

    Attributes:
        name: the loop's name (runs are grouped by it).
        actor: ``Context -> Proposal`` (sync or async).
        verifiers: checks, visible and held-out: ``Check`` objects, or plain ``(state, proposal) ->
            Verdict`` functions (each made a ``Check`` with its defaults; ``checks`` holds them).
        contract: the stop contract, snapshotted into every run; a ``spend_only`` one is
            given the default cycle ceiling (``Contract.with_default_ceiling``).
        init: builds the initial state from a task; default ``TaskState.from_task``.
        actor_timeout_s: per-call timeout for the actor.
        project: default project for runs of this loop.
        version: identifies this version of the loop (a spec file's hash).
        spec_ref: the spec file a run can be resumed from by the CLI.
        effects: the effects actors may ask for, by name.
        approvals: the approval policy for effects and for overwriting accepted parts.
        retry: attempts and backoff for the actor's (and, by default, the verifiers')
            transient failures; errors are classified, only transient ones are retried.
        reflector: ``(context, visible verdicts) -> str | None``, called after a cycle that
            was not accepted; its text is kept as a task-scoped reflection in feedback memory
            and reaches the next cycles' (and later runs of the task's) context. It sees
            visible verdicts only: nothing held-out enters memory.
        reflections_kept: how many of a task's reflections stay active (the newest; the same
            note is kept once); older ones are forgotten, so recall costs the same in a long
            run's last cycle as in its first.
        recall_ranked: how many of the items matching a cycle's recall query are scored for
            relevance: the newest (``_memory_search.RECALL_RANKED``, 1,000), so the recall
            costs the same however many match; an older match ranks as one matching no word
            (by strength). None scores every match (each costs the recall ≈ 6 µs, every cycle).
    """

    name: str
    actor: ActorFn
    verifiers: Sequence[Check | VerifierFn] = ()
    contract: Contract
    init: InitFn | None = None
    actor_timeout_s: float | None = None
    project: str = ""
    version: str | None = None
    spec_ref: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    effects: Sequence[Effect] = ()
    approvals: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reflector: ReflectFn | None = None
    reflections_kept: int = 20
    recall_ranked: int | None = RECALL_RANKED
    _checks: tuple[Check, ...] = field(init=False, repr=False, compare=False, default=())
    # Derived from ``_checks`` once (a loop and its checks are frozen): the visible checks,
    # and of them the names a cycle's success needs (those flagged required, or all when none
    # is) and the rest. Every cycle's decision asks (``_conclude``): built there, they were
    # a tuple, a set and a list a cycle.
    _visible: tuple[Check, ...] = field(init=False, repr=False, compare=False, default=())
    _required: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())
    _optional: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a loop needs a name", field="name")
        check_name(self.name, "loop name", "name")
        if not callable(self.actor):
            raise ConfigError(f"{self.actor!r} is not callable", field="actor")
        _takes(self.actor, 1, "(ctx)", "actor")
        if not isinstance(self.contract, Contract):
            hint = (
                " (build one with Contract.from_dict)" if isinstance(self.contract, Mapping) else ""
            )
            raise ConfigError(
                f"must be a Contract, got {type(self.contract).__name__}{hint}", field="contract"
            )
        if self.init is not None and not callable(self.init):
            raise ConfigError(f"{self.init!r} is not callable", field="init")
        if self.init is not None:
            _takes(self.init, 1, "(task)", "init")
        given = _items(self.verifiers, Check, "verifiers", "[Check(fn=...)]")
        checks = tuple(v if isinstance(v, Check) else Check(fn=v) for v in given)
        names = [c.name for c in checks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"verifier names must be unique: {dupes}", field="verifiers")
        object.__setattr__(self, "verifiers", checks)
        object.__setattr__(self, "_checks", checks)
        shown = tuple(c for c in checks if not c.held_out)
        flagged = frozenset(c.name for c in shown if c.required)
        object.__setattr__(self, "_visible", shown)
        object.__setattr__(self, "_required", flagged or frozenset(c.name for c in shown))
        object.__setattr__(self, "_optional", tuple(c.name for c in shown if not c.required))
        required = self.contract.success.required
        visible = {c.name for c in checks if not c.held_out}
        if required:
            missing = [r for r in required if r not in visible]
            if missing:
                raise ConfigError(
                    f"names verifiers that are not visible checks of this loop: {missing}",
                    field="contract.success.required",
                )
        if not visible:
            raise ConfigError(
                "a loop needs at least one visible check: without one no proposal can be "
                "accepted or show progress, and every run would spend its whole budget"
                + (
                    " (held-out checks are never shown to the actor nor decide success)"
                    if checks
                    else ""
                ),
                field="verifiers",
            )
        weights = sum(c.weight for c in checks if not c.held_out)
        if not math.isfinite(weights):  # each weight finite, the sum not: every score NaN
            raise ConfigError(
                f"the visible checks' weights add up to {weights}: every score would be NaN "
                "and no run could succeed (scale the weights down)",
                field="verifiers",
            )
        if not weights:
            raise ConfigError(
                "the visible checks' weights add up to 0: the run would have no score, and "
                "could neither succeed nor show progress (give one of them a weight above 0)",
                field="verifiers",
            )
        self.contract.refuse_for_a_run()  # snapshots of one still load
        # A spend-only contract's runs stop at the default ceiling (stop 50; stop 49's seed
        # 200615: an accepted part proposed again, refused, $0 a cycle, for ever): written into
        # the contract, so the run's snapshot, `show`, replay and the metrics see it.
        run_contract = self.contract.with_default_ceiling()
        if run_contract is not self.contract:
            object.__setattr__(self, "contract", run_contract)
        if run_contract.budget.max_cycles_default:
            keyed = run_contract.budget.max_cycles_key
            logging.getLogger("loopwright.runs").info(
                "loop %r: the contract's only exits besides success are spend budgets "
                "(max_cost_usd, max_tokens)%s, which cycles that spend nothing never reach: its "
                "runs%s stop at the default ceiling of %s cycles (budget_cycles); set "
                "budget.max_cycles, max_seconds or a no_progress rule to choose their end",
                self.name,
                f" and a task's own cap ({keyed})" if keyed else "",
                " of a task without its own cap" if keyed else "",
                f"{run_contract.budget.max_cycles:,}",
            )
        for rule in self.contract.risk:
            if callable(rule.check):
                where = f"contract.risk.{rule.name}.check"
                _takes(rule.check, 3, "(state, proposal, verdicts)", where)
        if self.actor_timeout_s is not None:
            _check_number(self.actor_timeout_s, "actor.timeout_s", positive=True)
        if not isinstance(self.project, str):
            raise ConfigError(f"must be a string, got {self.project!r}", field="project")
        check_name(self.project, "project name", "project")
        effects = _items(self.effects, Effect, "effects", "[your_effect]")
        for e in effects:
            if not isinstance(e, Effect):
                raise ConfigError(
                    f"{e!r} is not an Effect (declare it with @loopwright.effect(kind))",
                    field="effects",
                )
        enames = [e.name for e in effects]
        for n in enames:
            if n.endswith(".compensate"):
                # a compensation's own name: its runs were taken for compensations, never
                # offered for reversal nor listed as irreversible
                raise ConfigError(
                    f"{n!r} ends with '.compensate', the name of an effect's compensation: "
                    "name it otherwise",
                    field=f"effects.{n}.name",
                )
        edupes = sorted({n for n in enames if enames.count(n) > 1})
        if edupes:
            raise ConfigError(f"effect names must be unique: {edupes}", field="effects")
        object.__setattr__(self, "effects", effects)
        if not isinstance(self.approvals, ApprovalPolicy):
            hint = (
                ": wrap the rules, ApprovalPolicy((PolicyRule(...), ...))"
                if isinstance(self.approvals, PolicyRule | list | tuple)
                else _LEAVE_OUT.format("the default policy (built-in kinds need a person)")
                if self.approvals is None
                else ""
            )
            raise ConfigError(
                f"must be an ApprovalPolicy, got {type(self.approvals).__name__}{hint}",
                field="approvals",
            )
        if effects:
            _dead_rules(self.approvals, effects)
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(
                f"must be a RetryPolicy, got {type(self.retry).__name__}"
                + (_LEAVE_OUT.format("the default retries") if self.retry is None else ""),
                field="retry",
            )
        if self.reflector is not None and not callable(self.reflector):
            raise ConfigError(f"{self.reflector!r} is not callable", field="reflector")
        if self.reflector is not None:
            _takes(self.reflector, 2, "(ctx, verdicts)", "reflector")
        kept = self.reflections_kept
        if isinstance(kept, bool) or not isinstance(kept, int) or kept < 1:
            raise ConfigError(f"must be a positive integer, got {kept!r}", field="reflections_kept")
        check_ranked(self.recall_ranked, "recall_ranked")
        # Never let the generator be the only judge of its own work: a model-backed check on
        # the actor's own model and endpoint needs an explicit allow_self_review=True.
        for c in checks:
            model = _identity(self.actor)
            if (
                model is not None
                and self.self_reviewing(c)
                and not getattr(_model_backed(c.fn), "allow_self_review", False)
            ):
                raise ConfigError(
                    f"reviews with the generator's own model ({model[1]} at {model[0]}): use "
                    "another model, or pass allow_self_review=True to say so on purpose",
                    field=f"verifiers.{c.name}",
                )

    def self_reviewing(self, check: Check) -> bool:
        """Whether ``check`` is a model judging with the actor's own model and endpoint."""
        mine, theirs = _identity(self.actor), _identity(check.fn)
        return mine is not None and mine == theirs

    def effect(self, name: str) -> Effect | None:
        for e in self.effects:
            if e.name == name:
                return e
        return None

    @property
    def checks(self) -> tuple[Check, ...]:
        """The verifiers as ``Check`` objects (a plain function given in ``verifiers`` is wrapped in
        one with its defaults when the loop is built; ``verifiers`` then holds the same)."""
        return self._checks

    @property
    def visible(self) -> tuple[Check, ...]:
        return self._visible

    @property
    def required_names(self) -> frozenset[str]:
        """The visible checks a cycle's success needs, by name: those flagged
        ``required``, or every visible one when none is."""
        return self._required

    @property
    def optional_names(self) -> tuple[str, ...]:
        """The visible checks the loop does not require (``Check.required=False``), in order."""
        return self._optional

    @property
    def held_out(self) -> tuple[Check, ...]:
        return tuple([c for c in self.checks if c.held_out])


def _dead_rules(policy: ApprovalPolicy, effects: Sequence[Effect]) -> None:
    """Refuse a rule that can never apply to the loop's effects: a kind none of them has (not a
    built-in one, nor ``*``), or an effect name (no wildcard) none of them, nor a compensation
    of one, is called. A ``deny`` for kind ``Deploy`` or effect ``deploy-prod`` on an effect
    ``deploy_prod`` of kind ``deploy`` never matched, and the deploy ran unasked. A pattern
    (``wire_*``) may guard against effects yet to come, and is left as it is."""
    kinds = sorted({e.kind for e in effects})
    names = [e.name for e in effects]
    names += [f"{n}.compensate" for n in names]
    for r in policy.rules:
        where = f"approvals.{r.name}"
        if r.kind != "*" and r.kind not in EFFECT_KINDS and r.kind not in kinds:
            raise ConfigError(
                f"no effect of this loop is of kind {r.kind!r} (its kinds: {', '.join(kinds)}), "
                "so the rule would never apply",
                field=f"{where}.kind",
            )
        glob = r.effect
        if glob is None or any(ch in glob for ch in "*?["):
            continue
        if r.kind == "overwrite_accepted" or any(fnmatch.fnmatchcase(n, glob) for n in names):
            continue
        raise ConfigError(
            f"no effect of this loop is named {glob!r} (its effects: {', '.join(names[: len(effects)])}), "
            "so the rule would never apply",
            field=f"{where}.effect",
        )


def _check_number(value: object, field: str, *, positive: bool) -> None:
    """A finite number, > 0 or ≥ 0: NaN passes every comparison-based limit (a NaN weight
    makes every score NaN, a NaN timeout never fires) and "ten" fails deep inside a run."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    if not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", field=field)
    if value < 0 or (positive and value == 0):
        raise ConfigError("must be positive" if positive else "must not be negative", field=field)


def _model_backed(fn: object) -> object:
    """The model-backed callable ``fn`` is, or wraps (``functools.partial``, a
    ``functools.wraps`` function, a bound method of one), else ``fn``: a reviewer passed
    wrapped is still the actor's own model when it is."""
    seen = 0
    while seen < 20 and not callable(getattr(fn, "model_identity", None)):
        seen += 1
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__  # type: ignore[attr-defined]
        elif inspect.ismethod(fn):
            fn = fn.__self__
        else:
            break
    return fn


def _identity(fn: object) -> tuple[str, str] | None:
    """``(endpoint, model)`` of a model-backed callable (``model_identity()``), else None."""
    get = getattr(_model_backed(fn), "model_identity", None)
    if not callable(get):
        return None
    try:
        ident = get()
    except Exception:
        return None
    return (str(ident[0]), str(ident[1])) if isinstance(ident, tuple) and len(ident) == 2 else None


def _items(given: Any, kind: type, field: str, example: str) -> tuple[Any, ...]:
    """A loop's list argument (``verifiers``, ``effects``) as a tuple, or a ``ConfigError``
    with a hint for the common slip of passing one item, or ``None``, where a list goes (not
    a ``TypeError`` that something is not iterable)."""
    if isinstance(given, kind) or callable(given):
        raise ConfigError(
            f"takes a list, got one {type(given).__name__}; wrap it: {field}={example}",
            field=field,
        )
    if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
        raise ConfigError(f"must be a list, got {type(given).__name__}: {given!r:.80}", field=field)
    return tuple(given)


def check_declared_names(loop: Loop) -> None:
    """``ConfigError`` when a name ``loop`` declares for a verifier, an effect, a risk rule or
    an approval rule breaks ``check_declared_name`` (a bidirectional control, an invisible character). Asked
    where a new run is made of the loop (``Runtime.create``) and by ``loopwright check``, not
    where a ``Loop``, a ``Check`` or an effect is built: a run an earlier release started under
    such a name is resumed, continued and forked with a loop declaring it (review49c; refused
    at declaration, it could not be, and a parked run stayed parked for good). The loop's own
    name and project must not begin or end with whitespace either (``check_unpadded``)."""
    check_unpadded(loop.name, "loop name", "name")
    check_unpadded(loop.project, "project name", "project")
    for name, what, where in declared_names(loop):
        check_declared_name(name, what, where)


def declared_names(loop: Loop) -> Iterator[tuple[str, str, str]]:
    """``(name, what, field)`` of every verifier, effect, risk rule and approval rule
    (``PolicyRule``) ``loop`` declares, as ``check_declared_name`` takes them."""
    for check in loop.checks:
        yield check.name, "verifier name", "verifiers.name"
    for effect in loop.effects:
        yield effect.name, "effect name", "effects.name"
    for rule in loop.contract.risk:
        yield rule.name, "risk rule name", "contract.risk.name"
    for policy_rule in loop.approvals.rules:  # (named in the requests a person decides)
        yield policy_rule.name, "approval rule name", "approvals.name"


def check_loop(loop: Any, *, optional: bool = False) -> None:
    """A ``Loop`` given where one is expected (or ``None`` when ``optional``), else a
    ``ConfigError`` saying what was given (not an ``AttributeError`` from deep inside the run,
    or a rollback's compensations half offered)."""
    if not isinstance(loop, Loop) and not (optional and loop is None):
        raise ConfigError(f"must be a loopwright.Loop, got {type(loop).__name__}", field="loop")


def other_loop(loop: Loop, loop_name: str, spec_ref: str | None) -> bool:
    """Whether ``loop`` is not the loop a run recorded (``loop_name``, ``spec_ref``): a loop is
    the same by its name, or, renamed, by the spec file it was loaded from (the run's
    ``spec_ref``: an edited spec keeps its path, and the CLI resumes from it). A loop's
    ``version`` (the spec's hash) is not asked: it changes with any edit of the spec, a
    raised budget as much as a new actor."""
    if loop.name == loop_name:
        return False
    return not (loop.spec_ref is not None and loop.spec_ref == spec_ref)
