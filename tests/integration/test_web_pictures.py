"""The dashboard shows a picture part (``adapters.openai_images``: a digest, the bytes in the
store's blobs) as a picture: the run page's artifacts and timeline hold an ``<img>`` of
``/runs/{id}/blob/{digest}``, which ``create_app`` serves to a signed-in reader only."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from support.fake_images import FakeImages

import loopwright as lw
from loopwright.adapters import ImageActor, ImageJob, ImageModel, is_image_value


def test_run_page_shows_a_picture_part_as_a_picture(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    store = str(tmp_path / "run.db")
    with FakeImages() as fake:
        model = ImageModel("fake-image-1", base_url=fake.base_url, size="64x48", store=store)

        def job(ctx: lw.Context) -> ImageJob | None:
            done = "art" in ctx.artifacts.get("panel", {})
            return None if done else ImageJob("panel", "art", "box 0.2,0.2,0.8,0.8 #1f4e9c")

        def drawn(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
            part = state.part("panel/art")
            return lw.Verdict(passed=part is not None and is_image_value(part.value))

        loop = lw.Loop(
            name="draw",
            actor=ImageActor(model, job),
            verifiers=[lw.Check(fn=drawn)],
            contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        )
        with lw.Runtime(store) as rt:
            run_id = rt.run_sync(loop, {"goal": "draw"}, task_key="pic-1").run_id
            part = rt.store.checkpoints(run_id)[-1].task_state().part("panel/art")
            assert part is not None
            digest = part.value["image"]
    token = "pictures-token-0123456789"
    app = create_app(store, token=token, require_token_for_reads=True)
    c = TestClient(app, base_url="http://127.0.0.1")
    url = f"/runs/{run_id}/blob/{digest}"
    assert c.get(url, follow_redirects=False).status_code in (303, 401, 403)  # signed in only
    assert c.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
    page = c.get(f"/runs/{run_id}").text
    imgs = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert imgs.count(url) == 2, imgs  # the part's version, and the cycle's edit
    r = c.get(url)
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert hashlib.sha256(r.content).hexdigest() == digest.removeprefix("sha256:")


def test_a_parked_picture_is_no_broken_image_on_the_run_page(tmp_path: Path) -> None:
    """A cycle parked for approval proposed a picture that no version of the run holds yet:
    its timeline row shows it as text (the approval card shows it as a picture), not as an
    ``<img>`` the blob route refuses (404, a broken image). The card's lettered panel (an SVG
    naming the new picture by ``lw-blob:``) showed its balloons over nothing: the picture was
    put in only once a version of the run held it."""
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    store = str(tmp_path / "run.db")
    with FakeImages() as fake:
        model = ImageModel("fake-image-1", base_url=fake.base_url, size="64x48", store=store)

        def lettered(result: Any) -> list[lw.Edit]:  # the panel: the new picture, lettered
            ref = f'<image href="lw-blob:{result.value["image"]}" width="64" height="48"/>'
            return [lw.Edit("panel", "svg", f'<svg xmlns="http://www.w3.org/2000/svg">{ref}</svg>')]

        def job(ctx: lw.Context) -> ImageJob:
            return ImageJob("panel", "art", "box 0.2,0.2,0.8,0.8 #1f4e9c", then=lettered)

        loop = lw.Loop(
            name="draw",
            actor=ImageActor(model, job),
            verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=True))],
            contract=lw.Contract(
                budget=lw.Budget(max_cycles=3),
                risk=(lw.RiskRule(name="new_art", touches=("panel/art",)),),
            ),
        )
        with lw.Runtime(store) as rt:
            res = rt.run_sync(loop, {"goal": "draw"}, task_key="pic-parked")
    assert res.status == "awaiting_approval"
    c = TestClient(
        create_app(store, token="pictures-token-0123456789"), base_url="http://127.0.0.1"
    )
    page = c.get(f"/runs/{res.run_id}").text
    imgs = [u.replace("&amp;", "&") for u in re.findall(r'<img[^>]*src="([^"]+)"', page)]
    assert imgs, "the approval card shows the proposed picture"
    assert {u: c.get(u).status_code for u in imgs} == dict.fromkeys(imgs, 200)
    # the lettered panel the approver judges shows the picture it proposes (no version of
    # the run holds it yet): its lw-blob reference is put in, as for an accepted panel
    [after] = [u for u in imgs if "ref=panel%2Fsvg" in u and "side=after" in u]
    svg = c.get(after).text
    assert "data:image/png;base64," in svg and "lw-blob:" not in svg


def test_an_svg_naming_its_picture_many_times_is_answered_at_a_bounded_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``lw-blob:`` reference was replaced by the picture's bytes: an SVG part naming
    one picture a thousand times made an answer a thousand pictures long. The pictures an
    SVG adds are bounded (``MAX_INLINED``); references past it are left as they are."""
    import base64

    from fastapi.testclient import TestClient

    from loopwright.web import _pictures, create_app

    store = str(tmp_path / "run.db")
    with FakeImages() as fake:
        model = ImageModel("fake-image-1", base_url=fake.base_url, size="64x48", store=store)

        def many(result: Any) -> list[lw.Edit]:
            ref = f'<image href="lw-blob:{result.value["image"]}" width="64" height="48"/>'
            return [
                lw.Edit("panel", "svg", f"<svg xmlns='http://www.w3.org/2000/svg'>{ref * 5}</svg>")
            ]

        def job(ctx: lw.Context) -> ImageJob | None:
            done = "art" in ctx.artifacts.get("panel", {})
            return (
                None if done else ImageJob("panel", "art", "box 0.2,0.2,0.8,0.8 #1f4e9c", then=many)
            )

        loop = lw.Loop(
            name="draw",
            actor=ImageActor(model, job),
            verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=True))],
            contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        )
        with lw.Runtime(store) as rt:
            res = rt.run_sync(loop, {"goal": "draw"}, task_key="many-refs")
            digest = (
                rt.store.checkpoints(res.run_id)[-1].task_state().part("panel/art").value["image"]
            )
    c = TestClient(
        create_app(store, token="pictures-token-0123456789"), base_url="http://127.0.0.1"
    )
    png = c.get(f"/runs/{res.run_id}/blob/{digest}").content
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    monkeypatch.setattr(_pictures, "MAX_INLINED", 2 * len(url) + 1, raising=False)
    svg = c.get(f"/runs/{res.run_id}/svg", params={"ref": "panel/svg", "v": 1}).text
    assert svg.count(url) == 2 and svg.count(f"lw-blob:{digest}") == 3
