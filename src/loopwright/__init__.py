"""loopwright: a runtime for governed AI agent loops.

An actor proposes local repairs to named parts of artifacts; visible and held-out verifiers
judge them; an explicit stop contract decides when the work is done, stalled, too expensive,
too risky, or needs a person; every cycle is checkpointed durably.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._contract import RUN_STATUSES, STOP_REASONS, Contract, StopReason
    from ._contract_rules import (
        DEFAULT_MAX_CRASHES,
        DEFAULT_MAX_CYCLES,
        Budget,
        Escalation,
        MarginalReturn,
        NoProgress,
        RiskRule,
        Success,
    )
    from ._effects import EFFECT_KINDS, Effect, EffectCall, EffectResult, effect
    from ._engine import RunResult, Runtime
    from ._errors import (
        ApprovalError,
        ConfigError,
        ConflictError,
        EffectKeyHeld,
        LoopwrightError,
        NotPermittedError,
        RunNotFoundError,
        SpecError,
        StaleLeaseError,
        StoreCorruptError,
        StoreError,
        StoreUnavailableError,
    )
    from ._loop import Check, Loop
    from ._memory import DEFAULT_STRENGTH, FeedbackMemory, MemoryItem, MemoryNotFoundError
    from ._metrics import METRIC_NAMES, Metrics, RunMetrics, compute_metrics
    from ._owncalls import ModelCall, model_call, record_model_call
    from ._policy import ApprovalPolicy, EarnedAuthority, PolicyRule
    from ._proposal import Context, Edit, Proposal, Remaining
    from ._question import Question
    from ._redact import register_secret, register_secret_field
    from ._retry import (
        NeedsHumanError,
        PermanentError,
        RefusedError,
        RetryPolicy,
        TransientError,
        classify,
    )
    from ._spec import load_spec
    from ._state import Artifact, Finding, Part, PlanStep, TaskState, Version
    from ._usage import Usage
    from ._verdict import Verdict
    from ._worker import Worker, WorkerStats
    from .store import Approval, JournalEntry, RunRecord

    __version__: str

__all__ = [
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_MAX_CYCLES",
    "DEFAULT_STRENGTH",
    "EFFECT_KINDS",
    "METRIC_NAMES",
    "RUN_STATUSES",
    "STOP_REASONS",
    "Approval",
    "ApprovalError",
    "ApprovalPolicy",
    "Artifact",
    "Budget",
    "Check",
    "ConfigError",
    "ConflictError",
    "Context",
    "Contract",
    "EarnedAuthority",
    "Edit",
    "Effect",
    "EffectCall",
    "EffectKeyHeld",
    "EffectResult",
    "Escalation",
    "FeedbackMemory",
    "Finding",
    "JournalEntry",
    "Loop",
    "LoopwrightError",
    "MarginalReturn",
    "MemoryItem",
    "MemoryNotFoundError",
    "Metrics",
    "ModelCall",
    "NeedsHumanError",
    "NoProgress",
    "NotPermittedError",
    "Part",
    "PermanentError",
    "PlanStep",
    "PolicyRule",
    "Proposal",
    "Question",
    "RefusedError",
    "Remaining",
    "RetryPolicy",
    "RiskRule",
    "RunMetrics",
    "RunNotFoundError",
    "RunRecord",
    "RunResult",
    "Runtime",
    "SpecError",
    "StaleLeaseError",
    "StopReason",
    "StoreCorruptError",
    "StoreError",
    "StoreUnavailableError",
    "Success",
    "TaskState",
    "TransientError",
    "Usage",
    "Verdict",
    "Version",
    "Worker",
    "WorkerStats",
    "__version__",
    "classify",
    "compute_metrics",
    "effect",
    "load_spec",
    "model_call",
    "record_model_call",
    "register_secret",
    "register_secret_field",
]

# `import loopwright` stays cheap (the CLI and short scripts start fast): each name is imported
# from its module on first use (PEP 562); `from loopwright import X` works as before.
_LAZY_FROM = {
    "._contract": "RUN_STATUSES STOP_REASONS Contract StopReason",
    "._contract_rules": "DEFAULT_MAX_CRASHES DEFAULT_MAX_CYCLES Budget Escalation MarginalReturn NoProgress RiskRule Success",
    "._effects": "EFFECT_KINDS Effect EffectCall EffectResult effect",
    "._engine": "RunResult Runtime",
    "._errors": "ApprovalError ConfigError ConflictError LoopwrightError RunNotFoundError SpecError StaleLeaseError StoreCorruptError StoreError StoreUnavailableError EffectKeyHeld NotPermittedError",
    "._loop": "Check Loop",
    "._memory": "DEFAULT_STRENGTH FeedbackMemory MemoryItem MemoryNotFoundError",
    "._metrics": "METRIC_NAMES Metrics RunMetrics compute_metrics",
    "._owncalls": "ModelCall model_call record_model_call",
    "._policy": "ApprovalPolicy EarnedAuthority PolicyRule",
    "._proposal": "Context Edit Proposal Remaining",
    "._question": "Question",
    "._redact": "register_secret register_secret_field",
    "._retry": "NeedsHumanError PermanentError RefusedError RetryPolicy TransientError classify",
    "._spec": "load_spec",
    "._state": "Artifact Finding Part PlanStep TaskState Version",
    "._usage": "Usage",
    "._verdict": "Verdict",
    "._worker": "Worker WorkerStats",
    ".store": "Approval JournalEntry RunRecord",  # what Runtime.create, fork, approve, settle_effect... return
}
_LAZY = {name: mod for mod, names in _LAZY_FROM.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("loopwright")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            value = "0+unknown"
    elif name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API and the module's dunders: not its helpers (``_LAZY``), nor the names
    its own code imports (``Any``, ``TYPE_CHECKING``, ``annotations``: polish52), which
    ``dir(loopwright)`` and a REPL's completion offered as if they were loopwright's."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})
