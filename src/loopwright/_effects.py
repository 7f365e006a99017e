"""Effects: actions with consequences outside the run (pay, publish, send, overwrite).

An actor never performs an effect itself: it *asks* for one in its proposal
(``Proposal(effects=[pay.call(invoice="A-1", amount=120.0)])``). The engine checks the call
against the loop's approval policy, journals the intent in the store under the run's lease,
performs it, and journals the result — so a crash at any point never runs it twice (invariant
2 of docs/concepts.md). A completed effect's key returns its recorded result without running again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import _shapes as shapes
from ._errors import ConfigError
from ._json import lone_surrogate, round_trip
from ._redact import redact
from ._retry import RetryPolicy
from ._usage import Usage, plain_usage

# An effect argument of these types cannot be changed in place (``Effect.bind``).
_SCALARS = frozenset((str, int, float, bool, type(None)))

__all__ = ["EFFECT_KINDS", "Effect", "EffectCall", "EffectResult", "effect"]

#: The kinds the approval policy knows by default; any other non-empty name is a user kind.
EFFECT_KINDS: tuple[str, ...] = ("publish", "spend", "send", "overwrite_accepted", "share_private")

EffectFn = Callable[..., Any | Awaitable[Any]]
KeyFn = Callable[[Mapping[str, Any]], str]
ReconcileFn = Callable[[str], Any | Awaitable[Any]]
# The compensation is handed the original's key, result and arguments: a fresh ``dict`` of
# them, so a hook typed ``args: dict[str, Any]`` (docs/effects.md) or ``Mapping[str, Any]`` both fit.
CompensateFn = Callable[[str, Any, dict[str, Any]], Any | Awaitable[Any]]
# The decorators hand back the function they were given, its own type kept for the caller's
# type checker (``paid(key)`` is still ``dict | None``, not ``Any | Awaitable[Any]``).
_R = TypeVar("_R", bound=ReconcileFn)
_C = TypeVar("_C", bound=CompensateFn)


# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)`` builds on
# every call (keyword arguments make it construct an encoder each time), built once: the
# proposal's digest runs it every cycle.
# Characters of one argument an action's one-line description shows (an approval card's
# heading, ``loopwright approvals``, the API's ``what``): a 5,000-character memo filled the
# screen and pushed "already done by run X" out of sight. The request's arguments stay whole
# in its evidence (the card's table, the API's ``args``), and its hash is over them.
HEADING_ARG_MAX = 200


def _heading_arg(value: Any) -> str:
    """``value`` as the description shows it: its repr, cut to ``HEADING_ARG_MAX`` characters
    with an ellipsis and its whole length (a text's own, else the repr's)."""
    text = repr(value)
    if len(text) <= HEADING_ARG_MAX:
        return text
    whole = len(value) if isinstance(value, str) else len(text)
    return f"{text[: HEADING_ARG_MAX - 1]}… ({whole:,} characters)"


_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def canon(value: Any) -> str:
    return _CANON.encode(value)


@dataclass(frozen=True, slots=True)
class EffectCall:
    """One requested execution of an effect: its name, arguments and (optionally) its key."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None

    def __post_init__(self) -> None:
        shapes.text(self.name, "EffectCall.name", empty=False)
        if not isinstance(self.args, Mapping):
            raise ConfigError(
                f"must be a mapping of keyword arguments, got {type(self.args).__name__}",
                field="EffectCall.args",
            )
        shapes.optional(self.key, str, "EffectCall.key")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "args": dict(self.args), "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EffectCall:
        # as recorded (a waiting run's calls): checked when the actor made them
        return shapes.stored(cls, str(d["name"]), dict(d.get("args") or {}), d.get("key"))

    def canonical(self) -> str:
        return canon({"name": self.name, "args": dict(self.args), "key": self.key})

    def secret_args(self) -> list[str]:
        """The names of the arguments (and ``key``) that hold a secret (``redact`` would mask
        them). An effect's arguments are journaled, shown for approval and used again after a
        crash as they are, so a call holding one is not run (invariant 9): credentials belong
        in the effect's own configuration."""
        plain = json.loads(canon({"args": dict(self.args), "key": self.key}))
        masked = redact(plain)
        if masked is plain:
            return []
        out = [str(k) for k, v in plain["args"].items() if masked["args"].get(k) != v]
        return out + (["key"] if masked["key"] != plain["key"] else [])


