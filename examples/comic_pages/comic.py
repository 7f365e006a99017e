"""The comic workload: finish the next three pages of an existing comic, panel by panel.

The project on disk (``project/``): a character sheet (palettes, silhouette features, outfits),
canon facts with their sources, two accepted pages and a storyboard for pages 3-5.

* ``init`` builds the TaskState: one artifact per panel (parts ``figures``, ``bubbles``,
  ``dialogue``, ``svg``) and a plan: one step per panel, one per page (depends on its panels,
  done when ``page-N/assembly`` is accepted) and ``publish`` (depends on the pages).
* ``propose`` — the actor. Offline and seeded: it renders ONE panel per cycle as SVG from the
  storyboard and the character sheet, with seeded faults (wrong palette, missing character,
  bubble over a face, text too small or too faint, a line that contradicts canon); in later
  cycles it repairs only the located part (``bubbles``, ``figures`` or ``dialogue``, plus the
  re-rendered ``svg``). It honours project-scoped corrections from feedback memory
  (``ctx.memory``: "Mara's coat is green in this series"), citing them in the figure.
* visible verifiers: ``identity``, ``composition``, ``legibility``, ``continuity``,
  ``complete``; held out: ``proof`` (an independent recomputation from the SVG text itself,
  plus OCR when ``tesseract`` and a rasteriser are available).
* ``publish`` — a ``publish`` effect: pages assembled from accepted panels, one SVG and PNG per page,
  one PDF and one HTML file, written at most once (journaled; ``reconcile`` reads the manifest).
* ``--model`` mode (``model.toml``): ``propose_model`` has an image model draw each panel's
  picture once (``loopwright.adapters.ImageModel``; the picture a blob in the store, its digest
  in the ``art`` part) and repairs a region the ``picture`` check locates by a masked edit;
  ``main`` is the command line (``python comic.py --model NAME …``).

The drawing of the offline panels (backdrops, poses, balloon tails) is in ``comic_art.py``.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import random
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import comic_art  # the drawing: backdrops, poses, balloon tails (a sibling module)

import loopwright as lw

HERE = Path(__file__).resolve().parent
W, H = 400, 300  # panel size
FACE_Y, FACE_R = 150, 26
MIN_FONT = 12.0
MIN_CONTRAST = 4.5
PARTS = ("figures", "bubbles", "dialogue", "svg")
COLOURS = {
    "green": "#2e7d32",
    "red": "#b71c1c",
    "blue": "#1f4e9c",
    "black": "#111111",
    "grey": "#777777",
    "yellow": "#f9a825",
    "purple": "#5b3f8c",
}
CORRECTION = re.compile(r"(\w+)'s (coat|hair|scarf|accent) is (\w+)", re.I)
HELD_OUT_MARKER = "held-out proof"


# --- the project on disk ---------------------------------------------------------------------
@cache
def _load(project_dir: str) -> dict[str, Any]:
    base = Path(project_dir)
    if not base.is_absolute():
        base = HERE / base
    return {
        "sheet": json.loads((base / "characters.json").read_text())["characters"],
        "canon": json.loads((base / "canon.json").read_text())["facts"],
        "storyboard": json.loads((base / "storyboard.json").read_text()),
    }


def _project(task: Mapping[str, Any]) -> dict[str, Any]:
    return _load(str(task.get("project_dir") or "project"))


def _panels(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {**p, "page": pg["page"]}
        for pg in _project(task)["storyboard"]["pages"]
        for p in pg["panels"]
    ]


def _pages(task: Mapping[str, Any]) -> dict[int, list[str]]:
    return {
        int(pg["page"]): [p["id"] for p in pg["panels"]]
        for pg in _project(task)["storyboard"]["pages"]
    }


def init(task: Mapping[str, Any]) -> lw.TaskState:
    """One artifact per panel (filled by the actor), a plan of panels, pages and publish."""
    state = lw.TaskState(goal=str(task.get("goal", "")), task=dict(task))
    state.project = str(task.get("project", ""))
    for p in _panels(task):
        state.plan.append(
            lw.PlanStep(
                p["id"],
                f"page {p['page']}: {p['action']}",
                parts=tuple(f"{p['id']}/{x}" for x in PARTS),
            )
        )
    pages = _pages(task)
    for page, ids in pages.items():
        state.plan.append(
            lw.PlanStep(
                f"page-{page}",
                f"assemble page {page}",
                depends_on=tuple(ids),
                parts=(f"page-{page}/assembly",),
            )
        )
    state.plan.append(
        lw.PlanStep(
            "publish",
            "export pages (SVG and PNG per page, one PDF, one HTML)",
            depends_on=tuple(f"page-{n}" for n in pages),
        )
    )
    return state


# --- rendering -------------------------------------------------------------------------------
def _slot(i: int, n: int) -> int:
    return int(W * (i + 1) / (n + 1))


def _figure(sheet: Mapping[str, Any], who: str, x: int, pose: str = "stand") -> dict[str, Any]:
    c = sheet[who]
    return {
        "character": who,
        "x": x,
        **c["palette"],
        "features": list(c["features"]),
        "pose": pose,
    }


def _cast(panel: Mapping[str, Any]) -> list[str]:
    """The panel's characters left to right: speakers in the order they speak (balloons are
    read left to right, so their tails never cross), then the others."""
    speakers = [str(d["speaker"]) for d in panel["dialogue"]]
    order = [c for c in dict.fromkeys(speakers) if c in panel["characters"]]
    return order + [c for c in panel["characters"] if c not in order]


def _bubble(i: int, n: int, speaker: str) -> dict[str, Any]:
    w = (W - 20 - 10 * (n - 1)) // n
    return {
        "speaker": speaker,
        "x": 10 + i * (w + 10),
        "y": 10,
        "w": w,
        "h": 70,
        "font_size": 14,
        "fill": "#ffffff",
        "text_fill": "#111111",
    }


def _wrap(text: str, width: float, size: float) -> list[str]:
    per = max(4, int(width / (size * 0.55)))
    lines: list[str] = []
    cur = ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > per:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    return [*lines, cur] if cur else lines


def render(
    panel_id: str,
    figures: Sequence[Any],
    bubbles: Sequence[Any],
    dialogue: Sequence[Any],
    *,
    location: str | None = None,
    art: Mapping[str, Any] | None = None,
) -> str:
    """The panel as SVG: the backdrop of its storyboard location, the figures in their poses
    (coat, sleeves, legs, face, hair, features), balloons with tails and their text, a frame.

    With ``art`` (a picture from the image model, ``--model`` mode) the picture replaces the
    backdrop and the figures: it is referenced by its digest (``lw-blob:sha256:…``, the bytes
    stay in the store; ``publish`` inlines them), and each figure's face is marked with an
    invisible circle where the layout put it, for the composition check."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" data-panel="{panel_id}"'
        + (f' data-location="{html.escape(location)}"' if location else "")
        + ">",
    ]
    if art is not None:
        out.append(
            f'<image data-role="art" href="{ART_HREF}{html.escape(str(art["image"]))}" x="0" '
            f'y="0" width="{W}" height="{H}" preserveAspectRatio="xMidYMid slice"/>'
        )
        out += [
            f'<circle data-role="face" cx="{int(f["x"])}" cy="{FACE_Y}" r="{FACE_R}" '
            'fill="none" stroke="none"/>'
            for f in figures
        ]
    else:
        out += comic_art.backdrop(location or "", panel_id)
    for f in figures if art is None else ():
        feats = [
            _feature(str(feat), int(f["x"]), str(f.get("accent", "#000")))
            for feat in f.get("features", ())
        ]
        who = html.escape(str(f["character"]))
        group = comic_art.figure({**f, "character": who}, str(f.get("pose") or "stand"))
        out += [*group, *feats, "</g>"]
    lines = {str(d["speaker"]): str(d["text"]) for d in dialogue}
    for b in bubbles:
        x, y, w, h, size = b["x"], b["y"], b["w"], b["h"], float(b["font_size"])
        spk = html.escape(str(b["speaker"]))
        out.append(f'<g class="bubble" data-speaker="{spk}">')
        out += comic_art.tail(b, figures)
        out.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="18" fill="{b["fill"]}" '
            'stroke="#000" stroke-width="1.5"/>'
        )
        for k, line in enumerate(_wrap(lines.get(str(b["speaker"]), ""), w - 12, size)):
            out.append(
                f'<text x="{x + 6}" y="{y + 6 + size * (k + 1)}" font-family="sans-serif" '
                f'font-size="{size:g}" fill="{b["text_fill"]}">{html.escape(line)}</text>'
            )
        out.append("</g>")
    out.append(
        f'<rect class="panel" x="0" y="0" width="{W}" height="{H}" fill="none" stroke="#000" '
        'stroke-width="4"/>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _feature(feat: str, x: int, accent: str) -> str:
    shapes = {
        "scarf": f'<rect x="{x - 28}" y="{FACE_Y + FACE_R - 4}" width="56" height="10" rx="4" fill="{accent}"/>',
        "braid": f'<rect x="{x + FACE_R - 6}" y="{FACE_Y}" width="8" height="40" rx="4" fill="#3b2314"/>',
        "glasses": f'<rect x="{x - 16}" y="{FACE_Y - 4}" width="32" height="11" rx="4" fill="none" stroke="{accent}" stroke-width="2"/>',
        "cap": f'<rect x="{x - FACE_R}" y="{FACE_Y - FACE_R - 4}" width="{2 * FACE_R}" height="10" rx="3" fill="#333"/>',
        "cane": f'<rect x="{x + 36}" y="{FACE_Y + 30}" width="5" height="100" fill="{accent}"/>',
        "bun": f'<circle cx="{x}" cy="{FACE_Y - FACE_R - 6}" r="9" fill="#e0e0e0"/>',
    }
    inner = shapes.get(feat, "")
    return f'<g data-feature="{html.escape(feat)}">{inner}</g>'


def _location(task: Mapping[str, Any], pid: str) -> str | None:
    """The storyboard location of a panel (its backdrop)."""
    panel = next((p for p in _panels(task) if p["id"] == pid), None)
    return str(panel["location"]) if panel and panel.get("location") else None


# --- the actor -------------------------------------------------------------------------------
def _faults(task: Mapping[str, Any]) -> dict[str, str]:
    """Seeded faults: panel id -> fault of its first render (one panel per fault type)."""
    rng = random.Random(int(task.get("seed", 0)))
    panels = _panels(task)
    eligible = {
        "canon_slip": [p["id"] for p in panels if _slip(p["dialogue"]) is not None],
        "missing_character": [p["id"] for p in panels if len(p["characters"]) >= 2],
        "wrong_palette": [p["id"] for p in panels],
        "bubble_over_face": [p["id"] for p in panels],
        "text_too_small": [p["id"] for p in panels],
        "low_contrast": [p["id"] for p in panels],
    }
    out: dict[str, str] = {}
    for fault, ids in eligible.items():
        free = [i for i in ids if i not in out]
        if free:
            out[rng.choice(free)] = fault
    return out


SLIPS = (("harbour", "lighthouse"), ("Aunt", "Grandma"))


def _slip(dialogue: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """A misremembered line (the kind of slip a model makes): a canon word swapped."""
    for i, d in enumerate(dialogue):
        for a, b in SLIPS:
            if a in d["text"]:
                out = [dict(x) for x in dialogue]
                out[i]["text"] = d["text"].replace(a, b)
                return out
    return None


def _corrections(
    memory: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[str, str, str]]:
    """``(character, attribute) -> (colour, citation, text)`` from explicit corrections."""
    out: dict[tuple[str, str], tuple[str, str, str]] = {}
    for m in memory:
        if m.get("signal") != "correction":
            continue
        match = CORRECTION.search(str(m.get("text", "")))
        if match and match.group(3).lower() in COLOURS:
            attr = "accent" if match.group(2).lower() == "scarf" else match.group(2).lower()
            key = (match.group(1).lower(), attr)
            cite = f"memory:{m.get('memory_id')}"
            out.setdefault(key, (COLOURS[match.group(3).lower()], cite, str(m.get("text"))))
    return out


EDITED = re.compile(r"^edit:([\w-]+/figures)@v(\d+)$")
RECOLOURABLE = ("coat", "hair", "accent")


def _edited_colours(
    notes: Sequence[Mapping[str, Any]], sheet: Mapping[str, Any], figures_of: Any
) -> dict[tuple[str, str], tuple[str, str]]:
    """``(character, attribute) -> (colour, citation)`` from a person's edits of a panel's
    ``figures`` (``loopwright edit RUN p4-1/figures``, the dashboard's Edit): the colours
    that differ from the sheet, cited ``edit:p4-1/figures@v2``; the latest edit wins.
    ``figures_of(ref, version)`` reads that version's figures."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for n in notes:
        ref = str(n.get("part") or "")
        if n.get("kind") != "edit" or not ref.endswith("/figures"):
            continue
        cite = f"edit:{ref}@v{n.get('version')}"
        for fig in figures_of(ref, n.get("version")) or ():
            who = fig.get("character")
            for attr in RECOLOURABLE if who in sheet else ():
                if fig.get(attr) and fig[attr] != sheet[who]["palette"].get(attr):
                    out[(who, attr)] = (str(fig[attr]), cite)
    return out


def _draw(ctx: lw.Context, panel: Mapping[str, Any], fault: str | None) -> dict[str, Any]:
    sheet = _project(ctx.task)["sheet"]
    fixes = _corrections(ctx.memory)
    # A person's recolouring of a figure in one panel holds for the panels drawn after it.
    edited = _edited_colours(
        ctx.notes, sheet, lambda ref, _v: ctx.artifacts.get(ref.split("/")[0], {}).get("figures")
    )
    chars = _cast(panel)
    figures = []
    for i, who in enumerate(chars):
        f = _figure(sheet, who, _slot(i, len(chars)), (panel.get("poses") or {}).get(who, "stand"))
        for (c, attr), (colour, cite, text) in fixes.items():
            if c == who:
                f[attr] = colour
                f.setdefault("corrections", []).append(cite)
                f.setdefault("correction_texts", []).append(text)
        for (c, attr), (colour, cite) in edited.items():
            if c == who:
                f[attr] = colour
                f.setdefault("edits", []).append(cite)
        figures.append(f)
    dialogue = [dict(d) for d in panel["dialogue"]]
    bubbles = [_bubble(i, len(dialogue), d["speaker"]) for i, d in enumerate(dialogue)]
    if fault == "missing_character":
        figures = figures[:-1]
    elif fault == "wrong_palette":
        figures[0]["coat"] = "#b71c1c" if figures[0]["coat"] != "#b71c1c" else "#2e7d32"
    elif fault == "bubble_over_face":
        who = bubbles[0]["speaker"]
        x = next((f["x"] for f in figures if f["character"] == who), W // 2)
        bubbles[0].update(x=max(0, int(x) - 60), y=FACE_Y - 40, w=120)
    elif fault == "text_too_small":
        bubbles[0]["font_size"] = 7
    elif fault == "low_contrast":
        bubbles[0]["text_fill"] = "#c8c8c8"
    elif fault == "canon_slip":
        dialogue = _slip(dialogue) or dialogue
    return {"figures": figures, "bubbles": bubbles, "dialogue": dialogue}


def _repair(ctx: lw.Context, pid: str, cur: Mapping[str, Any]) -> dict[str, Any]:
    """Fix only the parts the findings name; everything else is left as it is."""
    panel = next(p for p in _panels(ctx.task) if p["id"] == pid)
    sheet = _project(ctx.task)["sheet"]
    fixes = _corrections(ctx.memory)
    out: dict[str, Any] = {}
    for f in ctx.findings_for(pid):
        ev = f.evidence
        if f.part == "figures":
            figures = [dict(x) for x in out.get("figures", cur["figures"])]
            if f.dimension == "missing_character":
                chars = _cast(panel)
                figures = []
                for i, who in enumerate(chars):
                    have = next((x for x in cur["figures"] if x["character"] == who), None)
                    pose = (panel.get("poses") or {}).get(who, "stand")
                    fig = dict(have) if have else _figure(sheet, who, 0, pose)
                    fig["x"] = _slot(i, len(chars))
                    for (c, attr), (colour, cite, text) in fixes.items():
                        if c == who and not have:
                            fig[attr] = colour
                            fig.setdefault("corrections", []).append(cite)
                            fig.setdefault("correction_texts", []).append(text)
                    figures.append(fig)
            elif f.dimension == "palette":
                for fig in figures:
                    if fig["character"] == ev.get("character"):
                        fig[str(ev["attribute"])] = ev["expected"]
            out["figures"] = figures
        elif f.part == "bubbles":
            bubbles = [dict(x) for x in out.get("bubbles", cur["bubbles"])]
            i = int(ev.get("bubble", 0))
            n = len(bubbles)
            if f.dimension in ("bubble_over_face", "bubble_outside"):
                bubbles[i].update(
                    {
                        k: v
                        for k, v in _bubble(i, n, bubbles[i]["speaker"]).items()
                        if k in ("x", "y", "w", "h")
                    }
                )
            elif f.dimension == "font_size":
                bubbles[i]["font_size"] = max(MIN_FONT + 2, float(ev.get("minimum", MIN_FONT)))
            elif f.dimension == "contrast":
                bubbles[i]["text_fill"] = "#111111"
            out["bubbles"] = bubbles
        elif f.part == "dialogue" and f.dimension == "continuity":
            out["dialogue"] = [dict(d) for d in panel["dialogue"]]
    return out


def _svg_hash(svg: str) -> str:
    return hashlib.sha256(svg.encode()).hexdigest()[:16]


def propose(ctx: lw.Context) -> lw.Proposal:
    """One bounded step per cycle: repair the located faults of a drawn panel, else draw the
    next panel; assemble any page whose panels are all accepted; ask to publish at the end."""
    task, arts, acc = ctx.task, ctx.artifacts, ctx.accepted
    pages = _pages(task)
    edits: list[lw.Edit] = []
    notes: list[str] = []
    usage = lw.Usage(cost_usd=0.0, tokens=0)

    # 0. A creator's correction arrived after a panel was accepted: repaint that panel (one per
    #    cycle) — it touches accepted work, so the approval policy asks a person first. Panels
    #    of an already assembled page are left as delivered.
    fixes = _corrections(ctx.memory)
    page_of = {i: pg for pg, ids in pages.items() for i in ids}
    for p in _panels(task) if fixes else ():
        pid = p["id"]
        if pid not in acc or "svg" not in acc[pid] or f"page-{page_of.get(pid)}" in arts:
            continue
        figures = [dict(f) for f in arts[pid]["figures"]]
        changed = False
        for f in figures:
            for (who, attr), (colour, cite, text) in fixes.items():
                if f.get("character") == who and f.get(attr) != colour:
                    f[attr] = colour
                    f.setdefault("corrections", []).append(cite)
                    f.setdefault("correction_texts", []).append(text)
                    changed = True
        if changed:
            cur = arts[pid]
            svg = render(
                pid, figures, cur["bubbles"], cur["dialogue"], location=_location(task, pid)
            )
            edits += [lw.Edit(pid, "figures", figures), lw.Edit(pid, "svg", svg)]
            notes.append(f"repainted accepted {pid} after the creator's correction")
            usage = lw.Usage(cost_usd=0.02, tokens=900)
            break
    # 1. Local repair of the first panel with open findings.
    open_panels = [p["id"] for p in _panels(task) if ctx.findings_for(p["id"]) and p["id"] in arts]
    if open_panels and not edits:
        pid = open_panels[0]
        cur = arts[pid]
        fixed = _repair(ctx, pid, cur)
        if fixed:
            merged = {**cur, **fixed}
            svg = render(
                pid,
                merged["figures"],
                merged["bubbles"],
                merged["dialogue"],
                location=_location(task, pid),
            )
            edits += [lw.Edit(pid, k, v) for k, v in fixed.items()]
            edits.append(lw.Edit(pid, "svg", svg))
            notes.append(f"repaired {pid}: {', '.join(sorted(fixed))}")
            usage = lw.Usage(cost_usd=0.02, tokens=900)
    # 2. Otherwise draw the next panel (one per cycle).
    if not edits:
        todo = [p for p in _panels(task) if p["id"] not in arts]
        if todo:
            panel = todo[0]
            drawn = _draw(ctx, panel, _faults(task).get(panel["id"]))
            svg = render(
                panel["id"],
                drawn["figures"],
                drawn["bubbles"],
                drawn["dialogue"],
                location=panel.get("location"),
            )
            edits += [lw.Edit(panel["id"], k, v) for k, v in drawn.items()]
            edits.append(lw.Edit(panel["id"], "svg", svg))
            notes.append(f"drew {panel['id']} ({panel['action']})")
            usage = lw.Usage(cost_usd=0.06, tokens=2400)
    return _assemble(ctx, edits, notes, usage)


def _assemble(
    ctx: lw.Context, edits: list[lw.Edit], notes: list[str], usage: lw.Usage
) -> lw.Proposal:
    """Steps 3 and 4 of both actors: assemble the pages whose panels are all accepted, and
    once every page is, ask for the ``publish`` effect."""
    task, arts, acc = ctx.task, ctx.artifacts, ctx.accepted
    pages = _pages(task)
    # 3. Assemble pages whose panels are all accepted.
    assembled = set()
    for page, ids in pages.items():
        name = f"page-{page}"
        if name in arts:
            assembled.add(page)
            continue
        edited = {e.artifact for e in edits}  # a panel changed this cycle is not final yet
        if all("svg" in acc.get(i, {}) and i not in edited for i in ids):
            hashes = {i: _svg_hash(acc[i]["svg"]) for i in ids}
            edits.append(lw.Edit(name, "assembly", {"page": page, "panels": ids, "hashes": hashes}))
            # The page as a picture too: people see it in `loopwright ui` (artifacts).
            edits.append(
                lw.Edit(name, "picture", _page_svg(str(page), [acc[i]["svg"] for i in ids]))
            )
            notes.append(f"assembled page {page}")
            assembled.add(page)
    # 4. Every page assembled: ask to publish (runs only in a cycle the contract accepts).
    effects: tuple[lw.EffectCall, ...] = ()
    if len(assembled) == len(pages):
        panels = {
            i: (acc.get(i) or arts.get(i) or {}).get("svg", "")
            for ids in pages.values()
            for i in ids
        }
        effects = (
            publish.call(
                project=str(task.get("project", "")),
                pages={str(p): [panels[i] for i in ids] for p, ids in pages.items()},
                edition=_edition(ctx),
            ),
        )
        notes.append("publish pages")
    return lw.Proposal(
        edits=tuple(edits),
        note="; ".join(notes) or "nothing to do",
        usage=usage,
        effects=effects,
        plan={"publish": "done"} if effects else {},
    )


# --- verifiers -------------------------------------------------------------------------------
def _drawn(state: lw.TaskState) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for p in _panels(state.task):
        art = state.artifacts.get(p["id"])
        if art is not None and "svg" in art.parts:
            out.append((p, art.values()))
    return out


def _checked(state: lw.TaskState, flagged: set[str]) -> tuple[str, ...]:
    """Parts this verifier looked at: every drawn part, but not the ``svg`` of a flagged panel
    (a panel's picture is accepted only once every check is clean on it)."""
    refs = []
    for ref, _ in state.iter_parts():
        art, _, part = ref.partition("/")
        if part == "svg" and art in flagged:
            continue
        refs.append(ref)
    return tuple(refs)


def _verdict(
    state: lw.TaskState, findings: list[lw.Finding], total: int, **evidence: Any
) -> lw.Verdict:
    flagged = {str(f.artifact) for f in findings if f.severity == "error"}
    errors = [f for f in findings if f.severity == "error"]
    score = 1.0 if total == 0 else max(0.0, 1 - len(flagged) / total)
    return lw.Verdict(
        passed=not errors,
        score=score,
        findings=tuple(findings),
        evidence={"panels_checked": total, **evidence},
        checked=_checked(state, flagged),
    )


def _cited_colour(fig: Mapping[str, Any], attr: str, memory_texts: Mapping[str, str]) -> str | None:
    """The colour a cited correction asks for (the verifier parses the cited text itself)."""
    for cite in fig.get("corrections", ()):
        m = CORRECTION.search(memory_texts.get(str(cite), ""))
        if m and m.group(1).lower() == fig["character"]:
            a = "accent" if m.group(2).lower() == "scarf" else m.group(2).lower()
            if a == attr and m.group(3).lower() in COLOURS:
                return COLOURS[m.group(3).lower()]
    return None


def identity(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Every storyboard character is drawn, with the sheet's palette and silhouette features
    (or a colour a cited creator correction asks for), read back from the SVG."""
    sheet = _project(state.task)["sheet"]
    findings: list[lw.Finding] = []
    drawn = _drawn(state)
    for panel, vals in drawn:
        pid = panel["id"]
        root = ET.fromstring(vals["svg"])
        groups = {
            g.get("data-character"): g
            for g in root.iter("{http://www.w3.org/2000/svg}g")
            if g.get("class") == "figure"
        }
        figs = {f["character"]: f for f in vals["figures"]}
        by_person = _edited_here(state, pid)
        for who in panel["characters"]:
            g = groups.get(who)
            if g is None:
                findings.append(
                    lw.Finding(
                        f"{sheet[who]['name']} is in the storyboard for {pid} but not drawn",
                        pid,
                        "figures",
                        "missing_character",
                        evidence={"character": who, "expected": "present", "source": "storyboard"},
                    )
                )
                continue
            for el in g.iter():
                role = el.get("data-role")
                if role not in ("coat", "hair", "face"):
                    continue
                attr = "skin" if role == "face" else role
                want = sheet[who]["palette"][attr]
                have = el.get("fill")
                ok_alt = _cited_colour(figs.get(who, {}), attr, _memory_texts(figs.get(who, {})))
                # a colour a person painted here, or one a cited edit of theirs set
                ok_alt = ok_alt or _edit_colour(state, figs.get(who, {}), attr)
                if by_person:
                    ok_alt = ok_alt or figs.get(who, {}).get(attr)
                if have not in (want, ok_alt):
                    findings.append(
                        lw.Finding(
                            f"{sheet[who]['name']}'s {attr} is {have} in {pid}; the sheet says {want}",
                            pid,
                            "figures",
                            "palette",
                            evidence={
                                "character": who,
                                "attribute": attr,
                                "expected": ok_alt or want,
                                "actual": have,
                                "source": "characters.json",
                            },
                        )
                    )
            feats = {el.get("data-feature") for el in g.iter() if el.get("data-feature")}
            for feat in sheet[who]["features"]:
                if feat not in feats:
                    findings.append(
                        lw.Finding(
                            f"{sheet[who]['name']} lacks the {feat} in {pid}",
                            pid,
                            "figures",
                            "feature",
                            evidence={
                                "character": who,
                                "expected": feat,
                                "source": "characters.json",
                            },
                        )
                    )
    return _verdict(state, findings, len(drawn))


def _edited_here(state: lw.TaskState, pid: str) -> bool:
    """Whether a person's version of the panel's figures is its current one."""
    part = state.part(f"{pid}/figures")
    return part is not None and any(
        n.get("kind") == "edit"
        and n.get("part") == f"{pid}/figures"
        and n.get("version") == part.count
        for n in state.notes
    )


def _edit_colour(state: lw.TaskState, fig: Mapping[str, Any], attr: str) -> str | None:
    """The colour a person's edit that the figure cites gave its character (the verifier
    reads the cited edit and that version of the part itself, not the actor's word)."""
    for cite in fig.get("edits", ()):
        m = EDITED.match(str(cite))
        if m is None or attr not in RECOLOURABLE:
            continue
        ref, version = m.group(1), int(m.group(2))
        recorded = any(
            n.get("kind") == "edit" and n.get("part") == ref and n.get("version") == version
            for n in state.notes
        )
        part = state.part(ref)
        if not recorded or part is None or not 1 <= version <= len(part.versions):
            continue
        for f in part.versions[version - 1].value or ():
            if f.get("character") == fig.get("character") and f.get(attr):
                return str(f[attr])
    return None


def _memory_texts(fig: Mapping[str, Any]) -> dict[str, str]:
    """Texts of the corrections a figure cites (kept by the actor in the figure itself)."""
    out: dict[str, str] = {}
    for c, t in zip(fig.get("corrections", ()), fig.get("correction_texts", ()), strict=False):
        out[str(c)] = str(t)
    return out


def _bubbles_svg(svg: str) -> list[dict[str, Any]]:
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    out = []
    for g in root.iter(f"{ns}g"):
        if g.get("class") != "bubble":
            continue
        rect = g.find(f"{ns}rect")
        assert rect is not None
        texts = g.findall(f"{ns}text")
        out.append(
            {
                "speaker": g.get("data-speaker"),
                "x": float(rect.get("x", 0)),
                "y": float(rect.get("y", 0)),
                "w": float(rect.get("width", 0)),
                "h": float(rect.get("height", 0)),
                "fill": rect.get("fill", "#ffffff"),
                "texts": [
                    (
                        t.text or "",
                        float(t.get("font-size", 0)),
                        t.get("fill", "#000"),
                        float(t.get("x", 0)),
                        float(t.get("y", 0)),
                    )
                    for t in texts
                ],
            }
        )
    return out


def _faces(svg: str) -> list[tuple[float, float, float]]:
    root = ET.fromstring(svg)
    return [
        (float(c.get("cx", 0)), float(c.get("cy", 0)), float(c.get("r", 0)))
        for c in root.iter("{http://www.w3.org/2000/svg}circle")
        if c.get("data-role") == "face"
    ]


def _hits(b: Mapping[str, Any], face: tuple[float, float, float]) -> bool:
    cx, cy, r = face
    nx = min(max(cx, b["x"]), b["x"] + b["w"])
    ny = min(max(cy, b["y"]), b["y"] + b["h"])
    return (cx - nx) ** 2 + (cy - ny) ** 2 < r * r


def composition(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Bubbles inside the panel, over no face, in reading order (left to right, top down)."""
    findings: list[lw.Finding] = []
    drawn = _drawn(state)
    for panel, vals in drawn:
        pid = panel["id"]
        bubbles = _bubbles_svg(vals["svg"])
        faces = _faces(vals["svg"])
        for i, b in enumerate(bubbles):
            if b["x"] < 0 or b["y"] < 0 or b["x"] + b["w"] > W or b["y"] + b["h"] > H:
                findings.append(
                    lw.Finding(
                        f"bubble {i + 1} of {pid} leaves the panel",
                        pid,
                        "bubbles",
                        "bubble_outside",
                        evidence={"bubble": i},
                    )
                )
            if any(_hits(b, f) for f in faces):
                findings.append(
                    lw.Finding(
                        f"bubble {i + 1} of {pid} ({b['speaker']}) covers a face",
                        pid,
                        "bubbles",
                        "bubble_over_face",
                        evidence={"bubble": i, "box": [b["x"], b["y"], b["w"], b["h"]]},
                    )
                )
        order = [(b["y"] // 60, b["x"]) for b in bubbles]
        if order != sorted(order):
            findings.append(
                lw.Finding(
                    f"bubbles of {pid} are out of reading order",
                    pid,
                    "bubbles",
                    "bubble_outside",
                    evidence={"bubble": 0},
                )
            )
    return _verdict(state, findings, len(drawn))


def _lum(hexcol: str) -> float:
    h = hexcol.lstrip("#")
    rgb = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours."""
    la, lb = sorted((_lum(a), _lum(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def legibility(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Every line at least 12 px and at WCAG AA contrast (4.5:1) against its bubble."""
    findings: list[lw.Finding] = []
    drawn = _drawn(state)
    for panel, vals in drawn:
        pid = panel["id"]
        for i, b in enumerate(_bubbles_svg(vals["svg"])):
            sizes = [t[1] for t in b["texts"]]
            if sizes and min(sizes) < MIN_FONT:
                findings.append(
                    lw.Finding(
                        f"text in bubble {i + 1} of {pid} is {min(sizes):g}px (minimum {MIN_FONT:g})",
                        pid,
                        "bubbles",
                        "font_size",
                        evidence={"bubble": i, "actual": min(sizes), "minimum": MIN_FONT},
                    )
                )
            for t in b["texts"][:1]:
                ratio = contrast(t[2], b["fill"])
                if ratio < MIN_CONTRAST:
                    findings.append(
                        lw.Finding(
                            f"text in bubble {i + 1} of {pid} has contrast {ratio:.2f}:1 "
                            f"(WCAG AA needs {MIN_CONTRAST}:1)",
                            pid,
                            "bubbles",
                            "contrast",
                            evidence={
                                "bubble": i,
                                "actual": round(ratio, 2),
                                "minimum": MIN_CONTRAST,
                            },
                        )
                    )
    return _verdict(state, findings, len(drawn))


def _approved_facts(notes: Sequence[Mapping[str, Any]]) -> bool:
    return any(
        n.get("kind") == "approval"
        and n.get("decision") == "approved"
        and n.get("rule") == "canon_change"
        for n in notes
    )


def continuity(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Dialogue against canon. A line that differs from the storyboard and contradicts a fact is
    a slip (``continuity``, repairable); a storyboard line that contradicts a fact changes canon
    (``canon_change``: a person decides, with the fact and its source)."""
    canon = _project(state.task)["canon"]
    approved = _approved_facts(state.notes)
    findings: list[lw.Finding] = []
    drawn = _drawn(state)
    for panel, vals in drawn:
        pid = panel["id"]
        board = {(d["speaker"], d["text"]) for d in panel["dialogue"]}
        for d in vals["dialogue"]:
            for fact in canon:
                if fact.get("speaker") and fact["speaker"] != d["speaker"]:
                    continue
                hit = next(
                    (w for w in fact["contradicted_by"] if w.lower() in d["text"].lower()), None
                )
                if hit is None:
                    continue
                ev = {
                    "fact": fact["id"],
                    "statement": fact["statement"],
                    "source": fact["source"],
                    "line": d["text"],
                    "speaker": d["speaker"],
                }
                if (d["speaker"], d["text"]) in board:
                    if not approved:
                        findings.append(
                            lw.Finding(
                                f"{pid}: {d['speaker']} says {d['text']!r}, which changes canon "
                                f"{fact['id']} ({fact['statement']!r}, source: {fact['source']})",
                                pid,
                                "dialogue",
                                "canon_change",
                                severity="warning",
                                evidence=ev,
                            )
                        )
                else:
                    want = next(
                        (x["text"] for x in panel["dialogue"] if x["speaker"] == d["speaker"]), ""
                    )
                    findings.append(
                        lw.Finding(
                            f"{pid}: {d['speaker']} says {d['text']!r}, contradicting canon "
                            f"{fact['id']} ({fact['statement']!r}, source: {fact['source']})",
                            pid,
                            "dialogue",
                            "continuity",
                            evidence={**ev, "expected": want},
                        )
                    )
    return _verdict(state, findings, len(drawn))


def complete(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Every storyboard panel drawn and every page assembled from its accepted panels."""
    findings: list[lw.Finding] = []
    total = 0
    for page, ids in _pages(state.task).items():
        for i in ids:
            total += 1
            if state.part(f"{i}/svg") is None:
                findings.append(lw.Finding(f"{i} is not drawn yet", i, "svg", "missing_panel"))
        total += 1
        asm = state.part(f"page-{page}/assembly")
        if asm is None:
            findings.append(
                lw.Finding(
                    f"page {page} is not assembled yet", f"page-{page}", "assembly", "missing_page"
                )
            )
            continue
        for i, h in asm.value["hashes"].items():
            p = state.part(f"{i}/svg")
            if p is None or _svg_hash(p.value) != h:
                findings.append(
                    lw.Finding(
                        f"page {page} holds an outdated {i}",
                        f"page-{page}",
                        "assembly",
                        "stale_page",
                    )
                )
    done = total - len(findings)
    return lw.Verdict(
        passed=not findings,
        score=done / total if total else 1.0,
        findings=tuple(findings),
        evidence={"steps": total, "done": done},
    )


def proof(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Held out: an independent recomputation from the SVG text alone (every line fits inside
    its bubble's box, every storyboard line is readable in the picture) and, where
    ``tesseract`` and a rasteriser are installed, OCR of the panel. Never shown to the actor."""
    findings: list[lw.Finding] = []
    drawn = _drawn(state)
    for panel, vals in drawn:
        pid = panel["id"]
        for b in _bubbles_svg(vals["svg"]):
            for text, size, _fill, x, y in b["texts"]:
                width = len(text) * size * 0.55
                if x + width > b["x"] + b["w"] + 2 or y > b["y"] + b["h"]:
                    findings.append(
                        lw.Finding(
                            f"{HELD_OUT_MARKER}: {pid}: {text!r} overflows its bubble",
                            pid,
                            "svg",
                            "overflow",
                        )
                    )
        shown = " ".join(t[0] for b in _bubbles_svg(vals["svg"]) for t in b["texts"])
        for d in vals["dialogue"]:
            if " ".join(d["text"].split()) not in " ".join(shown.split()):
                findings.append(
                    lw.Finding(
                        f"{HELD_OUT_MARKER}: {pid}: line {d['text']!r} is not in the picture",
                        pid,
                        "svg",
                        "missing_text",
                    )
                )
    ocr = _ocr_state(state)
    for pid, res in ocr.get("panels", {}).items():
        if not res["passed"]:
            findings.append(
                lw.Finding(
                    f"{HELD_OUT_MARKER}: {pid}: OCR reads back {res['ratio']:.0%} of the dialogue "
                    f"words (needs {OCR_MIN_RATIO:.0%}); missing: {', '.join(res['missing'])}",
                    pid,
                    "svg",
                    "ocr_illegible",
                    evidence=res,
                )
            )
    return lw.Verdict(
        passed=not findings,
        findings=tuple(findings),
        evidence={"panels": len(drawn), "ocr": ocr["status"], "ocr_panels": ocr.get("panels", {})},
    )


# --- --model mode: an image model draws the panels ------------------------------------------
ART_HREF = "lw-blob:"  # a panel's picture, by digest: the bytes are in the store
ART_REF = re.compile(r'href="lw-blob:(sha256:[0-9a-f]{64})"')
COLOUR_TOLERANCE = 60.0  # RGB distance within which a coat counts as the sheet's colour
REGION_PAD = 6  # panel units added around a failing region before it is masked
LOCATION_WORDS = {
    "harbour_wall": "the stone harbour wall, the dark sea behind it, rain",
    "net_shed": "outside a wooden net shed with fishing nets hung on it, a lit doorway, rain",
    "quay": "the quay's edge, dark water filling most of the view, a breakwater far off",
    "steps": "stone steps climbing up from the quay, a railing, a lit street lamp, rain",
    "bollards": "the quay with a row of iron bollards, a mooring rope, the sea behind",
    "moorings": "moored boats drifting loose on the dark water, rain",
    "lantern_quay": "a quay lined with unlit lanterns on posts",
}
POSE_WORDS = {
    "stand": "standing",
    "run": "running",
    "stop": "one arm held out to stop someone",
    "look": "hand on the hip, staring out",
    "point": "pointing ahead",
    "hold_up": "holding a small brass key up high",
}
_IMAGE_MODELS: dict[tuple[str, ...], Any] = {}
_COLOURS: dict[tuple[str, tuple[int, int, int, int]], str] = {}


def image_model() -> Any:
    """The ``ImageModel`` of ``--model`` mode, from the environment: ``COMIC_IMAGE_MODEL``
    (required), ``COMIC_IMAGE_BASE_URL`` (else ``OPENAI_BASE_URL``), ``COMIC_IMAGE_API_KEY``
    (else ``OPENAI_API_KEY``), ``COMIC_IMAGE_SIZE`` (default ``1536x1024``) and
    ``COMIC_IMAGE_PRICE`` (dollars per picture). Pictures go to the store ``LOOPWRIGHT_STORE``
    names (``comic.py --store`` sets it)."""
    from loopwright.adapters import ImageModel

    env = os.environ
    model = env.get("COMIC_IMAGE_MODEL", "").strip()
    if not model:
        raise lw.ConfigError(
            "--model mode needs an image model: comic.py --model NAME, or COMIC_IMAGE_MODEL",
            field="COMIC_IMAGE_MODEL",
        )
    key = tuple(
        env.get(k, "")
        for k in (
            "COMIC_IMAGE_MODEL", "COMIC_IMAGE_BASE_URL", "COMIC_IMAGE_API_KEY",
            "COMIC_IMAGE_SIZE", "COMIC_IMAGE_PRICE", "LOOPWRIGHT_STORE",
        )
    )  # fmt: skip
    if key not in _IMAGE_MODELS:
        _IMAGE_MODELS[key] = ImageModel(
            model,
            base_url=env.get("COMIC_IMAGE_BASE_URL") or None,
            api_key=env.get("COMIC_IMAGE_API_KEY") or None,
            size=env.get("COMIC_IMAGE_SIZE") or "1536x1024",
            price=env.get("COMIC_IMAGE_PRICE") or None,
            name="comic_images",
        )
    return _IMAGE_MODELS[key]


def to_picture(
    box: Sequence[float], width: float, height: float
) -> tuple[float, float, float, float]:
    """A box in panel units as pixels of a ``width`` x ``height`` picture shown in the panel as
    ``preserveAspectRatio="xMidYMid slice"`` does: scaled to cover it, centred, the overflow cut
    off (a 1536x1024 picture in a 400x300 panel loses a strip left and right, undistorted)."""
    scale = max(W / width, H / height)
    ox, oy = (width * scale - W) / 2, (height * scale - H) / 2
    x0, y0, x1, y1 = box
    return ((x0 + ox) / scale, (y0 + oy) / scale, (x1 + ox) / scale, (y1 + oy) / scale)


def _requested_size() -> tuple[int, int]:
    """The picture size asked for (``COMIC_IMAGE_SIZE``); the panel's when it is ``auto``."""
    w, _, h = (os.environ.get("COMIC_IMAGE_SIZE") or "1536x1024").partition("x")
    return (int(w), int(h)) if w.isdigit() and h.isdigit() else (W, H)


def _boxes(f: Mapping[str, Any]) -> list[tuple[str, tuple[int, int, int, int], str]]:
    """Where a figure goes in the picture, in panel units: ``(role, box, colour)``."""
    x = int(f["x"])
    return [
        ("coat", (x - 30, FACE_Y + FACE_R, x + 30, 258), str(f["coat"])),
        ("face", (x - FACE_R, FACE_Y - FACE_R, x + FACE_R, FACE_Y + FACE_R), str(f["skin"])),
        ("hair", (x - FACE_R, FACE_Y - FACE_R - 4, x + FACE_R, FACE_Y - 4), str(f["hair"])),
    ]


def art_prompt(task: Mapping[str, Any], panel: Mapping[str, Any], figures: Sequence[Any]) -> str:
    """What the image model is asked to draw: the scene in words, the characters as on the
    sheet (with their colours, poses and places), and a layout, one ``box x0,y0,x1,y1
    #colour`` line per coat, face and hair in fractions of the picture."""
    project = _project(task)
    sheet = project["sheet"]
    series = json.loads((HERE / "project" / "characters.json").read_text()).get("series", "")
    where = LOCATION_WORDS.get(str(panel.get("location")), "a harbour at night")
    lines = [
        f'A comic panel of "{series}", page {panel["page"]}, panel {panel["id"]}: '
        f"{panel['action']}.",
        f"Setting: {where}, at night.",
        "Flat colours and clean ink outlines. No text, no lettering, no speech balloons: keep "
        "the top quarter of the picture plain sky, the balloons are added later.",
        "Characters, as on the reference sheet:",
    ]
    for f in figures:
        c = sheet[f["character"]]
        pose = POSE_WORDS.get(str(f.get("pose") or "stand"), "standing")
        lines.append(
            f"- {c['name']}: {c['outfit']}; coat {f['coat']}, hair {f['hair']}, skin "
            f"{f['skin']}; {pose}; {round(100 * int(f['x']) / W)}% from the left."
        )
    lines.append("Layout (x0,y0,x1,y1 as fractions of the width and height, and the colour):")
    width, height = _requested_size()
    for f in figures:
        for role, box, colour in _boxes(f):
            x0, y0, x1, y1 = to_picture(box, width, height)
            lines.append(
                f"box {x0 / width:.3f},{y0 / height:.3f},{x1 / width:.3f},{y1 / height:.3f} "
                f"{colour} ({sheet[f['character']]['name']}'s {role})"
            )
    return "\n".join(lines)


@cache
def _sheet_png(path: str) -> bytes | None:
    """An accepted page of the project as PNG, for a reference (None without a rasteriser)."""
    if rasteriser_missing():
        return None
    return rasterise(Path(path).read_text())


def _references(ctx: lw.Context, panel: Mapping[str, Any]) -> list[Any]:
    """The reference pictures of a new panel: the accepted pages its characters' sheet entries
    point to (rasterised), and the latest accepted panel picture of this run."""
    sheet = _project(ctx.task)["sheet"]
    base = HERE / str(ctx.task.get("project_dir") or "project")
    refs: list[Any] = []
    for who in dict.fromkeys(panel["characters"]):
        png = _sheet_png(str(base / sheet[who]["reference"]))
        if png is not None and png not in refs:
            refs.append(png)
    done = [p["id"] for p in _panels(ctx.task) if "art" in ctx.accepted.get(p["id"], {})]
    if done:
        refs.append(ctx.accepted[done[-1]]["art"])
    return refs[:3]


def _pixels(data: bytes) -> tuple[int, int, Any]:
    """``(width, height, pixel(x, y) -> (r, g, b, ...))`` of a picture; ``ValueError`` saying
    why for one that cannot be read (damaged, or beyond what the reader takes: without Pillow,
    the fallback PNG reader's size limit)."""
    try:
        import io

        from PIL import Image
    except ImportError:
        from loopwright.adapters import _png

        pic = _png.decode(data)  # ValueError for a damaged or oversized picture
        return pic.width, pic.height, pic.pixel
    try:
        im = Image.open(io.BytesIO(data)).convert("RGB")
    except (OSError, Image.DecompressionBombError) as exc:  # damaged, or a decompression bomb
        raise ValueError(str(exc) or type(exc).__name__) from None
    return im.width, im.height, lambda x, y: im.getpixel((x, y))


def _region_colour(data: bytes, box: Sequence[float]) -> str:
    """The median colour of the middle of ``box`` (panel units) in the picture."""
    width, height, pixel = _pixels(data)
    x0, y0, x1, y1 = to_picture(box, width, height)
    mx, my = (x1 - x0) * 0.2, (y1 - y0) * 0.2
    xs = range(int(x0 + mx), max(int(x0 + mx) + 1, int(x1 - mx)), 2)
    ys = range(int(y0 + my), max(int(y0 + my) + 1, int(y1 - my)), 2)
    samples = [pixel(min(x, width - 1), min(y, height - 1))[:3] for y in ys for x in xs]
    mid = [sorted(c[i] for c in samples)[len(samples) // 2] for i in range(3)]
    return "#" + "".join(f"{v:02x}" for v in mid)


def _region_colours(
    images: Any, vals: Mapping[str, Any], boxes: Sequence[tuple[int, int, int, int]]
) -> None:
    """Read into ``_COLOURS`` each box's colour in the panel's picture (loaded once, and only
    when a box is not known yet: a picture never changes under its digest); ``ValueError``
    when the picture cannot be read."""
    data = b""
    for box in boxes:
        key = (str(vals["art"]["image"]), box)
        if key not in _COLOURS:
            data = data or images.load(vals["art"])
            _COLOURS[key] = _region_colour(data, box)


def _distance(a: str, b: str) -> float:
    pa, pb = bytes.fromhex(a.lstrip("#")), bytes.fromhex(b.lstrip("#"))
    return float(sum((x - y) ** 2 for x, y in zip(pa, pb, strict=True)) ** 0.5)


def picture(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """``--model`` mode's identity check, on the picture itself: each figure's coat region (where
    the layout put it) has the sheet's colour, or one a cited correction or edit asks for,
    within ``COLOUR_TOLERANCE``. A miss is located: the panel's ``art`` and the region, which
    the actor repaints under a mask."""
    sheet = _project(state.task)["sheet"]
    images = image_model()
    findings: list[lw.Finding] = []
    drawn = [(p, v) for p, v in _drawn(state) if v.get("art")]
    for panel, vals in drawn:
        pid = panel["id"]
        try:
            _region_colours(images, vals, [_boxes(fig)[0][1] for fig in vals["figures"]])
        except ValueError as exc:  # a failing verdict, not a verifier that raised (escalation)
            findings.append(
                lw.Finding(
                    f"the picture of {pid} cannot be read ({exc}); it must be drawn again",
                    pid,
                    "art",
                    "unreadable",
                    evidence={"image": str(vals["art"].get("image")), "reason": str(exc)},
                )
            )
            continue
        for fig in vals["figures"]:
            who = fig["character"]
            want = (
                _cited_colour(fig, "coat", _memory_texts(fig))
                or _edit_colour(state, fig, "coat")
                or sheet[who]["palette"]["coat"]
            )
            _, box, _ = _boxes(fig)[0]
            have = _COLOURS[(str(vals["art"]["image"]), box)]
            gap = _distance(have, want)
            if gap > COLOUR_TOLERANCE:
                findings.append(
                    lw.Finding(
                        f"{sheet[who]['name']}'s coat looks {have} in the picture of {pid}; "
                        f"the sheet says {want}",
                        pid,
                        "art",
                        "palette",
                        evidence={
                            "character": who,
                            "attribute": "coat",
                            "expected": want,
                            "actual": have,
                            "distance": round(gap, 1),
                            "region": list(box),
                            "source": "characters.json",
                        },
                    )
                )
    flagged = {str(f.artifact) for f in findings}
    score = 1.0 if not drawn else 1 - len(flagged) / len(drawn)
    return lw.Verdict(
        passed=not findings,
        score=score,
        findings=tuple(findings),
        evidence={"panels_checked": len(drawn), "tolerance": COLOUR_TOLERANCE},
        checked=tuple(
            ref
            for ref, _ in state.iter_parts()
            if not (ref.partition("/")[0] in flagged and ref.partition("/")[2] in ("art", "svg"))
        ),
    )


def _mask(images: Any, art: Mapping[str, Any], regions: Sequence[Sequence[float]]) -> bytes:
    """The edit mask of a panel's picture: its failing regions (panel units, padded) open."""
    from loopwright.adapters import region_mask

    width, height, _ = _pixels(images.load(art))
    boxes = [
        to_picture(
            (x0 - REGION_PAD, y0 - REGION_PAD, x1 + REGION_PAD, y1 + REGION_PAD), width, height
        )
        for x0, y0, x1, y1 in regions
    ]
    return bytes(region_mask(width, height, boxes))


def propose_model(ctx: lw.Context) -> lw.Proposal:
    """The actor of ``--model`` mode: one bounded step per cycle. A drawn panel with located
    findings is repaired locally — a failing region of its picture by a masked edit (nothing
    else of the picture changes), its balloons or lines as in the offline mode — else the next
    panel is drawn: its figures, balloons and lines as offline, its picture by the image model
    from a prompt and the reference pictures. Accepted panels are never drawn again. Pages are
    assembled and published as offline."""
    images = image_model()
    task, arts = ctx.task, ctx.artifacts
    budget = ctx.remaining.seconds
    edits: list[lw.Edit] = []
    notes: list[str] = []
    usage = lw.Usage()
    open_panels = [p for p in _panels(task) if ctx.findings_for(p["id"]) and p["id"] in arts]
    if open_panels:
        panel = open_panels[0]
        pid, cur = panel["id"], arts[panel["id"]]
        found = ctx.findings_for(pid)
        regions = [
            f.evidence["region"] for f in found if f.part == "art" and f.evidence.get("region")
        ]
        fixed = _repair(ctx, pid, cur)
        merged = {**cur, **fixed}
        art = cur.get("art")
        if art and any(f.part == "art" and f.dimension == "unreadable" for f in found):
            result = images.generate(
                art_prompt(task, panel, merged["figures"]),
                references=_references(ctx, panel),
                budget_s=budget,
            )  # no region of a picture that cannot be read can be repainted: drawn again
            art, usage = result.value, usage + result.usage
            edits.append(lw.Edit(pid, "art", art))
            notes.append(f"drew {pid} again: its picture could not be read")
        elif regions and art:
            why = "; ".join(f.message for f in found if f.part == "art")
            prompt = art_prompt(task, panel, merged["figures"])
            prompt += f"\nRepaint only the masked region, to fix: {why}."
            result = images.edit(art, _mask(images, art, regions), prompt, budget_s=budget)
            art, usage = result.value, usage + result.usage
            edits.append(lw.Edit(pid, "art", art))
            notes.append(f"repainted {len(regions)} region(s) of {pid} under a mask")
        if fixed or edits:
            edits += [lw.Edit(pid, k, v) for k, v in fixed.items()]
            if fixed:
                notes.append(f"repaired {pid}: {', '.join(sorted(fixed))}")
            svg = render(
                pid, merged["figures"], merged["bubbles"], merged["dialogue"],
                location=panel.get("location"), art=art,
            )  # fmt: skip
            edits.append(lw.Edit(pid, "svg", svg))
    if not edits:
        todo = [p for p in _panels(task) if p["id"] not in arts]
        if todo:
            panel = todo[0]
            drawn = _draw(ctx, panel, None)
            result = images.generate(
                art_prompt(task, panel, drawn["figures"]),
                references=_references(ctx, panel),
                budget_s=budget,
            )
            usage = usage + result.usage
            edits += [lw.Edit(panel["id"], k, v) for k, v in drawn.items()]
            edits.append(lw.Edit(panel["id"], "art", result.value))
            svg = render(
                panel["id"], drawn["figures"], drawn["bubbles"], drawn["dialogue"],
                location=panel.get("location"), art=result.value,
            )  # fmt: skip
            edits.append(lw.Edit(panel["id"], "svg", svg))
            notes.append(f"drew {panel['id']} with {images.model} ({panel['action']})")
    return _assemble(ctx, edits, notes, usage)


def __getattr__(name: str) -> Any:
    """``model_actor``, model.toml's actor: ``propose_model`` once an image model is
    configured — so that loading the spec without one fails at once with one line naming what
    is missing (exit 2), not a run that escalates in its first cycle."""
    if name == "model_actor":
        image_model()
        return propose_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def inline_art(svg: str) -> str:
    """``svg`` with each ``lw-blob:`` picture replaced by its bytes (a ``data:`` URL), read from
    the store: what an exported page needs to stand on its own."""
    if ART_HREF not in svg:
        return svg
    import base64

    images = image_model()

    def data_url(m: re.Match[str]) -> str:
        data = images.load(m.group(1))
        return f'href="data:image/png;base64,{base64.b64encode(data).decode()}"'

    return ART_REF.sub(data_url, svg)


# --- rasterising and OCR ---------------------------------------------------------------------
OCR_MIN_RATIO = 0.6
OCR_TIMEOUT_S = 20.0
WORD = re.compile(r"[a-z]{3,}")
_OCR_CACHE: dict[str, dict[str, Any]] = {}


def rasteriser_missing() -> str | None:
    """Why panels cannot be rasterised here (``None`` when they can)."""
    try:
        import resvg_py  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return "the SVG rasteriser resvg-py is not installed (pip install 'loopwright[comic]')"
    return None


def rasterise(svg: str, *, zoom: float = 1.0) -> bytes:
    """PNG bytes of an SVG (resvg, system fonts, white background)."""
    import resvg_py

    return bytes(resvg_py.svg_to_bytes(svg_string=svg, zoom=zoom, background="#ffffff"))


def ocr_skipped() -> str | None:
    """Why the OCR check cannot run here (``None`` when it can)."""
    if not shutil.which("tesseract"):
        return "tesseract is not installed (apt-get install tesseract-ocr)"
    return rasteriser_missing()


def ocr_words(png: bytes) -> list[str]:
    """Words of three letters or more that ``tesseract --psm 6`` reads in a PNG (lower case)."""
    r = subprocess.run(
        ["tesseract", "stdin", "stdout", "--psm", "6"],
        input=png,
        capture_output=True,
        timeout=OCR_TIMEOUT_S,
        check=False,
    )
    return WORD.findall(r.stdout.decode("utf-8", "replace").lower())


def ocr_panel(svg: str, lines: Sequence[str]) -> dict[str, Any]:
    """Rasterise a panel at its own size (what a reader sees), OCR it and compare the words of
    its dialogue (>= 3 letters, case-insensitive): ``passed`` when >= 60 % read back."""
    want = [w for line in lines for w in WORD.findall(line.lower())]
    key = hashlib.sha256((svg + "\0" + "\n".join(lines)).encode()).hexdigest()
    if key in _OCR_CACHE:
        return _OCR_CACHE[key]
    read = set(ocr_words(rasterise(svg)))
    missing = [w for w in want if w not in read]
    ratio = 1.0 if not want else (len(want) - len(missing)) / len(want)
    res = {
        "passed": ratio >= OCR_MIN_RATIO,
        "ratio": round(ratio, 3),
        "words": len(want),
        "missing": missing,
        "read": sorted(read),
    }
    _OCR_CACHE[key] = res
    return res


def _ocr_state(state: lw.TaskState) -> dict[str, Any]:
    """OCR every accepted panel picture; ``skipped: <reason>`` where it cannot run (never a
    failure for that)."""
    why = ocr_skipped()
    if why:
        return {"status": f"skipped: {why}"}
    panels: dict[str, Any] = {}
    try:
        for panel in _panels(state.task):
            part = state.part(f"{panel['id']}/svg")
            acc = part.accepted if part is not None else None
            if acc is None:
                continue
            dia = state.part(f"{panel['id']}/dialogue")
            said = dia.accepted if dia is not None else None
            lines = [str(d["text"]) for d in (said.value if said else panel["dialogue"])]
            panels[panel["id"]] = ocr_panel(str(acc.value), lines)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"status": f"skipped: OCR could not run ({type(exc).__name__}: {exc})"}
    return {"status": "ran", "panels": panels}


# --- delivery: the publish effect ------------------------------------------------------------
def export_dir(project: str, edition: str = "") -> Path:
    """``$COMIC_EXPORT_DIR/<project>``, else ``.loopwright/comic_exports/<project>``; a fork's
    edition in its own folder below."""
    root = Path(os.environ.get("COMIC_EXPORT_DIR") or ".loopwright/comic_exports")
    out = root / (project or "default")
    return out / edition if edition else out


def _edition(ctx: lw.Context) -> str:
    """``""`` for a run of the task; ``fork-<run id>`` for a fork (``loopwright fork``), whose
    pages are a second version for comparison: published under their own key and folder, never
    over the pages the origin published."""
    forked = any(n.get("kind") == "fork" for n in ctx.notes)
    return f"fork-{ctx.run_id[:12]}" if forked else ""


def _page_svg(page: str, panels: Sequence[str]) -> str:
    gap = 10
    height = gap + len(panels) * (H + gap)
    body = []
    for k, svg in enumerate(panels):
        inner = svg.replace("<svg ", f'<svg x="{gap}" y="{gap + k * (H + gap)}" ', 1)
        body.append(inner)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 2 * gap}" height="{height}" '
        f'data-page="{page}"><rect width="100%" height="100%" fill="#fff"/>'
        + "\n".join(body)
        + "</svg>"
    )


EXPORT_ZOOM = 2  # page PNGs at twice the SVG size (144 dpi in the PDF: the same page size)


def _write_pdf(path: Path, pngs: Sequence[bytes]) -> None:
    """One PDF page per page PNG (Pillow), written to a temporary name then moved in place."""
    import io

    from PIL import Image

    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in pngs]
    tmp = path.with_suffix(".pdf.part")
    images[0].save(
        tmp, "PDF", save_all=True, append_images=images[1:], resolution=72.0 * EXPORT_ZOOM
    )
    tmp.replace(path)


@lw.effect(
    "publish",
    key=lambda a: (
        f"{a['project']}/pages-{'-'.join(sorted(a['pages']))}"
        + (f"@{a['edition']}" if a.get("edition") else "")
    ),
    describe=lambda a: f"export pages {', '.join(sorted(a['pages']))} of {a['project']}",
)
def publish(
    project: str, pages: Mapping[str, Sequence[str]], *, key: str, edition: str = ""
) -> dict[str, Any]:
    """Write one SVG and one PNG per page, one PDF (a page per comic page) and one HTML book,
    then a manifest (written last: its presence
    means the export is complete). Not idempotent in spirit: a second export is a second
    delivery, which the journal and ``reconcile`` prevent."""
    out = export_dir(project, edition)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    sections = []
    for page in sorted(pages, key=int):
        svg = inline_art(_page_svg(page, pages[page]))  # --model mode: the pictures inlined
        name = f"page-{page}.svg"
        (out / name).write_text(svg)
        files.append(name)
        sections.append(f"<section><h2>Page {page}</h2>{svg}</section>")
    why = rasteriser_missing()
    pngs: list[bytes] = []
    for page in sorted(pages, key=int):
        if why:
            break
        png = rasterise((out / f"page-{page}.svg").read_text(), zoom=EXPORT_ZOOM)
        (out / f"page-{page}.png").write_bytes(png)
        files.append(f"page-{page}.png")
        pngs.append(png)
    if pngs:
        pdf = f"{project or 'comic'}.pdf"
        _write_pdf(out / pdf, pngs)
        files.append(pdf)
    book = f"{project or 'comic'}.html"
    (out / book).write_text(
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(project)}</title>"
        "<body style='font-family:sans-serif'>" + "\n".join(sections) + "</body>"
    )
    files.append(book)
    result = {"key": key, "folder": str(out), "files": files}
    if why:
        result["png_pdf"] = f"skipped: {why}"
    # The manifest is the delivery's commit point (reconcile reads it), written atomically
    # and before the log: a crash after it never delivers twice.
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out / "manifest.json")
    with (out / "publish.log").open("a") as f:
        f.write(key + "\n")
    return result


@publish.reconciler
def _published(key: str) -> dict[str, Any] | None:
    # the engine's key is "<effect>:<key>" (and "~N" for a later generation)
    project, _, rest = key.split(":", 1)[-1].rpartition("/pages-")
    edition = rest.split("~", 1)[0].partition("@")[2]
    manifest = export_dir(project, edition) / "manifest.json"
    if manifest.is_file():
        data: dict[str, Any] = json.loads(manifest.read_text())
        if data.get("key") == key:
            return data
    return None


# --- the command line: offline, or --model ---------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python examples/comic_pages/comic.py [--model NAME [--base-url URL] [--size WxH]
    [--price USD]] [--store PATH] [LOOPWRIGHT ARGS...]``: a ``loopwright`` command with the
    example's image model configured. Without arguments after the options it runs the example:
    ``loop.toml`` offline, ``model.toml`` with ``--model``. Anything after them is a loopwright
    command (``approve lantern-harbor/pages-3-5 --by you --resume``, ``show …``, ``ui``), run
    with the same model and store — a resumed run needs the model again."""
    import argparse

    from loopwright.cli import main as loopwright

    ap = argparse.ArgumentParser(prog="comic.py", description=main.__doc__)
    ap.add_argument("--model", help="image model name (COMIC_IMAGE_MODEL): the --model mode")
    ap.add_argument("--base-url", help="OpenAI-compatible endpoint (COMIC_IMAGE_BASE_URL)")
    ap.add_argument("--size", help="picture size WIDTHxHEIGHT (COMIC_IMAGE_SIZE; 1536x1024)")
    ap.add_argument("--price", help="dollars per picture (COMIC_IMAGE_PRICE)")
    ap.add_argument("--store", help="the store (LOOPWRIGHT_STORE): runs and pictures")
    opts, rest = ap.parse_known_args(argv)
    for flag, name in (
        ("model", "COMIC_IMAGE_MODEL"),
        ("base_url", "COMIC_IMAGE_BASE_URL"),
        ("size", "COMIC_IMAGE_SIZE"),
        ("price", "COMIC_IMAGE_PRICE"),
        ("store", "LOOPWRIGHT_STORE"),
    ):
        value = getattr(opts, flag)
        if value:
            os.environ[name] = value
    model_mode = bool(os.environ.get("COMIC_IMAGE_MODEL"))
    if not rest:
        rest = ["run", str(HERE / ("model.toml" if model_mode else "loop.toml"))]
    return int(loopwright(list(rest)) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
