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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "fill_versions",
    "pack",
    "packed_calls",
    "packed_finding",
    "packed_proposal",
    "packed_record",
    "packed_usage",
    "packed_verdict",
    "refer_versions",
    "referred_versions",
    "unpack",
]

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
    # ``unpack``'s walk (``_each_part``) written out with each spec's dropper: it
    # runs every cycle (a trivial cycle's record is a dozen dicts), the generic walk cost two
    # calls a dict more. The records it packs are the engine's: plain dicts and lists.
    if "proposal" not in record or "digest" not in record:
        return record
    out = _DROP_RECORD(record)
    if type(p := out["proposal"]) is dict:
        out["proposal"] = _DROP_PROPOSAL(p)
    for key in ("visible", "held_out"):
        if key in out and type(vs := out[key]) is dict:
            packed: dict[str, Any] = {}
            for name, v in vs.items():  # (loops: no comprehension a cycle)
                packed[name] = _pack_verdict(name, v)
            out[key] = packed
    if "calls" in out and type(calls := out["calls"]) is list:
        dropped: list[Any] = []
        for c in calls:
            dropped.append(DROP_CALL(c) if type(c) is dict else c)
        out["calls"] = dropped
    if "usage" in out and type(u := out["usage"]) is dict:
        out["usage"] = _DROP_USAGE(u)
    return out


def _pack_verdict(name: str, v: Any) -> Any:
    if type(v) is not dict:
        return v
    out = _DROP_VERDICT(v)
    if "findings" in out and type(fs := out["findings"]) is list:
        packed: list[Any] = []
        for f in fs:  # (a loop: no comprehension a verdict)
            packed.append(_pack_finding(name, f))
        out["findings"] = packed
    return out


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
    if type(f) is not dict:
        return f
    out = _DROP_FINDING(f)
    if "verifier" in out and out["verifier"] == name:  # the engine fills it with the verdict's name
        del out["verifier"]
    return out


def _unpack_finding(name: str, f: Any) -> Any:
    return _fill(f, _FINDING, verifier=name) if isinstance(f, dict) else f


def _default_test(i: int, dflt: Any, v: str, env: dict[str, Any]) -> str:
    """The test that ``v`` holds the default ``dflt`` of spec entry ``i``, of the default's
    type (``-0.0`` is not ``0.0``): the one test ``pack``'s droppers and the packed builders
    share, so that a record built packed is ``pack``'s of the same record."""
    kind = type(dflt)
    env[f"_d{i}"], env[f"_t{i}"] = dflt, kind
    if dflt is None or kind is bool:
        return f"{v} is _d{i}"  # singletons
    if kind in (dict, list) and not dflt:
        return f"type({v}) is _t{i} and not {v}"
    if kind is float:
        return f"type({v}) is float and {v} == _d{i} and _copysign(1.0, {v}) > 0.0"
    return f"type({v}) is _t{i} and {v} == _d{i}"


