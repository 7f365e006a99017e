"""Loop specs: a TOML file naming the actor, the verifiers and the contract.

```toml
name = "invoice-exceptions"
project = "accounts-payable"
tasks = "tasks.jsonl"                 # default task file, relative to this spec
secret_fields = ["iban", "pin"]       # task (and evidence, argument) fields holding secrets:
                                      # their values are masked (docs/security.md)

[actor]
ref = "invoices.py:propose"           # file.py:attr (relative to the spec) or package.module:attr
timeout_s = 10
# options = { ... }                   # when given, ref is a factory called with these

[[verifiers]]
name = "fields_agree"
ref = "invoices.py:fields_agree"
# held_out = false, required = true, weight = 1.0, timeout_s = 5, options = { ... }

[contract.budget]
max_cycles = 6

[retry]                               # the actor's (and by default the verifiers') retries
attempts = 3                          # a verifier may have its own: retry = { attempts = 1 }
backoff_s = 0.5

[[effects]]
ref = "invoices.py:post_payment"      # an object declared with @loopwright.effect(kind)

[model.limits]                        # every model-backed actor and verifier, per endpoint and
max_concurrency = 4                   # model, shared by all runs in the process
tokens_per_minute = 200000

[[approvals]]                         # first matching rule decides
kind = "spend"
above = 10000                         # args["amount"] > 10000 (field = "amount" by default)
action = "require"                    # allow | require | deny
approvers = 2                         # two distinct people (never the one who started it)
role = "finance"                      # ... each holding this role (docs/permissions.md)

[[authority]]                         # earned authority: after 5 clean approvals of spend,
kind = "spend"                        # spends up to 1000 are approved by policy:earned
after = 5
up_to = 1000
```
"""

from __future__ import annotations

import hashlib
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._contract import Contract, refuse_engine_marks
from ._effects import Effect
from ._errors import ConfigError, SpecError
from ._loop import Check, Loop
from ._policy import ApprovalPolicy
from ._redact_registry import register_secret_field, resets
from ._retry import RetryPolicy
from ._spec_import import resolve_ref
from ._spec_reflector import reflector_of
from .store import RunRecord

__all__ = ["load_spec", "loop_of_run", "register_run_secrets", "resolve_ref"]

TOP_KEYS = {
    "name",
    "project",
    "description",
    "tasks",
    "secret_fields",
    "actor",
    "verifiers",
    "contract",
    "init",
    "retry",
    "effects",
    "approvals",
    "authority",
    "model",
    "reflector",
}
_MODEL = {"limits"}
_MODEL_LIMITS = {"max_concurrency", "tokens_per_minute"}
_ACTOR = {"ref", "timeout_s", "options"}
_VERIFIER = {
    "name",
    "ref",
    "held_out",
    "required",
    "weight",
    "timeout_s",
    "options",
    "retry",
}
_EFFECT = {"ref", "options"}


