"""The walkthrough of examples/comic_pages/README.md ("Edit a panel, fork, compare"), command
by command and offline: the creator rewrites one panel's dialogue and recolours Mara's coat
while the run is parked; the loop goes on from that version (the panel is not re-rendered,
page 4 carries it, later panels follow the coat, the pages are published once), and a fork from
before the edit with a stricter contract makes a second version of the pages, published on its
own, which `loopwright diff` compares."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright.cli import main

HERE = Path(__file__).resolve().parents[2] / "examples" / "comic_pages"
SPEC, STRICT = HERE / "loop.toml", HERE / "strict.toml"
KEY, FORK = "lantern-harbor/pages-3-5", "lantern-harbor/pages-3-5/strict"
ONE_EXPORT = ["publish:lantern-harbor/pages-3-4-5"]
STORYBOARD_LINE = "Your father hid more than a key."
BLUE, GREEN = "#1f4e9c", "#2e7d32"  # Mara's coat on the sheet, and as the creator paints it
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


def _mara(shown: dict[str, Any], panel: str) -> dict[str, Any]:
    [mara] = [
        f for f in _versions(shown, f"{panel}/figures")[-1]["value"] if f["character"] == "mara"
    ]
    return mara


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
    assert _mara(parked, "p4-1")["coat"] == BLUE

    # 2. The creator rewrites Ilse's line and paints Mara's coat green, the run still parked.
    svg = tmp_path / "p4-1.svg"
    painted, n = re.subn(
        r'(data-character="mara">\s*<rect data-role="coat"[^>]*fill=")' + BLUE,
        r"\g<1>" + GREEN,
        drawn["value"].replace(">than a key.<", ">than a map.<"),
    )
    assert n == 1
    svg.write_text(painted)
    figures = [
        {**f, "coat": GREEN} if f["character"] == "mara" else f
        for f in _versions(parked, "p4-1/figures")[-1]["value"]
    ]
    code, out = _lw(
        capsys, store, "edit", KEY, "p4-1/dialogue", "--by", "creator",
        "--note", "a map, not a key", "--value", json.dumps(DIALOGUE),
    )  # fmt: skip
    assert code == 0 and "edited by creator, now awaiting_approval" in out, out
    code, out = _lw(
        capsys, store, "edit", KEY, "p4-1/figures", "--by", "creator",
        "--value", json.dumps(figures), "--note", "Mara's coat is green from here on",
    )  # fmt: skip
    assert code == 0, out
    code, out = _lw(
        capsys, store, "edit", KEY, "p4-1/svg", "--by", "creator", "--file", str(svg),
        "--note", "the balloon and the coat, as I drew them",
    )  # fmt: skip
    assert code == 0, out
    # p4-3, the panel the parked request draws, waits for the decision
    code, _ = _lw(capsys, store, "edit", KEY, "p4-3/dialogue", "--by", "creator", "--value", "[]")
    assert code == 2
    assert not folder.exists()  # nothing published while parked

    # 3. Approve the canon change and resume: the loop goes on from the creator's panel.
    code, out = _lw(capsys, store, "approve", KEY, "--by", "creator", "--resume")
    assert code == 0 and "accepted (success)" in out, out
    done = _show(capsys, store, KEY)
    for ref in ("p4-1/dialogue", "p4-1/figures", "p4-1/svg"):
        last = _versions(done, ref)[-1]
        assert (last["status"], last["cycle"]) == ("accepted", 9), ref  # the person's version
    assert _versions(done, "p4-1/svg")[-1]["value"] == svg.read_text()  # never re-rendered
    assert _versions(done, "p4-1/dialogue")[-1]["value"] == DIALOGUE
    edited = [e for e in done["events"] if e["kind"] == "edited"]
    assert [(e["data"]["part"], e["data"]["by"]) for e in edited] == [
        ("p4-1/dialogue", "creator"),
        ("p4-1/figures", "creator"),
        ("p4-1/svg", "creator"),
    ]
    assert all(e["data"]["override"] for e in edited)  # both were accepted before
    assert done["run"]["held_out_passed"] is True
    # later panels follow the creator's coat, citing the edit; p4-3, drawn before it, does not
    for panel in ("p5-1", "p5-3"):
        assert _mara(done, panel)["coat"] == GREEN, panel
        assert _mara(done, panel)["edits"] == ["edit:p4-1/figures@v2"]
        assert f'fill="{GREEN}"' in _versions(done, f"{panel}/svg")[-1]["value"]
    assert _mara(done, "p4-3")["coat"] == BLUE
    page4 = (folder / "page-4.svg").read_text()
    assert ">than a map.<" in page4 and ">than a key.<" not in page4
    assert GREEN in (folder / "page-5.svg").read_text()
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
    assert {_mara(fork, p)["coat"] for p in ("p4-1", "p5-1", "p5-3")} == {BLUE}
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
    assert differ == [
        *("p4-1/dialogue", "p4-1/figures", "p4-1/svg"),
        *("p5-1/figures", "p5-1/svg", "p5-3/figures", "p5-3/svg"),
        *("page-4/assembly", "page-4/picture", "page-5/assembly", "page-5/picture"),
    ]
    code, out = _lw(capsys, store, "diff", KEY, FORK)
    assert code == 0 and "p4-1/dialogue" in out and "success.min_score" in out


def test_a_cited_edit_must_exist_for_its_colour_to_pass() -> None:
    """The identity check reads the cited edit itself: a figure citing an edit that was never
    made (or a version that does not set that colour) is a palette finding."""
    loop = lw.load_spec(SPEC)
    comic = loop.actor.__globals__  # the spec's module
    task = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
    state: lw.TaskState = comic["init"](task)
    sheet = comic["_project"](task)["sheet"]
    figs = [comic["_figure"](sheet, "mara", 200)]
    figs[0]["coat"] = GREEN
    state.set_part("p3-1", "figures", figs, 1)
    state.set_part("p3-1", "svg", comic["render"]("p3-1", figs, [], []), 1)
    for part in ("bubbles", "dialogue"):
        state.set_part("p3-1", part, [], 1)

    def palette(st: lw.TaskState) -> list[str]:
        v = comic["identity"](st, lw.Proposal())
        return [f.artifact for f in v.findings if f.dimension == "palette"]

    assert palette(state) == ["p3-1"]  # green, and nobody asked for it
    state.notes.append({"kind": "edit", "part": "p3-1/figures", "version": 1, "by": "creator"})
    assert palette(state) == []  # the person painted it here
    later = [{**comic["_figure"](sheet, "mara", 200), "coat": GREEN}]
    state.set_part("p3-2", "figures", later, 2)
    state.set_part("p3-2", "svg", comic["render"]("p3-2", later, [], []), 2)
    for part in ("bubbles", "dialogue"):
        state.set_part("p3-2", part, [], 2)
    assert "p3-2" in palette(state)  # no citation
    later[0]["edits"] = ["edit:p3-1/figures@v7"]  # a version that was never edited
    state.set_part("p3-2", "figures", later, 2)
    assert "p3-2" in palette(state)
    later[0]["edits"] = ["edit:p3-1/figures@v1"]
    state.set_part("p3-2", "figures", later, 2)
    assert "p3-2" not in palette(state)


def test_edit_a_panel_from_the_dashboard_while_parked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same edit from the run page's Edit boxes; the approval from the API resumes the run
    in the background, which goes on from the creator's panel and publishes once."""
    import time

    exports = tmp_path / "exports"
    monkeypatch.setenv("COMIC_EXPORT_DIR", str(exports))
    store = str(tmp_path / "comic.db")
    loop = lw.load_spec(SPEC)
    task = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
    with lw.Runtime(store) as rt:
        run_id = rt.run_sync(loop, task, task_key=KEY).run_id
    token = "comic-token-0123456789"
    c = dashboard(store, token=token, identity="creator")
    assert c.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
    page = c.get(f"/runs/{run_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf and 'data-ref="p4-1/dialogue"' in page
    state = c.get(f"/api/runs/{run_id}").json()
    assert state["run"]["status"] == "awaiting_approval"
    # the API shortens long values: the panel as drawn comes from the store
    with lw.Runtime(store) as rt:
        drawn = rt.store.checkpoints(run_id)[-1].task_state().part("p4-1/svg")
        assert drawn is not None
        painted = str(drawn.value).replace(">than a key.<", ">than a map.<")
    form = {"csrf": csrf.group(1), "note": "a map, not a key"}
    for ref, value in (("p4-1/dialogue", json.dumps(DIALOGUE)), ("p4-1/svg", painted)):
        # a browser sends a textarea's line ends as CRLF
        r = c.post(
            f"/runs/{run_id}/edit",
            data={**form, "ref": ref, "value": value.replace("\n", "\r\n")},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
    [req] = c.get("/api/approvals").json()
    ok = c.post(
        f"/api/approvals/{req['approval_id']}/approve",
        headers={"Authorization": f"Bearer {token}"},
        json={"note": "new canon"},
    )
    assert ok.status_code == 200, ok.text
    for t in c.app.state.resumes:  # type: ignore[attr-defined]
        t.join(120)
    deadline = time.monotonic() + 120
    while c.get(f"/api/runs/{run_id}").json()["run"]["status"] != "accepted":
        assert time.monotonic() < deadline, "the resumed run did not finish"
        time.sleep(0.1)
    with lw.Runtime(store) as rt:
        final = rt.store.checkpoints(run_id)[-1].task_state()
    part = final.part("p4-1/svg")
    assert part is not None and part.value == painted  # the creator's, not re-rendered
    assert final.part("p4-1/dialogue").value == DIALOGUE  # type: ignore[union-attr]
    folder = exports / "lantern-harbor"
    assert ">than a map.<" in (folder / "page-4.svg").read_text()
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT
    edits = c.get(f"/api/runs/{run_id}").json()["edits"]
    assert [(e["part"], e["by"]) for e in edits] == [
        ("p4-1/dialogue", "creator"),
        ("p4-1/svg", "creator"),
    ]