def _dropper(spec: _Spec) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function that copies a mapping (in C) and deletes the keys of ``spec`` that hold their
    default, of the default's type: ``-0.0`` is not ``0.0`` (a missing key is passed over). It
    runs for each dict of every cycle's record, so its tests are written out for the spec, as
    ``dataclasses`` writes ``__init__``: a generic loop over the spec cost three times as
    much."""
    env: dict[str, Any] = {"_copysign": math.copysign}
    lines = ["def drop(d):", "    out = dict(d)"]
    for i, (k, dflt) in enumerate(spec):
        if dflt is _KEEP:
            continue
        lines += [
            f"    if {k!r} in out:",  # (no call: ``in`` and a subscript)
            f"        v = out[{k!r}]",
            f"        if {_default_test(i, dflt, 'v', env)}:",
            f"            del out[{k!r}]",
        ]
    lines.append("    return out")
    exec("\n".join(lines), env)  # built from the specs above, nothing else
    fn: Callable[[Mapping[str, Any]], dict[str, Any]] = env["drop"]
    return fn


def _builder(spec: _Spec, skip_equal: str | None = None) -> Callable[..., dict[str, Any]]:
    """A function taking the values of ``spec``'s keys by position that returns the dict
    ``_dropper(spec)`` makes of the dict holding them all in the spec's order: the packed
    form built directly, with no whole dict built, copied and pruned (the engine's record
    every cycle, bench/RESULTS.md "stop 41"). ``skip_equal``: a kept key left out where it
    equals the last argument (a finding's ``verifier``: its verdict's name)."""
    env: dict[str, Any] = {"_copysign": math.copysign}
    args = [f"a{i}" for i in range(len(spec))]
    lines = [f"def build({', '.join([*args, *(['name'] if skip_equal else [])])}):"]
    lines.append("    out = {}")
    for i, (k, dflt) in enumerate(spec):
        if k == skip_equal:
            lines += [f"    if not a{i} == name:", f"        out[{k!r}] = a{i}"]
        elif dflt is _KEEP:
            lines.append(f"    out[{k!r}] = a{i}")
        else:
            lines += [
                f"    if not ({_default_test(i, dflt, f'a{i}', env)}):",
                f"        out[{k!r}] = a{i}",
            ]
    lines.append("    return out")
    exec("\n".join(lines), env)  # built from the specs above, nothing else
    fn: Callable[..., dict[str, Any]] = env["build"]
    return fn


_DROP_RECORD, _DROP_PROPOSAL, _DROP_VERDICT, _DROP_FINDING, DROP_CALL, _DROP_USAGE = (
    _dropper(spec) for spec in (_RECORD, _PROPOSAL, _VERDICT, _FINDING, _CALL, _USAGE)
)

# The packed builders (``_builder``): each takes its spec's values by position, in the order
# of the spec (that of the engine's ``to_dict``), and returns what ``pack`` makes of them.
packed_record = _builder(_RECORD)
packed_proposal = _builder(_PROPOSAL)
packed_verdict = _builder(_VERDICT)
packed_finding = _builder(_FINDING, skip_equal="verifier")  # its verdict's name last
packed_usage = _builder(_USAGE)


def packed_calls(calls: Sequence[Any]) -> list[Any]:
    """A record's ``calls`` as ``pack`` leaves them (a loop: no comprehension a cycle)."""
    out: list[Any] = []
    for c in calls:
        out.append(DROP_CALL(c) if type(c) is dict else c)
    return out


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


# --- an edit's value, stored once -------------------------------------------------------------
# An edit's value is also the value of the version it makes, written in the same commit: a
# record holding it too stored each cycle's new work twice (a 5 KB draft a cycle wrote 10 KB,
# and the redaction net scanned it twice). A large one is stored in the version only; the edit
# names it (``{"artifact", "part", "version"}``, no ``"value"``: an edit never lacks one
# otherwise) and the store puts the value back when it reads the record. A rollback, which lets
# a run write those version numbers again, first writes the values back into the records of the
# cycles it abandons (``SQLStore._inline_versions_in``), so a record keeps what was proposed.
# Small values stay in the record: naming a version costs about as many bytes, and a read.
# A ``replace`` proposal's parts are plain values, with no dict to mark: a named one is left as
# null in ``"replace"`` (its order kept) and listed under ``"replace_versions"``.
REFER_MIN_CHARS = 256  # a text's length from which its edit names the version
REPLACE_VERSIONS = "replace_versions"  # a proposal's key: {artifact: {part: version}}


def refer_versions(
    record: dict[str, Any],
    rows: Sequence[tuple[str, int, int, str, Any]],
    clean: Callable[[Any], bool] | None = None,
    held: Callable[[str, Any], int | None] | None = None,
) -> dict[str, Any]:
    """``record`` with each large edit value that is (the same object as) the value of a
    version row written with it replaced by that version's number; the record itself is not
    changed (a new record is returned where an edit was replaced). ``clean``: whether a value
    may be named (the engine's: nothing in it the redaction net masks, so the record reads
    back as it was stored); one it refuses stays in the record, to be masked there.
    ``held(ref, value)``: the number of a version already stored with that value, for an
    edit that writes a part's value again (no new version: its cycle's record names the one
    that holds it, instead of carrying the value every cycle it is sent again)."""
    p = record.get("proposal")
    if type(p) is not dict:
        return record
    # Every cycle asks, and most edits are short texts: the test is written out, no call an
    # edit (a trivial cycle's cost, bench/README.md "Instructions, not seconds").
    for e in p.get("edits") or ():
        v: Any = e.get("value") if type(e) is dict else None
        t = type(v)
        if (t is str and len(v) >= REFER_MIN_CHARS) or ((t is dict or t is list) and v):
            return _referred(record, p, rows, clean, held)
    if p.get("replace"):  # rare: a whole artifact rewritten
        return _referred(record, p, rows, clean, held)
    return record


