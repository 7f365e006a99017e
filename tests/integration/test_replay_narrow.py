"""``loopwright replay`` in a narrow terminal (``COLUMNS=40``): its table cut every label,
contract name and figure to "…" and wrapped the rest a word a line (stop 50). Narrower than
the table, each row is a label and each contract's figure whole under it, as ``metrics`` and
``diff`` are shown narrow; wide enough, the table as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwright.cli import main

LDB = Path(__file__).parents[1] / "data/ldb/humaneval/gpt-3.5-turbo-0613/results.jsonl"


def _replay(
    width: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
) -> str:
    for name, cap in (("cap3", 3), ("a-longer-contract-name", 5)):
        (tmp_path / f"{name}.toml").write_text(f"[contract.budget]\nmax_cycles = {cap}\n")
    mp.setenv("COLUMNS", str(width))
    args = ["replay", str(LDB), "--contract", str(tmp_path / "cap3.toml")]
    assert main([*args, "--contract", str(tmp_path / "a-longer-contract-name.toml")]) == 0
    return capsys.readouterr().out


def test_at_40_columns_every_label_name_and_figure_is_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _replay(40, tmp_path, capsys, monkeypatch)
    lines = out.splitlines()
    assert "…" not in out and "┃" not in out, out
    assert all(len(line) <= 40 for line in lines), out
    for label in ("kept / lost vs recorded", "spend_after_last_improvement", "stop reasons"):
        assert label in lines, out
    spend = lines.index("spend")
    assert [x.split()[0] for x in lines[spend + 1 : spend + 4]] == [
        "recorded",
        "cap3",
        "a-longer-contract-name",
    ]
    assert all(x.split()[1].startswith("$") for x in lines[spend + 1 : spend + 4]), out
    reasons = lines[lines.index("stop reasons") + 1 :]
    assert reasons[:3] == ["  recorded", "    budget_cycles 20", "    success 144"], out


def test_wide_enough_it_is_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _replay(160, tmp_path, capsys, monkeypatch)
    assert "┃" in out and "a-longer-contract-name" in out and "…" not in out, out
