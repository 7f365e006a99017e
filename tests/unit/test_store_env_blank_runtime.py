"""A ``LOOPWRIGHT_STORE`` of blanks only is refused by ``Runtime()`` too, not only by the CLI
(outside49 refused it in the CLI alone: ``lw.Runtime()`` still made a store file named " ")."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw


def test_a_blank_store_variable_is_refused_by_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPWRIGHT_STORE", "  ")
    with pytest.raises(lw.ConfigError) as err:
        lw.Runtime()
    assert "is blank" in str(err.value) and "LOOPWRIGHT_STORE" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # no store file " " made
