"""The run page's waterfall SVG (``web/_waterfall``): escaping, geometry, links, windows."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("fastapi")

from loopwright.trace import Span
from loopwright.web._waterfall import duration, waterfall_rows, waterfall_svg

NS = {"s": "http://www.w3.org/2000/svg"}
HOSTILE = '<script>alert("x")</script>&"\''


def _tree(*, verifier_s: float = 3.0, name: str = "doc", cycles: int = 1) -> list[Span]:
    spans = [Span("run", "run", f"run {name}", 100.0, 100.0 + 10 * cycles, None)]
    for n in range(1, cycles + 1):
        t = 100.0 + 10 * (n - 1)
        c = f"cycle/{n}#1"
        spans += [
            Span(c, "cycle", f"cycle {n}", t, t + 8, "run", {"loopwright.cycle": n}),
            Span(f"{c}/actor", "actor", f"invoke_agent {name}", t, t + 1.0, c),
            Span(
                f"{c}/actor/model/1",
                "model",
                f"chat {name}",
                t,
                t + 1.0,
                f"{c}/actor",
                {
                    "gen_ai.request.model": name,
                    "gen_ai.usage.input_tokens": 1000,
                    "gen_ai.usage.output_tokens": 100,
                    "loopwright.cost_usd": 0.0012,
                    "loopwright.call.id": 40 + n,
                    "loopwright.attempt": 1,
                },
            ),
            Span(
                f"{c}/verifier:{name}",
                "verifier",
                f"verify {name}",
                t + 1.0,
                t + 1.0 + verifier_s,
                c,
                {"loopwright.verifier.name": name},
                status="error",
            ),
        ]
    return spans


def _svg(spans: list[Span], run_id: str = "r1") -> ET.Element:
    # Parsing it as XML also proves every text and attribute is escaped.
    return ET.fromstring(str(waterfall_svg(waterfall_rows(spans), run_id)))


def _row(svg: ET.Element, kind: str) -> ET.Element:
    found = svg.findall(f".//s:g[@data-kind='{kind}']", NS)
    assert found, kind
    return found[0]


def _bar(row: ET.Element) -> tuple[float, float]:
    rect = row.find("s:rect[@class='wf-bar']", NS)
    assert rect is not None
    return float(rect.attrib["x"]), float(rect.attrib["width"])


def test_hostile_names_are_text() -> None:
    out = str(waterfall_svg(waterfall_rows(_tree(name=HOSTILE)), 'r"1<'))
    assert "<script" not in out and "&lt;script&gt;" in out
    svg = ET.fromstring(out)
    labels = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert any(label.startswith("verifier <script>") for label in labels)
    link = svg.find(".//s:a", NS)
    assert link is not None and link.attrib["href"] == '/runs/r"1</calls/41'


def test_bar_widths_are_proportional_to_durations() -> None:
    svg = _svg(_tree(verifier_s=3.0))
    (ax, aw), (vx, vw) = _bar(_row(svg, "actor")), _bar(_row(svg, "verifier"))
    assert vw == pytest.approx(3 * aw, rel=1e-3)
    assert vx == pytest.approx(ax + aw, abs=0.02)  # starts where the actor ended
    _, run_w = _bar(_row(svg, "run"))
    assert aw == pytest.approx(run_w / 10, rel=1e-3)  # 1 s of a 10 s run
    svg2 = _svg(_tree(verifier_s=6.0))
    assert _bar(_row(svg2, "verifier"))[1] == pytest.approx(6 * _bar(_row(svg2, "actor"))[1])


def test_rows_nest_and_carry_figures() -> None:
    rows = waterfall_rows(_tree())
    assert [(r.kind, r.depth) for r in rows] == [
        ("run", 0),
        ("cycle", 1),
        ("actor", 2),
        ("model", 3),
        ("verifier", 2),
    ]
    model = rows[3]
    assert (model.tokens, model.cost_usd, model.call_id) == (1100, 0.0012, 41)
    assert rows[1].label.startswith("cycle 1 · 00:01:40")  # the cycle's UTC time
    svg = _svg(_tree())
    model_row = _row(svg, "model")
    assert "1,100 tok · $0.0012" in "".join(model_row.itertext())
    assert "wf-error" in _row(svg, "verifier").attrib["class"]
    assert len(svg.findall(".//s:a", NS)) == 1  # only model calls link


def test_a_long_run_shows_its_last_cycles() -> None:
    rows = waterfall_rows(_tree(cycles=5), max_cycles=2)
    assert [r.label.split(" ·")[0] for r in rows if r.kind == "cycle"] == ["cycle 4", "cycle 5"]
    assert len(waterfall_rows(_tree(cycles=5), max_cycles=None)) == 1 + 5 * 4


def test_no_spans_and_durations() -> None:
    assert "No spans" in waterfall_svg([], "r")
    assert [duration(x) for x in (0.0004, 0.12, 2.345, 184, 7500)] == [
        "0.4 ms",
        "120 ms",
        "2.35 s",
        "3 min 4 s",
        "2 h 5 min",
    ]
