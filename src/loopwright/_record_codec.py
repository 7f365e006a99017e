"""A cycle's record as stored: the engine's record less the values that are their defaults.

Most of a trivial cycle's record is defaults — a proposal with no plan, note, usage or
effects, verdicts without evidence, findings of severity ``error`` raised by the verifier they
sit under, calls that cost nothing — about 40 % of its bytes, written every cycle (issue 14:
bytes per cycle). ``pack`` leaves them out before the store writes the row; ``unpack`` puts
them back when it reads one, so every reader sees the record as the engine built it (same keys,
same order). A value is left out only when it is its default *and of the default's type*
(``0`` is not ``0.0``, ``False`` is not ``0``, ``-0.0`` is not ``0.0``), so
``unpack(pack(r)) == r`` exactly for the records the engine writes; a key the specs do not
know is kept, after the known ones. A record stored whole (before this) reads with the same
values, any field added since filled with its default; a record that is not a cycle's is
stored and read as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["pack", "unpack"]

_KEEP = object()  # a key never left out

# Each spec: the keys in the order the engine writes them, with the default left out.
_RECORD: tuple[tuple[str, Any], ...] = (
    ("cycle", _KEEP),
    ("proposal", _KEEP),
    ("digest", _KEEP),
    ("duplicate", False),
    ("visible", _KEEP),
    ("held_out", {}),
    ("score", _KEEP),
    ("improved", _KEEP),
    ("decision", _KEEP),
    ("effects", []),
    ("memory", []),
    ("calls", _KEEP),
    ("usage", _KEEP),
)
_PROPOSAL: tuple[tuple[str, Any], ...] = (  # Proposal.to_dict
    ("kind", _KEEP),
    ("edits", _KEEP),
    ("replace", None),
    ("plan", {}),
    ("new_steps", []),
    ("note", ""),
    ("usage", None),
    ("escalate", None),
    ("effects", []),
    ("question", None),
)
_VERDICT: tuple[tuple[str, Any], ...] = (  # Verdict.to_dict
    ("passed", _KEEP),
    ("score", _KEEP),
    ("findings", _KEEP),
    ("evidence", {}),
    ("usage", None),
    ("checked", None),
)
_FINDING: tuple[tuple[str, Any], ...] = (  # Finding.to_dict; "verifier": the verdict's name
    ("message", _KEEP),
    ("artifact", _KEEP),
    ("part", _KEEP),
    ("dimension", _KEEP),
    ("severity", "error"),
    ("verifier", _KEEP),
    ("evidence", {}),
)
_CALL: tuple[tuple[str, Any], ...] = (("who", _KEEP), ("cost_usd", 0.0), ("tokens", 0))
_USAGE: tuple[tuple[str, Any], ...] = (("cost_usd", 0.0), ("tokens", 0), ("seconds", 0.0))

_KEYS = {
    id(spec): frozenset(k for k, _ in spec)
    for spec in (_RECORD, _PROPOSAL, _VERDICT, _FINDING, _CALL, _USAGE)
}


def _is_cycle_record(rec: Mapping[str, Any]) -> bool:
    return "proposal" in rec and "digest" in rec


def pack(record: dict[str, Any]) -> dict[str, Any]:
    """The record to store: a cycle's record less its default values (a new dict; the
    record is not changed). Any other record is returned as it is."""
    return _each_part(record, _drop, _pack_finding)


def unpack(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the engine built it from a stored one (``pack``'s inverse; a record
    stored whole comes back equal to itself)."""
    return _each_part(record, _fill, _unpack_finding)


_Spec = tuple[tuple[str, Any], ...]