def vetted(data: Any, where: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise SpecError("must be a table", field=where)
    for key in data:
        if key not in allowed:
            raise SpecError(
                f"unknown key {key!r}; expected one of {sorted(allowed)}",
                field=f"{where}.{key}" if where else key,
            )
    return data


def _non_finite(data: Any) -> tuple[str, float] | None:
    """The first NaN or infinity in the parsed spec (TOML has both literals) and its field:
    none is a meaningful weight, timeout, budget or threshold (NaN compares false to every
    limit, so a NaN budget never stops a run)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:  # iterative: a deeply nested table must not overflow the stack here
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, value
        if isinstance(value, Mapping):
            items = [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
            stack.extend(reversed(items))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{where}[{i}]", v) for i, v in enumerate(value)]))
    return None


def _text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """``data[key]`` as a string (None when absent): a table or a number is refused, not
    turned into its Python text."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(f"must be a string, got {_kind(value)}", field=where)
    return value


def _secret_fields(data: Mapping[str, Any]) -> list[str]:
    """``secret_fields``: the names of mapping keys (a task's fields, an effect's arguments,
    evidence) whose values are secrets, besides those named like one (``password``, …)."""
    value = data.get("secret_fields", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise SpecError(
            "must be an array of field names (non-empty strings)", field="secret_fields"
        )
    return value


def _flag(data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):  # bool("false") is True
        raise SpecError(f"must be true or false, got {_kind(value)}", field=where)
    return value


def _number(data: Mapping[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise SpecError(f"must be a number, got {_kind(value)}", field=where)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def build_from_ref(ref: str, options: Any, base: Path, where: str) -> Any:
    obj = resolve_ref(ref, base, f"{where}.ref")
    if options is None:
        if not callable(obj):
            raise SpecError(f"{ref!r} is not callable", field=f"{where}.ref")
        return obj
    if not isinstance(options, Mapping):
        raise SpecError("must be a table", field=f"{where}.options")
    try:
        built = obj(**options)
    except SystemExit as exc:  # as at import: would end the command silently, exit code 0
        raise SpecError(
            f"building {ref!r} with options called sys.exit({exc.code!r})",
            field=f"{where}.options",
        ) from None
    except Exception as exc:
        raise SpecError(
            f"building {ref!r} with options failed: {exc}", field=f"{where}.options"
        ) from None
    if not callable(built):
        raise SpecError(f"{ref!r}(**options) did not return a callable", field=f"{where}.options")
    return built


def load_spec(path: str | os.PathLike[str]) -> Loop:
    """Load and validate a loop spec; every problem names its field."""
    if not isinstance(path, str | os.PathLike):
        raise SpecError(f"must be a path to a spec file, got {type(path).__name__}", field="spec")
    p = Path(path)
    if p.is_dir():  # (`loopwright run examples/invoice_exceptions`, say)
        found = sorted(x.name for x in p.glob("*.toml"))[:3]
        hint = f": name the spec file in it ({', '.join(found)})" if found else ""
        raise SpecError(f"{p} is a directory, not a spec file{hint}", field="spec")
    if p.exists() and not p.is_file():  # a pipe (`check <(...)`): no second read
        raise SpecError(
            f"{p} is not a regular file: a spec is read again by `resume` and `worker`; "
            "save the spec to a file and name that",
            field="spec",
        )
    if not p.is_file():
        raise SpecError(f"no spec file at {p}", field="spec")
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode("utf-8-sig"))  # a byte-order mark is not a mistake
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p} is not valid TOML: {exc}", field="spec") from None
    except RecursionError:
        raise SpecError(f"{p} is nested too deeply to be a loop spec", field="spec") from None
    except OSError as exc:
        raise SpecError(f"cannot read {p}: {exc.strerror or exc}", field="spec") from None
    vetted(data, "", TOP_KEYS)
    bad = _non_finite(data)
    if bad is not None:
        raise SpecError(f"must be a finite number, got {bad[1]}", field=bad[0])
    for key in ("project", "description", "tasks"):
        _text(data, key, key)
    for field in _secret_fields(data):
        # before anything else runs: the run's task, records and effect arguments are masked
        # by these names in this process (every process that loads the spec registers them)
        register_secret_field(field)
    base = p.resolve().parent
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError("is required (a non-empty string)", field="name")
    actor_t = vetted(data.get("actor"), "actor", _ACTOR) if "actor" in data else None
    if actor_t is None or "ref" not in actor_t:
        raise SpecError("is required: [actor] ref = 'file.py:function'", field="actor.ref")
    actor_timeout = _number(actor_t, "timeout_s", "actor.timeout_s")
    actor = build_from_ref(actor_t["ref"], actor_t.get("options"), base, "actor")
    verifiers = data.get("verifiers", [])
    if not isinstance(verifiers, list):
        raise SpecError("must be an array of tables ([[verifiers]])", field="verifiers")
    checks = []
    for i, v in enumerate(verifiers):
        where = f"verifiers[{i}]"
        vt = vetted(v, where, _VERIFIER)
        if "ref" not in vt:
            raise SpecError("is required", field=f"{where}.ref")
        vname = _text(vt, "name", f"{where}.name")
        held_out = _flag(vt, "held_out", f"{where}.held_out", False)
        required = _flag(vt, "required", f"{where}.required", True)
        weight = _number(vt, "weight", f"{where}.weight")
        timeout_s = _number(vt, "timeout_s", f"{where}.timeout_s")
        fn = build_from_ref(vt["ref"], vt.get("options"), base, where)
        try:
            checks.append(
                Check(
                    fn=fn,
                    name=vname or str(vt["ref"]).rpartition(":")[2],
                    held_out=held_out,
                    required=required,
                    weight=1.0 if weight is None else float(weight),
                    timeout_s=timeout_s,
                    retry=RetryPolicy.from_dict(vt["retry"], where=f"{where}.retry")
                    if "retry" in vt
                    else None,
                )
            )
        except SpecError:
            raise
        except ConfigError as exc:
            raise _as_spec_error(exc) from None
        except (TypeError, ValueError) as exc:
            raise SpecError(str(exc), field=where) from None
    contract_data = data.get("contract")
    if contract_data is None:
        raise SpecError(
            "is required: the stop contract must be declared before a run", field="contract"
        )
    try:
        refuse_engine_marks(contract_data)  # (a snapshot's, not the author's)
        contract = Contract.from_dict(_with_checks(contract_data, base))
    except SpecError:
        raise
    except ConfigError as exc:
        raise _as_spec_error(exc) from None
    init = build_from_ref(data["init"], None, base, "init") if "init" in data else None
    effects = _effects(data.get("effects", []), base)
    if "model" in data:
        _model_limits(data["model"], [actor, *(c.fn for c in checks)])
    try:
        retry = RetryPolicy.from_dict(data["retry"]) if "retry" in data else RetryPolicy()
        approvals = ApprovalPolicy.from_rules(data.get("approvals"), data.get("authority"))
    except ConfigError as exc:
        raise _as_spec_error(exc) from None
    try:
        return Loop(
            name=name.strip(),
            actor=actor,
            verifiers=checks,
            contract=contract,
            init=init,
            actor_timeout_s=actor_timeout,
            project=data.get("project") or "",
            version=hashlib.sha256(raw).hexdigest()[:16],
            spec_ref=str(p.resolve()),
            options={"tasks": str(base / data["tasks"])} if data.get("tasks") else {},
            effects=effects,
            approvals=approvals,
            retry=retry,
            **reflector_of(data, base),
        )
    except SpecError:
        raise
    except ConfigError as exc:
        raise _as_spec_error(exc) from None


def _effects(tables: Any, base: Path) -> list[Effect]:
    if not isinstance(tables, list):
        raise SpecError("must be an array of tables ([[effects]])", field="effects")
    out = []
    for i, t in enumerate(tables):
        where = f"effects[{i}]"
        et = vetted(t, where, _EFFECT)
        if "ref" not in et:
            raise SpecError("is required", field=f"{where}.ref")
        obj = resolve_ref(et["ref"], base, f"{where}.ref")
        if "options" in et:  # a factory returning an Effect
            if not isinstance(et["options"], Mapping) or not callable(obj):
                raise SpecError("options need a factory and a table", field=f"{where}.options")
            try:
                obj = obj(**et["options"])
            except SystemExit as exc:
                raise SpecError(
                    f"building {et['ref']!r} called sys.exit({exc.code!r})", field=where
                ) from None
            except Exception as exc:
                raise SpecError(f"building {et['ref']!r} failed: {exc}", field=where) from None
        if not isinstance(obj, Effect):
            raise SpecError(
                f"{et['ref']!r} is not an effect: declare it with @loopwright.effect(kind)",
                field=f"{where}.ref",
            )
        out.append(obj)
    return out


def loop_of_run(rec: RunRecord) -> Loop:
    """The loop a run was started from, loaded from its spec file (what the CLI, workers and
    the dashboard resume it with)."""
    if not rec.spec_ref:
        raise ConfigError(
            f"run {rec.run_id} of loop {rec.loop_name!r} was started from Python, not from a "
            "spec file: resume it with Runtime.resume(run_id, loop)",
            field="RUN",
        )
    if not Path(rec.spec_ref).is_file():
        raise SpecError(
            f"the run's spec {rec.spec_ref} is not here (moved, deleted, or on another host): "
            "put it back there to resume the run, or go on from where the spec is now with "
            f"`loopwright fork {rec.run_id[:12]} --at-cycle {rec.cycle} --spec SPEC` (SPEC: "
            "the spec file's path where it is now)",
            field="spec",
        )
    return load_spec(rec.spec_ref)


_SECRETS_OF = 1024
# spec files as loaded: (path, mtime, size, the registry's resets then)
_secrets_of: set[tuple[str, int, int, int]] = set()


def register_run_secrets(rec: RunRecord) -> bool:
    """Register what the run's loop registers when it is built, by building it from its spec
    file: its adapters' API keys and URL credentials, its ``secret_fields``. A process that
    writes a person's value into a run without running its loop (``loopwright edit``, the
    dashboard's edit) masks in it what the loop's own process masks in an actor's proposal;
    it masked only what it had registered itself (usually nothing: a model key pasted into
    an edit was stored in clear). Building an adapter calls nothing. Done once per spec file
    as it is (its path, modification time and size: the dashboard edits many runs of one
    loop). False where the run has no spec file here or it no longer loads: the edit is
    masked for what the process has registered, as before (docs/security.md)."""
    if not rec.spec_ref:
        return False
    try:
        st = os.stat(rec.spec_ref)
    except OSError:
        return False
    key = (rec.spec_ref, st.st_mtime_ns, st.st_size, resets())  # (a reset forgot them)
    if key in _secrets_of:
        return True
    try:
        load_spec(rec.spec_ref)
    except ConfigError:  # (a SpecError too: the edit goes on without)
        return False
    if len(_secrets_of) >= _SECRETS_OF:
        _secrets_of.clear()
    _secrets_of.add(key)
    return True


def _model_limits(table: Any, fns: list[Any]) -> None:
    """``[model.limits]``: hold every model-backed callable (an adapter with ``use_limits``)
    to these per-endpoint limits, shared by all runs in the process."""
    limits = vetted(vetted(table, "model", _MODEL).get("limits", {}), "model.limits", _MODEL_LIMITS)
    adapters = [fn for fn in fns if callable(getattr(fn, "use_limits", None))]
    if limits and not adapters:
        raise SpecError(
            "applies to model adapters (loopwright.adapters), and the actor and verifiers are none",
            field="model.limits",
        )
    for fn in adapters:
        try:
            fn.use_limits(**limits)
        except ConfigError as exc:
            raise SpecError(exc.message, field=f"model.limits.{exc.field}") from None


def _as_spec_error(exc: ConfigError) -> SpecError:
    err = SpecError(str(exc))  # the same text, its field and message as they are
    err.field, err.message = exc.field, exc.message
    return err


def _with_checks(contract: Any, base: Path) -> Any:
    """Resolve ``check = "file.py:fn"`` references in risk rules into callables."""
    if not isinstance(contract, Mapping):
        return contract
    rules = contract.get("risk")
    if not isinstance(rules, list):
        return contract
    out = []
    for i, rule in enumerate(rules):
        if isinstance(rule, Mapping) and isinstance(rule.get("check"), str):
            rule = {**rule, "check": resolve_ref(rule["check"], base, f"contract.risk[{i}].check")}
        out.append(rule)
    return {**contract, "risk": out}
