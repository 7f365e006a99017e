"""The comic workload (examples/comic_pages) through the real engine: one approval finishes the
three pages, repairs are local, the pages are exported exactly once, and a project-scoped
correction in feedback memory is honoured by that project only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "comic_pages"
SPEC = HERE / "loop.toml"
TASK: dict[str, Any] = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
GREEN = "#2e7d32"  # "green" in the actor's colour table
SHEET_BLUE = "#1f4e9c"  # Mara's coat on the character sheet
ONE_EXPORT = ["publish:lantern-harbor/pages-3-4-5"]  # the journaled key


@pytest.fixture
def exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "exports"
    monkeypatch.setenv("COMIC_EXPORT_DIR", str(out))
    return out


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[lw.Runtime]:
    with lw.Runtime(str(tmp_path / "comic.db")) as runtime:
        yield runtime


def _finish(rt: lw.Runtime, loop: lw.Loop, task: dict[str, Any]) -> lw.RunResult:
    r = rt.run_sync(loop, task, task_key=task["task_key"])
    assert r.status == "awaiting_approval"
    rt.approve(r.run_id, by="creator", note="the key was her mother's: new canon")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")
    return done


def _state(rt: lw.Runtime, run_id: str) -> lw.TaskState:
    return rt.store.checkpoints(run_id)[-1].task_state()


def _mara_coats(state: lw.TaskState) -> set[str]:
    return {
        f["coat"]
        for name, art in state.artifacts.items()
        if "figures" in art.parts
        for f in art.values()["figures"]
        if f["character"] == "mara"
    }


def test_three_pages_with_one_approval_export_once(rt: lw.Runtime, exports: Path) -> None:
    loop = lw.load_spec(SPEC)
    r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
    assert r.status == "awaiting_approval"
    [req] = rt.store.approvals(run_id=r.run_id)
    assert req.rule == "canon_change"
    text = json.dumps(req.evidence)
    assert "F1" in text and "page 1, panel 2" in text  # the fact and its source
    assert not (exports / "lantern-harbor").exists()  # nothing published while parked

    rt.approve(r.run_id, by="creator")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")
    assert done.held_out_passed is True
    folder = exports / "lantern-harbor"
    files = {p.name for p in folder.iterdir()}
    assert {"page-3.svg", "page-4.svg", "page-5.svg", "lantern-harbor.html"} <= files
    for n in (3, 4, 5):
        assert (folder / f"page-{n}.svg").read_text().count("data-panel=") == 3
    assert (folder / "lantern-harbor.html").read_text().count("<svg") == 3 + 9
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT
    _check_png_pdf(folder)
    ocr = _held_out_proof(rt, r.run_id)
    assert ocr["ocr"] == "ran", ocr
    assert len(ocr["ocr_panels"]) == 9 and all(p["passed"] for p in ocr["ocr_panels"].values())

    state = _state(rt, r.run_id)
    assert all(s.status == "done" for s in state.plan)
    svgs = {n: a.parts["svg"].accepted for n, a in state.artifacts.items() if "svg" in a.parts}
    assert len(svgs) == 9 and all(v is not None for v in svgs.values())
    # resumed again, and started again under the same key: no re-render, no second export
    before = [c.seq for c in rt.store.checkpoints(r.run_id)]
    assert rt.resume_sync(r.run_id, loop).status == "accepted"
    assert rt.run_sync(loop, TASK, task_key=TASK["task_key"]).run_id == r.run_id
    assert [c.seq for c in rt.store.checkpoints(r.run_id)] == before
    assert (folder / "publish.log").read_text().splitlines() == ONE_EXPORT


def _check_png_pdf(folder: Path) -> None:
    """One PNG per page, of the page SVG's size times the export zoom; one PDF, a page each."""
    import re

    from PIL import Image

    manifest = json.loads((folder / "manifest.json").read_text())
    for n in (3, 4, 5):
        png = folder / f"page-{n}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        svg = (folder / f"page-{n}.svg").read_text()
        w, h = (int(x) for x in re.search(r'width="(\d+)" height="(\d+)"', svg).groups())
        assert (w, h) == (420, 940)
        with Image.open(png) as im:
            im.verify()
        with Image.open(png) as im:
            assert im.format == "PNG" and im.size == (2 * w, 2 * h)
        assert png.name in manifest["files"]
    pdf = (folder / "lantern-harbor.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-")
    assert len(re.findall(rb"/Type\s*/Page\b", pdf)) == 3
    assert "lantern-harbor.pdf" in manifest["files"]


def _held_out_proof(rt: lw.Runtime, run_id: str) -> dict[str, Any]:
    """The evidence of the held-out ``proof`` verdict of the run's last recorded cycle."""
    records = [c.record for c in rt.store.checkpoints(run_id) if c.record]
    proof: dict[str, Any] = next(
        r["held_out"]["proof"]["evidence"] for r in reversed(records) if r.get("held_out")
    )
    return proof


def test_faults_are_repaired_locally(rt: lw.Runtime, exports: Path) -> None:
    loop = lw.load_spec(SPEC)
    done = _finish(rt, loop, dict(TASK))
    state = _state(rt, done.run_id)
    comic = loop.actor.__globals__  # the spec's module
    faults: dict[str, str] = comic["_faults"](TASK)
    assert len(faults) == 6
    where = {
        "wrong_palette": "figures",
        "missing_character": "figures",
        "bubble_over_face": "bubbles",
        "text_too_small": "bubbles",
        "low_contrast": "bubbles",
        "canon_slip": "dialogue",
    }
    for pid, fault in faults.items():
        art = state.artifacts[pid]
        fixed = where[fault]
        assert len(art.parts[fixed].versions) == 2, (pid, fault)  # drawn, then repaired once
        for other in ("figures", "bubbles", "dialogue"):
            if other != fixed:
                assert len(art.parts[other].versions) == 1, (pid, fault, other)  # untouched
    clean = [p for p, a in state.artifacts.items() if "svg" in a.parts and p not in faults]
    assert clean and all(len(state.artifacts[p].parts["svg"].versions) == 1 for p in clean)