def _each_part(
    record: dict[str, Any],
    one: Callable[[Mapping[str, Any], _Spec], dict[str, Any]],
    finding: Callable[[str, Any], Any],
) -> dict[str, Any]:
    """``one`` applied to the record and each of its dicts with a spec (``finding`` to each
    finding, with its verdict's name): the walk ``pack`` and ``unpack`` share."""
    if not _is_cycle_record(record):
        return record
    out = one(record, _RECORD)
    if isinstance(p := out.get("proposal"), dict):
        out["proposal"] = one(p, _PROPOSAL)
    for key in ("visible", "held_out"):
        if isinstance(vs := out.get(key), dict):
            out[key] = {name: _verdict(name, v, one, finding) for name, v in vs.items()}
    if isinstance(calls := out.get("calls"), list):
        out["calls"] = [one(c, _CALL) if isinstance(c, dict) else c for c in calls]
    if isinstance(u := out.get("usage"), dict):
        out["usage"] = one(u, _USAGE)
    return out


def _verdict(
    name: str,
    v: Any,
    one: Callable[[Mapping[str, Any], _Spec], dict[str, Any]],
    finding: Callable[[str, Any], Any],
) -> Any:
    if not isinstance(v, dict):
        return v
    out = one(v, _VERDICT)
    if isinstance(fs := out.get("findings"), list):
        out["findings"] = [finding(name, f) for f in fs]
    return out


def _pack_finding(name: str, f: Any) -> Any:
    if not isinstance(f, dict):
        return f
    out = _drop(f, _FINDING)
    if out.get("verifier") == name:  # the engine fills it with the verdict's name
        del out["verifier"]
    return out


def _unpack_finding(name: str, f: Any) -> Any:
    return _fill(f, _FINDING, verifier=name) if isinstance(f, dict) else f


def _drop(d: Mapping[str, Any], spec: _Spec) -> dict[str, Any]:
    return _DROPPERS[id(spec)](d)


def _dropper(spec: _Spec) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function that copies a mapping (in C) and deletes the keys of ``spec`` that hold their
    default, of the default's type: ``-0.0`` is not ``0.0`` (``_KEEP``, a missing key's
    stand-in, is of no default's type). It runs for each dict of every cycle's record, so its
    tests are written out for the spec, as ``dataclasses`` writes ``__init__``: a generic loop
    over the spec cost three times as much."""
    env: dict[str, Any] = {"_KEEP": _KEEP, "_copysign": math.copysign}
    lines = ["def drop(d):", "    out = dict(d)"]
    for i, (k, dflt) in enumerate(spec):
        if dflt is _KEEP:
            continue
        kind = type(dflt)
        env[f"_d{i}"], env[f"_t{i}"] = dflt, kind
        if dflt is None or kind is bool:
            test = f"v is _d{i}"  # singletons
        elif kind in (dict, list) and not dflt:
            test = f"type(v) is _t{i} and not v"
        elif kind is float:
            test = f"type(v) is float and v == _d{i} and _copysign(1.0, v) > 0.0"
        else:
            test = f"type(v) is _t{i} and v == _d{i}"
        lines += [f"    v = out.get({k!r}, _KEEP)", f"    if {test}:", f"        del out[{k!r}]"]
    lines.append("    return out")
    exec("\n".join(lines), env)  # built from the specs above, nothing else
    fn: Callable[[Mapping[str, Any]], dict[str, Any]] = env["drop"]
    return fn


_DROPPERS = {
    id(spec): _dropper(spec) for spec in (_RECORD, _PROPOSAL, _VERDICT, _FINDING, _CALL, _USAGE)
}


def _fill(d: Mapping[str, Any], spec: _Spec, **also: Any) -> dict[str, Any]:
    """``d`` with each missing default back, in the spec's order (keys it does not know
    follow, in their own order). ``also``: defaults of keys the spec keeps."""
    out: dict[str, Any] = {}
    for k, dflt in spec:
        if k in d:
            out[k] = d[k]
        elif k in also:
            out[k] = also[k]
        elif dflt is not _KEEP:
            out[k] = dflt.copy() if isinstance(dflt, dict | list) else dflt
    known = _KEYS[id(spec)]
    for k, v in d.items():
        if k not in known:
            out[k] = v
    return out
