"""Verifiers: checks that judge a candidate state.

``sandbox`` runs untrusted Python candidate code with its tests in a resource-limited,
network-less subprocess and reports per-test results as located findings.
"""

from __future__ import annotations

from .sandbox import (
    DEFAULT_PREAMBLE,
    CommandVerifier,
    Limits,
    SandboxResult,
    SandboxUnavailableError,
    TestResult,
    python_tests_verifier,
    run_tests,
    sandbox_boundary,
)

__all__ = [
    "DEFAULT_PREAMBLE",
    "CommandVerifier",
    "Limits",
    "SandboxResult",
    "SandboxUnavailableError",
    "TestResult",
    "python_tests_verifier",
    "run_tests",
    "sandbox_boundary",
]
