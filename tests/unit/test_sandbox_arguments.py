"""The sandbox verifier's arguments from Python (outside probe pyapi47).

``CommandVerifier(tests="assert f() == 1")`` made one test per character (15 failing tests,
``'a'``, ``'s'``...), though a task's ``tests_key`` holding one string is one script; a
negative or NaN ``test_timeout_s``, a ``Limits(memory_mb="x")`` or a dict for ``limits`` were
taken and failed later (a ValueError from ``run_tests``, or a sandbox that crashed at start).
Each is now a ``ConfigError`` naming it when the verifier is made."""

from __future__ import annotations

import math
from typing import Any

import pytest

import loopwright as lw
from loopwright.verifiers import CommandVerifier, Limits, python_tests_verifier, run_tests


def test_one_string_of_tests_is_one_script() -> None:
    assert CommandVerifier(tests="assert f() == 1").tests == ("assert f() == 1",)
    r = run_tests("def f():\n    return 1\n", "assert f() == 1", allow_unisolated=True)
    assert [t.test for t in r.tests] == ["assert f() == 1"] and r.tests[0].passed


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("test_timeout_s", {"test_timeout_s": -1}),
        ("test_timeout_s", {"test_timeout_s": math.nan}),
        ("test_timeout_s", {"test_timeout_s": "1"}),
        ("timeout_s", {"timeout_s": 0}),
        ("test_wall_s", {"test_wall_s": math.inf}),
        ("limits", {"limits": {"memory_mb": 512}}),
        ("tests", {"tests": 5}),
        ("tests", {"tests": {"a": "assert 1"}}),
        ("tests_key", {"tests_key": ""}),
        ("artifact", {"artifact": 5}),
        ("part", {"part": None}),
    ],
)
def test_a_wrong_verifier_argument_is_a_config_error(field: str, kw: dict[str, Any]) -> None:
    with pytest.raises(lw.ConfigError) as err:
        CommandVerifier(**kw)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("field", "kw"),
    [("memory_mb", {"memory_mb": "x"}), ("cpu_s", {"cpu_s": 0}), ("processes", {"processes": 2.5})],
)
def test_wrong_limits_are_config_errors(field: str, kw: dict[str, Any]) -> None:
    with pytest.raises(lw.ConfigError) as err:
        Limits(**kw)
    assert err.value.field == field
    with pytest.raises(lw.ConfigError):
        python_tests_verifier(memory_mb=-1)


def test_run_tests_refuses_a_nan_timeout_before_running() -> None:
    with pytest.raises(lw.ConfigError) as err:
        run_tests("x = 1", ["assert x"], test_timeout_s=math.nan, allow_unisolated=True)
    assert err.value.field == "test_timeout_s"