def _referable(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return len(value) >= REFER_MIN_CHARS
    return (kind is dict or kind is list) and bool(value)


def _referred(
    record: dict[str, Any],
    p: dict[str, Any],
    rows: Sequence[tuple[str, int, int, str, Any]],
    clean: Callable[[Any], bool] | None,
    held: Callable[[str, Any], int | None] | None = None,
) -> dict[str, Any]:
    made = {(ref, id(value)): n for ref, n, _cycle, _status, value in rows}

    def named(artifact: Any, part: Any, v: Any, where: Any = None) -> int | None:
        if not _referable(v):
            return None
        ref = f"{artifact}/{part}"
        n = made.get((ref, id(v)))
        if n is None and held is not None:
            n = held(ref, v)
        if n is not None and clean is not None and not clean(v if where is None else where):
            return None  # it holds a secret: masked in the record, as any other value
        return n

    out = dict(p)
    new: list[Any] = []
    hit = False
    for e in p.get("edits") or ():
        n = named(e.get("artifact"), e.get("part"), e.get("value")) if type(e) is dict else None
        if n is None:
            new.append(e)
        else:
            new.append({"artifact": e["artifact"], "part": e["part"], "version": n})
            hit = True
    if hit:
        out["edits"] = new
    # A replacement's part has no dict of its own to mark, so its value is left as null (the
    # parts keep their order) and ``replace_versions`` says which versions hold them.
    replace = p.get("replace")
    versions: dict[str, dict[str, int]] = {}
    if type(replace) is dict:
        kept: dict[str, Any] = {}
        for artifact, parts in replace.items():
            # A replaced value sits under its names in the record: one the net reads as a
            # secret's (a part ``token``, an artifact ``credentials``) masks it whatever it
            # holds, so the clean test is given the value under them (invariant 9).
            got = (
                {
                    k: n
                    for k, v in parts.items()
                    if (n := named(artifact, k, v, {artifact: {k: v}})) is not None
                }
                if type(parts) is dict
                else None
            )
            if got:
                versions[artifact] = got
                parts = {k: None if k in got else v for k, v in parts.items()}
            kept[artifact] = parts
        if versions:
            out["replace"] = kept
            out[REPLACE_VERSIONS] = versions
    return {**record, "proposal": out} if hit or versions else record


def _refs(record: Mapping[str, Any]) -> list[tuple[int, str, int]]:
    p = record.get("proposal")
    edits = p.get("edits") if isinstance(p, dict) else None
    if not isinstance(edits, list):
        return []
    return [
        (i, f"{e.get('artifact')}/{e.get('part')}", e["version"])
        for i, e in enumerate(edits)
        if isinstance(e, dict) and "value" not in e and type(e.get("version")) is int
    ]


def _replace_refs(record: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """``(artifact, part, n)`` of each replaced part whose value version ``n`` holds."""
    p = record.get("proposal")
    named = p.get(REPLACE_VERSIONS) if isinstance(p, dict) else None
    if not isinstance(named, dict):
        return []
    return [
        (a, k, n)
        for a, parts in named.items()
        if isinstance(parts, dict)
        for k, n in parts.items()
        if type(n) is int
    ]


def referred_versions(record: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The ``(ref, n)`` of the versions ``record``'s edits and replacements name instead of
    holding a value."""
    return [(ref, n) for _i, ref, n in _refs(record)] + [
        (f"{a}/{k}", n) for a, k, n in _replace_refs(record)
    ]


def fill_versions(record: dict[str, Any], values: Mapping[tuple[str, int], Any]) -> dict[str, Any]:
    """``record`` with each edit that names a version given its value back (its proposal
    replaced in place: the record is one just read or unpacked). A version the store lacks
    (damage) leaves the edit as stored."""
    refs, replaced = _refs(record), _replace_refs(record)
    if not (refs or replaced):
        return record
    p = record["proposal"] = dict(record["proposal"])  # may be shared with a record written
    if refs:
        edits = p["edits"] = list(p["edits"])
        for i, ref, n in refs:
            if (ref, n) in values:
                e = edits[i]
                edits[i] = {"artifact": e["artifact"], "part": e["part"], "value": values[ref, n]}
    if replaced:
        replace = p["replace"] = {
            a: dict(parts) if isinstance(parts, dict) else parts
            for a, parts in (p.get("replace") or {}).items()
        }
        left: dict[str, dict[str, int]] = {}
        for a, k, n in replaced:
            parts = replace.get(a)
            if isinstance(parts, dict) and (f"{a}/{k}", n) in values:
                parts[k] = values[f"{a}/{k}", n]
            else:
                left.setdefault(a, {})[k] = n
        if left:
            p[REPLACE_VERSIONS] = left
        else:
            del p[REPLACE_VERSIONS]
    return record