def test_memory_correction_is_project_scoped(rt: lw.Runtime, exports: Path) -> None:
    loop = lw.load_spec(SPEC)
    rt.memory.add(
        scope="project",
        scope_key="lantern-harbor",
        signal="correction",
        text="Mara's coat is green in this series",
        by="creator",
    )
    ours = _finish(rt, loop, dict(TASK))
    other = {**TASK, "task_key": "tide-school/pages-3-5", "project": "tide-school"}
    theirs = _finish(rt, loop, other)
    assert _mara_coats(_state(rt, ours.run_id)) == {GREEN}
    assert _mara_coats(_state(rt, theirs.run_id)) == {SHEET_BLUE}
    assert f'fill="{GREEN}"' in (exports / "lantern-harbor" / "page-3.svg").read_text()
    assert f'fill="{GREEN}"' not in (exports / "tide-school" / "page-3.svg").read_text()


def test_ocr_reads_a_panel_and_fails_tiny_text() -> None:
    """The held-out OCR check runs here (tesseract + resvg) and really reads the dialogue back;
    the same panel with 5 px text fails it."""
    loop = lw.load_spec(SPEC)
    comic = loop.actor.__globals__
    assert comic["ocr_skipped"]() is None, comic["ocr_skipped"]()
    panel = next(p for p in comic["_panels"](TASK) if p["id"] == "p3-2")
    sheet = comic["_project"](TASK)["sheet"]
    n = len(panel["characters"])
    figures = [
        comic["_figure"](sheet, w, comic["_slot"](i, n)) for i, w in enumerate(panel["characters"])
    ]
    bubbles = [
        comic["_bubble"](i, len(panel["dialogue"]), d["speaker"])
        for i, d in enumerate(panel["dialogue"])
    ]
    lines = [d["text"] for d in panel["dialogue"]]
    assert lines == ["You shouldn't be out here, Mara.", "Neither should you."]
    ok = comic["ocr_panel"](comic["render"]("p3-2", figures, bubbles, panel["dialogue"]), lines)
    assert ok["passed"] and ok["ratio"] >= 0.6, ok
    assert {"shouldn", "out", "here", "mara", "neither", "should", "you"} <= set(ok["read"]), ok
    tiny = [{**b, "font_size": 5} for b in bubbles]
    bad = comic["ocr_panel"](comic["render"]("p3-2", figures, tiny, panel["dialogue"]), lines)
    assert not bad["passed"] and bad["ratio"] < 0.6, bad
    assert "neither" in bad["missing"]


def test_ocr_is_skipped_with_a_reason_without_tesseract(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = lw.load_spec(SPEC)
    comic = loop.actor.__globals__
    monkeypatch.setattr(comic["shutil"], "which", lambda _name: None)
    state = comic["init"](TASK)
    verdict = comic["proof"](state, lw.Proposal())
    assert verdict.passed
    assert verdict.evidence["ocr"].startswith("skipped: tesseract is not installed")


def test_a_correction_after_acceptance_repaints_only_with_the_creators_yes(
    rt: lw.Runtime, exports: Path
) -> None:
    """The creator corrects Mara's coat mid-run, after some of her panels were accepted: the
    actor repaints them one by one, and each repaint of accepted work parks for approval with
    the change in the request (panels of an already assembled page are left as delivered)."""
    loop = lw.load_spec(SPEC)
    r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
    assert r.status == "awaiting_approval"  # the canon change
    rt.memory.add(
        scope="project",
        scope_key=TASK["project"],
        signal="correction",
        text="Mara's coat is green in this series",
        by="creator",
    )
    rt.approve(r.run_id, by="creator", note="the key was her mother's: new canon")
    repaints = []
    for _ in range(12):
        r = rt.resume_sync(r.run_id, loop)
        if r.status != "awaiting_approval":
            break
        req = rt.pending_approval(r.run_id)
        assert req.kind == "overwrite_accepted" and req.rule == "repaint_accepted"
        assert "/figures" in (req.diff or "") and "#2e7d32" in (req.diff or "")
        repaints.append(req.what)
        rt.approve(r.run_id, by="creator", note="yes, repaint it")
    assert (r.status, r.stop_reason) == ("accepted", "success")
    assert repaints, "an accepted panel with Mara should have been repainted"
    state = _state(rt, r.run_id)
    assembled_early = {
        i
        for name, art in state.artifacts.items()
        if name.startswith("page-") and "assembly" in art.parts
        for i in art.values()["assembly"]["panels"]
    }
    # every repainted panel now wears green, and it is accepted again
    for what in repaints:
        pid = what.split("overwrite accepted ")[1].split("/")[0]
        art = state.artifacts[pid]
        coats = {f["coat"] for f in art.values()["figures"] if f["character"] == "mara"}
        assert coats == {"#2e7d32"}, (pid, coats)
        assert art.parts["svg"].status == "accepted"
    assert assembled_early  # pages were still assembled and published
    assert len((exports / TASK["project"] / "publish.log").read_text().splitlines()) == 1
