"""polish54: docs/replay.md's sample figures are what `loopwright replay` prints for the
command it shows: after the CLI took one form for dollars (`$5.96`, not `$5.9606`), the page
still quoted the old form. Every dollar amount the page quotes for that command is in the
command's output (the wide table and the narrow one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loopwright.cli import main

ROOT = Path(__file__).resolve().parents[2]
LDB = ROOT / "tests/data/ldb/humaneval/gpt-3.5-turbo-0613/results.jsonl"


def _replay(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cols: int) -> str:
    monkeypatch.setenv("COLUMNS", str(cols))
    capsys.readouterr()
    args = ["replay", str(LDB)]
    for c in ("ldb_policy", "loop"):
        args += ["--contract", str(ROOT / f"examples/code_repair/{c}.toml")]
    assert main(args) == 0
    return capsys.readouterr().out


def test_the_pages_dollar_figures_are_what_replay_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not LDB.exists():
        pytest.skip("the LDB recording is not in this checkout")
    page = (ROOT / "docs/replay.md").read_text(encoding="utf-8")
    table = [x for x in page.splitlines() if x.startswith("| ") and "$" in x]
    narrow = re.findall(r"\(`(  recorded +\$[^`]+)`\)", page)
    assert table and narrow, "docs/replay.md: the sample table and the narrow line"
    wide = _replay(capsys, monkeypatch, 200)
    for row in table:
        name = row.split("|")[1].strip()
        [printed] = [x for x in wide.splitlines() if x.startswith(f"│ {name} ")]
        for amount in re.findall(r"\$[\d.,]+\d(?: \([\d.]+%\))?", row):
            assert amount in printed, (row, printed)
    lines = _replay(capsys, monkeypatch, 40).splitlines()
    assert narrow[0] in lines, (narrow[0], lines[:40])