@dataclass(frozen=True, slots=True)
class EffectResult:
    """What an effect may return to report its own cost: ``value`` is recorded as the result,
    ``usage`` is charged to the cycle's spend and counts against the budget (invariant 7)."""

    value: Any = None
    usage: Usage | None = None

    def __post_init__(self) -> None:
        shapes.optional(self.usage, Usage, "EffectResult.usage")
        object.__setattr__(self, "usage", plain_usage(self.usage))


# What each hook is called with: (how many positional arguments, their names for a refusal).
_HOOK_ARGS: dict[str, tuple[int, str]] = {
    "key": (1, "(args)"),
    "reconcile": (1, "(key)"),
    "compensate": (3, "(key, result, args)"),
    "describe": (1, "(args)"),
    "compensate_reconcile": (1, "(key)"),
}


class Effect:
    """A declared effect. Build one with the :func:`effect` decorator.

    Attributes:
        fn: performs the action; called with the call's arguments as keywords, plus ``key=``
            (the idempotency key) when it accepts a ``key`` parameter — pass it on to APIs that
            take an idempotency key. Sync or async. Its return value is recorded (JSON;
            an object JSON cannot hold as its ``str``; a result that contains itself as a
            note saying so: the action is recorded done whatever it returned).
        kind: ``publish``, ``spend``, ``send``, ``overwrite_accepted``, ``share_private`` or a
            kind of your own; the approval policy decides by kind and arguments.
        idempotent: running it twice has the effect of running it once. Only an idempotent
            effect is retried when it is in doubt (started, outcome unknown) and cannot be
            reconciled.
        key_fn: the idempotency key from the arguments; by default a hash of run, cycle, name
            and arguments. A business key (``lambda a: a["invoice"]``) makes the same action in
            a later cycle return the first result instead of running again.
        reconcile_fn: ``key -> result | None``: asks the outside world whether the action with
            this key already happened (its result), or not (``None``).
        compensate_fn: ``(key, result, args) -> Any``: undoes a completed execution; offered
            (through the approval policy) when a run is cancelled or rolled back past it.
        compensate_idempotent: running the compensation twice has the effect of running it
            once (the provider deduplicates the refund by its key): one interrupted by a crash
            is run again on resume instead of ending in doubt.
        compensate_reconcile_fn: ``key -> result | None``: asks the outside world whether the
            compensation of the execution with this key (the key the compensation was handed)
            already happened (its result), or not (``None``): one interrupted by a crash is
            settled by it on resume (done; run again; in doubt when the hook fails).
        requires_success: run only in a cycle the contract accepts (the default: pay for work
            that passed its checks). ``False`` runs it after verification in every cycle whose
            proposal was not refused.
        retry: attempts and backoff for this effect's transient failures.
        timeout_s: per-attempt timeout.
        free: the effect bills nothing to the run's budgets (it reports no usage): it runs on
            a budget already reached, where one whose cost is unknown does not start (a
            ``publish`` run only in the cycle that succeeds, when that cycle's calls landed
            exactly on the cost budget). It is no priced call of the cycle; a cost it reports
            all the same is charged, and it is not free from then on.
    """

    def __init__(
        self,
        fn: EffectFn,
        *,
        kind: str,
        name: str | None = None,
        idempotent: bool = False,
        key_fn: KeyFn | None = None,
        reconcile_fn: ReconcileFn | None = None,
        compensate_fn: CompensateFn | None = None,
        requires_success: bool = True,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
        describe: Callable[[Mapping[str, Any]], str] | None = None,
        compensate_idempotent: bool = False,
        compensate_reconcile_fn: ReconcileFn | None = None,
        free: bool = False,
    ) -> None:
        if not callable(fn):
            raise ConfigError(f"{fn!r} is not callable", field="effects.fn")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "") or type(fn).__name__
        where = f"effects.{self.name}"
        if not isinstance(self.name, str) or ":" in self.name:
            # the journal's key is ``<name>:<key>``: effect "a:b" with key "c" and effect "a"
            # with key "b:c" were one action
            raise ConfigError(
                f"must be a name without ':', got {self.name!r}", field=f"{where}.name"
            )
        if not isinstance(kind, str) or not kind.strip():
            raise ConfigError(
                "every effect needs a kind (spend, publish, ...)", field=f"{where}.kind"
            )
        if timeout_s is not None and (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s < math.inf  # (NaN fails both: a timeout that never fires)
        ):
            raise ConfigError(
                f"must be a finite positive number of seconds, got {timeout_s!r}",
                field=f"{where}.timeout_s",
            )
        flags = (
            ("idempotent", idempotent),
            ("requires_success", requires_success),
            ("compensate_idempotent", compensate_idempotent),
            ("free", free),
        )
        for flag, value in flags:
            # "false" was true: a non-idempotent effect in doubt was run again
            if not isinstance(value, bool):
                raise ConfigError(f"must be True or False, got {value!r}", field=f"{where}.{flag}")
        hooks: tuple[tuple[str, object], ...] = (
            ("key", key_fn),
            ("reconcile", reconcile_fn),
            ("compensate", compensate_fn),
            ("describe", describe),
            ("compensate_reconcile", compensate_reconcile_fn),
        )
        for hook, fn_ in hooks:
            if fn_ is not None and not callable(fn_):
                raise ConfigError(f"must be callable, got {fn_!r}", field=f"{where}.{hook}")
            if fn_ is not None:
                shapes.takes(fn_, *_HOOK_ARGS[hook], f"{where}.{hook}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(f"must be a RetryPolicy, got {retry!r}", field=f"{where}.retry")
        self.kind = kind.strip()
        self.idempotent = idempotent
        self.key_fn = key_fn
        self.reconcile_fn = reconcile_fn
        self.compensate_fn = compensate_fn
        self.compensate_idempotent = compensate_idempotent
        self.compensate_reconcile_fn = compensate_reconcile_fn
        self.requires_success = requires_success
        self.free = free
        self.retry = retry
        self.timeout_s = timeout_s
        self.describe_fn = describe
        try:
            sig: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        params = sig.parameters if sig is not None else {}
        self._wants_key = "key" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
        # The signature ``call`` checks its arguments against; not a decorated function's
        # (``functools.wraps``: the signature read is the wrapped one, which its wrapper may
        # call with arguments of its own).
        self._signature = None if hasattr(fn, "__wrapped__") else sig

    def __repr__(self) -> str:
        return f"Effect({self.name!r}, kind={self.kind!r}, idempotent={self.idempotent})"

    @property
    def takes_key(self) -> bool:
        """Whether the function is handed the idempotency key (``key=``): only then can a
        provider deduplicate an attempt made again under the same key."""
        return self._wants_key

    # --- building calls --------------------------------------------------------------------
    def call(self, /, *, key: str | None = None, **args: Any) -> EffectCall:
        """A request to run this effect, to put in a ``Proposal``'s ``effects``."""
        try:
            # Strict: the arguments are journaled and may be replayed after a restart, so they
            # must survive JSON unchanged (no str() fallback for sets, dates, objects).
            json.dumps(args, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"arguments must be JSON values: {exc}", field=self.name) from exc
        bad = lone_surrogate(args)
        if bad is not None:  # stored as U+FFFD: the key computed again after a restart would differ
            raise ConfigError(
                f"arguments must be text: one holds a lone surrogate ({bad})", field=self.name
            )
        # Checked when asked for, not when run: a call missing an argument was found only
        # when it ran, after a person had approved it (and its cycle was spent).
        why = self.unfit(args)
        if why is not None:
            raise ConfigError(why, field=self.name)
        return EffectCall(self.name, args, key)

    def unfit(self, args: Mapping[str, Any]) -> str | None:
        """Why this effect cannot be called with ``args`` (its signature refuses them), or
        ``None``. ``call`` refuses such a call; the cycle escalates on one an actor built as an
        ``EffectCall`` itself, before anyone is asked to approve it."""
        if self._signature is None:
            return None
        try:
            self._signature.bind(**args, **({"key": ""} if self._wants_key else {}))
        except TypeError as exc:
            return f"{self.name}{self._signature} cannot be called with {sorted(args)}: {exc}"
        return None

    # --- decorators for the hooks -------------------------------------------------------------
    def reconciler(self, fn: _R) -> _R:
        """Attach ``fn`` as the reconcile hook: ``@pay.reconciler``."""
        self._hook(fn, "reconcile")
        self.reconcile_fn = fn
        return fn

    def compensation(self, fn: _C) -> _C:
        """Attach ``fn`` as the compensation: ``@pay.compensation``."""
        self._hook(fn, "compensate")
        self.compensate_fn = fn
        return fn

    def _hook(self, fn: object, hook: str) -> None:
        """A hook given by decorator, checked as one given to ``effect(...)`` is: a reconciler
        of the wrong shape was found only when an effect was in doubt, after a crash."""
        if not callable(fn):
            raise ConfigError(f"must be callable, got {fn!r}", field=f"effects.{self.name}.{hook}")
        shapes.takes(fn, *_HOOK_ARGS[hook], f"effects.{self.name}.{hook}")

    def compensation_reconciler(self, fn: _R) -> _R:
        """Attach ``fn`` as the compensation's reconcile hook: ``@pay.compensation_reconciler``
        (did the refund of payment ``key`` already happen?)."""
        self._hook(fn, "compensate_reconcile")
        self.compensate_reconcile_fn = fn
        return fn

    # --- used by the engine -------------------------------------------------------------------
    def key_for(self, run_id: str, cycle: int, call: EffectCall) -> str:
        """The call's idempotency key (without the journal's ``effect:`` prefix)."""
        if call.key:
            return f"{self.name}:{call.key}"
        if self.key_fn is not None:
            return f"{self.name}:{self._business_key(call.args)}"
        body = canon({"run": run_id, "cycle": cycle, "name": self.name, "args": dict(call.args)})
        return f"{self.name}:{hashlib.sha256(body.encode()).hexdigest()[:24]}"

    def _business_key(self, args: Mapping[str, Any]) -> object:
        """What the ``key=`` function gives for ``args`` (written as its ``str``), or a
        ``ConfigError`` naming it (the engine escalates with it): one that raises, or gives no
        key: ``None``, ``""``, a bool, a coroutine, an object whose text is the default one
        (``"None"`` would name one action for every call, an object's address another key in
        every process). A value whose text is its own (a UUID, a ``Decimal``, a date, a tuple
        of such) keeps working as before."""
        where = f"effects.{self.name}.key"
        try:
            key = self.key_fn(args)  # type: ignore[misc]
        except Exception as exc:
            raise ConfigError(
                f"the key function of effect {self.name} raised {type(exc).__name__}: {exc}",
                field=where,
            ) from exc
        if _names_an_action(key):
            return key
        if inspect.iscoroutine(key):
            key.close()  # (never awaited: no warning of it)
        raise ConfigError(
            f"the key function of effect {self.name} must return the action's key (text, a "
            f"number, a UUID...), got {type(key).__name__}: {key!r:.60} (it is a plain "
            "function of the arguments, not async)",
            field=where,
        )

    def describe(self, args: Mapping[str, Any]) -> str:
        shown = ", ".join(f"{k}={_heading_arg(v)}" for k, v in args.items())
        default = f"{self.kind}: {self.name}({shown})"
        if self.describe_fn is None:
            return default
        # What people read of the action: a describe= that fails, or gives no text, is said
        # beside the default description, not an error that ends the run in the engine.
        try:
            text = self.describe_fn(args)
        except Exception as exc:
            return f"{default} (its describe function raised {type(exc).__name__}: {exc})"
        if isinstance(text, str):
            return text
        if inspect.iscoroutine(text):
            text.close()
        return f"{default} (its describe function returned {type(text).__name__}, not text)"

    def bind(self, args: Mapping[str, Any], key: str) -> Callable[[], Any]:
        """A no-argument callable performing the call (passing ``key=`` when it is wanted).
        The call gets its own copy of the arguments: one it changes in place would otherwise
        change the proposal the cycle records (and judged), as a verifier's would."""
        kwargs = dict(args)
        if not all(type(v) in _SCALARS for v in kwargs.values()):  # (the others: immutable)
            kwargs = round_trip(kwargs)
        if self._wants_key:
            kwargs["key"] = key
        fn = self.fn
        return lambda: fn(**kwargs)


def effect(
    kind: str,
    *,
    name: str | None = None,
    idempotent: bool = False,
    key: KeyFn | None = None,
    reconcile: ReconcileFn | None = None,
    compensate: CompensateFn | None = None,
    requires_success: bool = True,
    retry: RetryPolicy | None = None,
    timeout_s: float | None = None,
    describe: Callable[[Mapping[str, Any]], str] | None = None,
    compensate_idempotent: bool = False,
    compensate_reconcile: ReconcileFn | None = None,
    free: bool = False,
) -> Callable[[EffectFn], Effect]:
    """Declare an effect::

        @effect("spend", key=lambda a: a["invoice"])
        def pay(invoice: str, amount: float, *, key: str) -> dict: ...

        @pay.reconciler
        def _(key: str) -> dict | None: ...   # did payment ``key`` already happen?

    ``compensate_idempotent=True`` or ``compensate_reconcile=fn`` (``key -> result | None``:
    did the refund of payment ``key`` already happen?) settle a compensation a crash
    interrupted, as ``idempotent`` and ``reconcile`` settle the effect; without either it is in
    doubt for a person. ``free=True``: the effect bills nothing to the run's budgets, and
    runs on one already reached (``Effect``).

    An actor asks for it with ``Proposal(effects=[pay.call(invoice="A-1", amount=120.0)])``.
    """
    if callable(kind):  # a bare ``@effect`` above a def: the function came as the kind
        fn_name = getattr(kind, "__name__", "the function")
        raise ConfigError(
            f'@effect needs the effect\'s kind: write @effect("spend") (or "publish", '
            f'"send", ...) above def {fn_name}, not a bare @effect',
            field=f"effects.{fn_name}.kind",
        )

    def wrap(fn: EffectFn) -> Effect:
        return Effect(
            fn,
            kind=kind,
            name=name,
            idempotent=idempotent,
            key_fn=key,
            reconcile_fn=reconcile,
            compensate_fn=compensate,
            requires_success=requires_success,
            retry=retry,
            timeout_s=timeout_s,
            describe=describe,
            compensate_idempotent=compensate_idempotent,
            compensate_reconcile_fn=compensate_reconcile,
            free=free,
        )

    return wrap


def _names_an_action(key: object) -> bool:
    """Whether ``key``'s text names one action, the same in every process."""
    if key is None or isinstance(key, bool) or inspect.iscoroutine(key):
        return False
    if isinstance(key, str):
        return bool(key)
    if isinstance(key, int):
        return True
    if isinstance(key, float):
        return math.isfinite(key)
    if isinstance(key, tuple):
        return bool(key) and all(_names_an_action(k) for k in key)
    if callable(key) or inspect.isgenerator(key) or inspect.isawaitable(key):
        return False
    # any other value that writes its own text (a UUID, a Decimal, a date, an enum member);
    # the default text of an object (object's, a function's) holds its address
    try:
        text = str(key)
    except Exception:
        return False
    return bool(text) and " at 0x" not in text
