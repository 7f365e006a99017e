"""The offline drawing of the comic example: a backdrop per storyboard location, figures in a
pose, balloon tails. SVG fragments only; ``comic.render`` puts them together, and the checks
read nothing from here (backdrops carry no ``data-role``, no text and no face circles)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

W, H = 400, 300
FACE_Y, FACE_R = 150, 26
COAT_TOP, HIP = FACE_Y + FACE_R, 256
TROUSERS = "#263238"

LOCATIONS = (
    "harbour_wall",
    "net_shed",
    "quay",
    "steps",
    "bollards",
    "moorings",
    "lantern_quay",
)
POSES = ("stand", "run", "stop", "look", "point", "hold_up")


def _sky(pid: str, top: str, bottom: str) -> list[str]:
    gid = f"sky-{pid}"
    return [
        f'<defs><linearGradient id="{gid}" x1="0" y1="0" x2="0" y2="1">'
        f'<stop offset="0" stop-color="{top}"/><stop offset="1" stop-color="{bottom}"/>'
        "</linearGradient></defs>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="url(#{gid})"/>',
    ]


def _sea(y: int, colour: str = "#1c3a4a") -> list[str]:
    out = [f'<rect x="0" y="{y}" width="{W}" height="{H - y}" fill="{colour}"/>']
    for k in range(4):
        yy = y + 8 + k * 12
        out.append(
            f'<path d="M0,{yy} q25,-5 50,0 t50,0 t50,0 t50,0 t50,0 t50,0 t50,0 t50,0" '
            'fill="none" stroke="#2f5d73" stroke-width="2"/>'
        )
    return out


def _rain(pid: str) -> list[str]:
    seed = sum(map(ord, pid))
    lines = []
    for k in range(26):
        x = (seed * 37 + k * 53) % W
        y = (seed * 11 + k * 29) % (H - 70)
        lines.append(f"M{x},{y} l-7,18")
    return [f'<path d="{" ".join(lines)}" stroke="#9fb6c3" stroke-width="1.2" opacity="0.7"/>']


def _ground(colour: str = "#4e5b61", y: int = 262) -> list[str]:
    return [
        f'<rect x="0" y="{y}" width="{W}" height="{H - y}" fill="{colour}"/>',
        f'<path d="M0,{y} H{W}" stroke="#2b3336" stroke-width="2"/>',
    ]


def _wall(y: int) -> list[str]:
    out = [f'<rect x="0" y="{y}" width="{W}" height="{262 - y}" fill="#6d6a64"/>']
    for row, yy in enumerate(range(y, 262, 14)):
        out.append(f'<path d="M0,{yy} H{W}" stroke="#57544f" stroke-width="1.5"/>')
        for x in range(-20 + (row % 2) * 20, W, 40):
            out.append(f'<path d="M{x},{yy} v14" stroke="#57544f" stroke-width="1.5"/>')
    return out


def _lamp(x: int, y: int, lit: bool = False) -> list[str]:
    glass = "#ffd54f" if lit else "#3d4449"
    return [
        f'<rect x="{x - 2}" y="{y}" width="4" height="{262 - y}" fill="#22292d"/>',
        f'<rect x="{x - 7}" y="{y - 14}" width="14" height="16" rx="2" fill="{glass}" '
        'stroke="#22292d" stroke-width="2"/>',
        f'<path d="M{x - 9},{y - 14} h18 l-9,-7 z" fill="#22292d"/>',
    ]


def _boat(x: int, y: int, hull: str, tilt: int) -> list[str]:
    return [
        f'<g transform="rotate({tilt} {x} {y})">'
        f'<path d="M{x - 40},{y} h80 l-12,16 h-56 z" fill="{hull}" stroke="#1b1b1b"/>'
        f'<rect x="{x - 1}" y="{y - 46}" width="3" height="46" fill="#3e2f22"/>'
        f'<path d="M{x + 2},{y - 44} l26,38 h-26 z" fill="#d8d2c4"/></g>'
    ]


def backdrop(location: str, pid: str) -> list[str]:
    """The panel's background for a storyboard location (``LOCATIONS``); unknown: a plain
    night harbour."""
    if location == "harbour_wall":
        return [
            *_sky(pid, "#0f1d2b", "#2c4356"),
            *_sea(96),
            *_wall(150),
            *_ground("#56625f"),
            *_rain(pid),
        ]
    if location == "net_shed":
        out = [*_sky(pid, "#152332", "#34495a"), *_ground("#5a5046", 250)]
        out.append('<rect x="196" y="112" width="190" height="138" fill="#6b4b32"/>')
        out += [
            f'<path d="M{x},112 v138" stroke="#54391f" stroke-width="2"/>'
            for x in range(210, 386, 16)
        ]
        out.append('<path d="M184,116 L291,70 L398,116 z" fill="#3b2a1e"/>')
        out.append('<rect x="318" y="170" width="40" height="80" fill="#2a1d14"/>')
        out.append('<rect x="322" y="174" width="32" height="60" fill="#f2c14e" opacity="0.85"/>')
        net = " ".join(f"M{x},130 l40,60" for x in range(200, 300, 12))
        net += " " + " ".join(f"M{x},130 l-40,60" for x in range(240, 340, 12))
        out.append(f'<path d="{net}" stroke="#a89f91" stroke-width="1" opacity="0.8"/>')
        return [*out, *_rain(pid)]
    if location == "quay":
        out = [*_sky(pid, "#0b1622", "#22394a"), *_sea(118, "#142c3a"), *_ground("#3f4a4f", 268)]
        out.append('<path d="M250,112 h150 v8 h-150 z" fill="#2a3034"/>')  # the breakwater
        out.append('<ellipse cx="300" cy="170" rx="38" ry="6" fill="#0d1a22" opacity="0.9"/>')
        return out
    if location == "steps":
        out = [*_sky(pid, "#14202e", "#324a5c"), *_ground("#5c6266", 268)]
        steps = "M230,268 " + " ".join("v-18 h28" for _ in range(6)) + " V268 z"
        out.append(f'<path d="{steps}" fill="#7b7770" stroke="#55524d" stroke-width="2"/>')
        out.append('<path d="M236,222 l168,-108" stroke="#2b2b2b" stroke-width="4"/>')
        out += _lamp(60, 150, lit=True)
        return [*out, *_rain(pid)]
    if location == "bollards":
        out = [*_sky(pid, "#101c29", "#2b4152"), *_sea(120), *_ground("#535e62", 238)]
        for x in (40, 150, 360):
            out.append(
                f'<path d="M{x - 12},250 v-22 a12,8 0 0,1 24,0 v22 z" fill="#2c2f31" '
                'stroke="#151718"/>'
            )
        out.append(
            '<path d="M372,232 q-60,30 -120,24" fill="none" stroke="#8d7b5a" stroke-width="3"/>'
        )
        return out
    if location == "moorings":
        out = [*_sky(pid, "#0e1a27", "#26405a"), *_sea(120)]
        out += _boat(90, 150, "#8c2f2f", -6) + _boat(300, 140, "#2f5f8c", 8)
        out += _ground("#4f5a5e", 262)
        return [*out, *_rain(pid)]
    if location == "lantern_quay":
        out = [*_sky(pid, "#0a1320", "#1d3042"), *_sea(110, "#112431"), *_ground("#55605f", 250)]
        for x in (30, 130, 270, 370):
            out += _lamp(x, 118)
        out.append(
            '<path d="M30,106 Q200,140 370,106" fill="none" stroke="#1d2326" stroke-width="2"/>'
        )
        return out
    return [*_sky(pid, "#16222e", "#3a5061"), *_sea(110), *_ground()]


def _limbs(pose: str, x: int) -> tuple[str, str, list[tuple[int, int]]]:
    """Leg and arm paths, and where the hands are, for a pose."""
    sh = COAT_TOP + 12  # shoulders
    legs = {
        "run": f"M{x - 10},{HIP} L{x - 36},{HIP + 34} M{x + 10},{HIP} L{x + 34},{HIP + 28}",
    }.get(pose, f"M{x - 12},{HIP} L{x - 14},{HIP + 38} M{x + 12},{HIP} L{x + 14},{HIP + 38}")
    left = (x - 52, sh + 34) if pose == "run" else (x - 38, sh + 58)
    right = {
        "run": (x + 54, sh - 28),
        "stop": (x + 84, sh - 8),
        "point": (x + 86, sh - 40),
        "hold_up": (x + 44, FACE_Y - 44),
    }.get(pose, (x + 38, sh + 58))
    arms = f"M{x - 28},{sh} L{left[0]},{left[1]} M{x + 28},{sh} L{right[0]},{right[1]}"
    if pose == "look":  # a hand on the hip, staring out
        right = (x + 30, HIP - 14)
        arms = f"M{x - 28},{sh} L{left[0]},{left[1]} M{x + 28},{sh} L{x + 52},{sh + 28} L{right[0]},{right[1]}"
    return legs, arms, [left, right]


def figure(f: Mapping[str, Any], pose: str) -> list[str]:
    """One figure's group, open (its features and ``</g>`` follow). The coat comes first and
    carries ``data-role="coat"`` (what the identity check and a person's recolouring look
    for); face and hair keep their roles."""
    x, who = int(f["x"]), str(f["character"])
    legs, arms, hands = _limbs(pose if pose in POSES else "stand", x)
    out = [
        f'<g class="figure" data-pose="{pose}" data-character="{who}">',
        f'<rect data-role="coat" x="{x - 30}" y="{COAT_TOP}" width="60" height="{HIP - COAT_TOP + 4}" '
        f'rx="12" fill="{f["coat"]}"/>',
        f'<path data-role="sleeve" d="{arms}" stroke="{f["coat"]}" stroke-width="13" '
        'stroke-linecap="round" fill="none"/>',
        f'<path d="{legs}" stroke="{TROUSERS}" stroke-width="14" stroke-linecap="round" fill="none"/>',
    ]
    out += [f'<circle cx="{hx}" cy="{hy}" r="7" fill="{f["skin"]}"/>' for hx, hy in hands]
    if pose == "hold_up":  # the brass key
        hx, hy = hands[1]
        out.append(
            f'<path d="M{hx - 3},{hy - 8} v-16 m0,6 h7 m-7,5 h5" stroke="#c9a227" '
            'stroke-width="3" fill="none"/>'
        )
        out.append(
            f'<circle cx="{hx - 3}" cy="{hy - 29}" r="5" fill="none" stroke="#c9a227" stroke-width="3"/>'
        )
    out.append(f'<circle data-role="face" cx="{x}" cy="{FACE_Y}" r="{FACE_R}" fill="{f["skin"]}"/>')
    out.append(
        f'<path data-role="hair" d="M{x - FACE_R},{FACE_Y - 4} a{FACE_R},{FACE_R} 0 0,1 '
        f'{2 * FACE_R},0 z" fill="{f["hair"]}"/>'
    )
    out.append(
        f'<circle cx="{x - 9}" cy="{FACE_Y + 2}" r="2.6" fill="#1b1b1b"/>'
        f'<circle cx="{x + 9}" cy="{FACE_Y + 2}" r="2.6" fill="#1b1b1b"/>'
        f'<path d="M{x - 7},{FACE_Y + 13} q7,4 14,0" stroke="#6d3b2a" stroke-width="2" fill="none"/>'
    )
    return out


def tail(b: Mapping[str, Any], figures: Sequence[Mapping[str, Any]]) -> list[str]:
    """A balloon's tail towards its speaker's head (none when the speaker is not drawn or the
    balloon is not above the heads), drawn under the balloon. The balloon's border stays
    closed over the tail's root: an open one joins balloon, tail and figure into one shape,
    and OCR (the held-out proof) then finds no text block in it."""
    speaker = next((f for f in figures if f.get("character") == b["speaker"]), None)
    x, y, w, h = float(b["x"]), float(b["y"]), float(b["w"]), float(b["h"])
    head_top = FACE_Y - FACE_R - 8
    if speaker is None or y + h + 12 > head_top:
        return []
    sx = float(speaker["x"])
    base = min(max(sx, x + 22), x + w - 22)
    tip_y = min(y + h + 34, head_top)
    path = f"M{base - 9:g},{y + h - 2:g} L{sx:g},{tip_y:g} L{base + 9:g},{y + h - 2:g} z"
    return [
        f'<path data-role="tail" d="{path}" fill="{b["fill"]}" stroke="#000" stroke-width="1.5"/>'
    ]
