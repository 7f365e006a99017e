"""Shared fixtures: a fresh store per test, and a runtime over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import loopwright as lw

settings.register_profile(
    "loopwright",
    deadline=None,  # the store fsyncs; a slow disk must not fail a property test
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("loopwright")


@pytest.fixture(autouse=True)
def _clean_text_cache_empty() -> None:
    """Each test starts with the redaction net's cache of clean texts empty: it is bounded
    (256 texts) and cleared when full, so what a test measured with tracemalloc depended on
    what earlier tests in the same worker had left in it (a CI run measured 0.25x where the
    same test alone measured 0.13x)."""
    from loopwright import _redact

    _redact._clean_texts.clear()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def rt(store_path: Path) -> Iterator[lw.Runtime]:
    runtime = lw.Runtime(str(store_path))
    try:
        yield runtime
    finally:
        runtime.close()
