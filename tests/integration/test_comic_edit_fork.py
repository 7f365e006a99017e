"""The walkthrough of examples/comic_pages/README.md ("Edit a panel, fork, compare"), command
by command and offline: the creator rewrites one panel's dialogue and its balloon while the run
is parked, the loop goes on from that version (the panel is not re-rendered, page 4 carries it,
the pages are published once), and a fork from before the edit with a stricter contract makes a
second version of the pages, published on its own, which `loopwright diff` compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwright.cli import main

HERE = Path(__file__).resolve().parents[2] / "examples" / "comic_pages"
SPEC, STRICT = HERE / "loop.toml", HERE / "strict.toml"
KEY, FORK = "lantern-harbor/pages-3-5", "lantern-harbor/pages-3-5/strict"
ONE_EXPORT = ["publish:lantern-harbor/pages-3-4-5"]
STORYBOARD_LINE = "Your father hid more than a key."
EDITED_LINE = "Your father hid more than a map."
DIALOGUE = [
    {"speaker": "ilse", "text": EDITED_LINE},
    {"speaker": "mara", "text": "Aunt Ilse, what do you mean?"},
]


def _lw(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, str]:
    """One `loopwright` command in this process: (exit code, what it printed)."""
    capsys.readouterr()
    code = main([*args, "--store", str(store)])
    return code, capsys.readouterr().out


def _show(capsys: pytest.CaptureFixture[str], store: Path, run: str) -> dict[str, Any]:
    code, out = _lw(capsys, store, "show", run, "--json")
    assert code == 0, out
    shown: dict[str, Any] = json.loads(out)
    return shown


def _versions(shown: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    artifact, name = ref.split("/")
    [art] = [a for a in shown["state"]["artifacts"] if a["name"] == artifact]
    [part] = [p for p in art["parts"] if p["name"] == name]
    versions: list[dict[str, Any]] = part["versions"]
    return versions


def test_edit_a_panel_mid_run_then_fork_before_the_edit_and_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exports = tmp_path / "exports"
    monkeypatch.setenv("COMIC_EXPORT_DIR", str(exports))
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "comic.db"
    folder = exports / "lantern-harbor"

    # 1. The run parks on the canon change of p4-3 (cycle 9); p4-1 is drawn and accepted.
    assert _lw(capsys, store, "run", str(SPEC))[0] == 4
    parked = _show(capsys, store, KEY)
    assert parked["run"]["cycle"] == 9
    [drawn] = [v for v in _versions(parked, "p4-1/svg") if v["status"] == "accepted"][-1:]
    assert ">than a key.<" in drawn["value"]

    # 2. The creator rewrites Ilse's line and its balloon by hand, the run still parked.
    svg = tmp_path / "p4-1.svg"
    svg.write_text(drawn["value"].replace(">than a key.<", ">than a map.<"))
    code, out = _lw(
        capsys, store, "edit", KEY, "p4-1/dialogue", "--by", "creator",
        "--note", "a map, not a key", "--value", json.dumps(DIALOGUE),
    )  # fmt: skip
    assert code == 0 and "edited by creator, now awaiting_approval" in out, out
    code, out = _lw(
        capsys, store, "edit", KEY, "p4-1/svg", "--by", "creator", "--file", str(svg),
        "--note", "the balloon says it too",
    )  # fmt: skip
    assert code == 0, out
    assert not folder.exists()  # nothing published while parked

    # 3. Approve the canon change and resume: the loop goes on from the creator's panel.
    code, out = _lw(capsys, store, "approve", KEY, "--by", "creator", "--resume")
    assert code == 0 and "accepted (success)" in out, out
    done = _show(capsys, store, KEY)
    for ref in ("p4-1/dialogue", "p4-1/svg"):
        last = _versions(done, ref)[-1]
        assert (last["status"], last["cycle"]) == ("accepted", 9), ref  # the person's version
    assert _versions(done, "p4-1/svg")[-1]["value"] == svg.read_text()  # never re-rendered
    assert _versions(done, "p4-1/dialogue")[-1]["value"] == DIALOGUE
    edited = [e for e in done["events"] if e["kind"] == "edited"]
    assert [(e["data"]["part"], e["data"]["by"]) for e in edited] == [
        ("p4-1/dialogue", "creator"),
        ("p4-1/svg", "creator"),
    ]
    assert all(e["data"]["override"] for e in edited)  # both were accepted before
    page4 = (folder / "page-4.svg").read_text()
    assert ">than a map.<" in page4 and ">than a key.<" not in page4
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT
    assert _lw(capsys, store, "resume", KEY)[0] in (0, 2)  # an accepted run: nothing to do
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT

    # 4. Fork from cycle 8 (before the edit) with a stricter contract, and finish the fork.
    code, out = _lw(
        capsys, store, "fork", KEY, "--at-cycle", "8", "--contract", str(STRICT), "--key", FORK
    )
    assert code == 0, out
    assert _lw(capsys, store, "resume", FORK)[0] == 4  # the fork meets p4-3's canon change too
    code, out = _lw(capsys, store, "approve", FORK, "--by", "creator", "--resume")
    assert code == 0 and "accepted (success)" in out, out
    fork = _show(capsys, store, FORK)
    assert (fork["run"]["forked_from"], fork["run"]["forked_at"]) == (done["run"]["run_id"], 8)
    assert _versions(fork, "p4-1/dialogue")[-1]["value"][0]["text"] == STORYBOARD_LINE
    assert not [e for e in fork["events"] if e["kind"] == "edited"]
    # its pages are a second version, in their own folder; the origin's are not published again
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT
    edition = folder / f"fork-{fork['run']['run_id'][:12]}"
    assert (edition / "publish.log").read_text().splitlines() == [f"{ONE_EXPORT[0]}@{edition.name}"]
    assert ">than a key.<" in (edition / "page-4.svg").read_text()

    # 5. Compare: the stricter contract, and the pages part by part.
    code, out = _lw(capsys, store, "diff", KEY, FORK, "--json")
    assert code == 0, out
    diff = json.loads(out)
    assert diff["contract"]["success.min_score"] == {"a": 0.99, "b": 1.0}
    assert diff["contract"]["no_progress.cycles"] == {"a": 3, "b": 2}
    differ = sorted(p["part"] for p in diff["parts"] if not p["same"])
    assert differ == ["p4-1/dialogue", "p4-1/svg", "page-4/assembly", "page-4/picture"]
    code, out = _lw(capsys, store, "diff", KEY, FORK)
    assert code == 0 and "p4-1/dialogue" in out and "success.min_score" in out
