"""loopwright: a runtime for governed AI agent loops.

An actor proposes local repairs to named parts of artifacts; visible and held-out verifiers
judge them; an explicit stop contract decides when the work is done, stalled, too expensive,
too risky, or needs a person; every cycle is checkpointed durably.
"""

from __future__ import annotations

from ._contract import (
    RUN_STATUSES,
    STOP_REASONS,
    Budget,
    Contract,
    Escalation,
    MarginalReturn,
    NoProgress,
    RiskRule,
    StopReason,
    Success,
)
from ._effects import EFFECT_KINDS, Effect, EffectCall, EffectResult, effect
from ._engine import RunResult, Runtime
from ._errors import (
    ApprovalError,
    ConfigError,
    ConflictError,
    LoopwrightError,
    RunNotFoundError,
    SpecError,
    StaleLeaseError,
    StoreCorruptError,
    StoreError,
)
from ._loop import Check, Loop
from ._memory import DEFAULT_STRENGTH, FeedbackMemory, MemoryItem, MemoryNotFoundError
from ._metrics import METRIC_NAMES, Metrics, RunMetrics, compute_metrics
from ._policy import ApprovalPolicy, PolicyRule
from ._proposal import Context, Edit, Proposal, Remaining, Verdict
from ._question import Question
from ._retry import (
    NeedsHumanError,
    PermanentError,
    RetryPolicy,
    TransientError,
    classify,
)
from ._spec import load_spec
from ._state import Artifact, Finding, Part, PlanStep, TaskState, Version
from ._usage import Usage

__all__ = [
    "DEFAULT_STRENGTH",
    "EFFECT_KINDS",
    "METRIC_NAMES",
    "RUN_STATUSES",
    "STOP_REASONS",
    "ApprovalError",
    "ApprovalPolicy",
    "Artifact",
    "Budget",
    "Check",
    "ConfigError",
    "ConflictError",
    "Context",
    "Contract",
    "Edit",
    "Effect",
    "EffectCall",
    "EffectResult",
    "Escalation",
    "FeedbackMemory",
    "Finding",
    "Loop",
    "LoopwrightError",
    "MarginalReturn",
    "MemoryItem",
    "MemoryNotFoundError",
    "Metrics",
    "NeedsHumanError",
    "NoProgress",
    "Part",
    "PermanentError",
    "PlanStep",
    "PolicyRule",
    "Proposal",
    "Question",
    "Remaining",
    "RetryPolicy",
    "RiskRule",
    "RunMetrics",
    "RunNotFoundError",
    "RunResult",
    "Runtime",
    "SpecError",
    "StaleLeaseError",
    "StopReason",
    "StoreCorruptError",
    "StoreError",
    "Success",
    "TaskState",
    "TransientError",
    "Usage",
    "Verdict",
    "Version",
    "__version__",
    "classify",
    "compute_metrics",
    "effect",
    "load_spec",
]

__version__ = "0.1.0"
