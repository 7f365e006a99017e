"""The JSON a model must reply with, and a small validator for it.

The schemas below are sent to the model (``response_format`` JSON schema, a tool's parameters,
or quoted in the prompt) and the reply is checked against the *same* schema by ``validate``: a
hand-written validator for the subset of JSON Schema they use (``type`` with type lists,
``properties``, ``required``, ``additionalProperties: false``, ``items``, ``enum``,
``minimum``/``maximum``, ``minLength``). It needs no ``jsonschema`` package. A reply that is not
JSON, or does not fit, raises ``MalformedReplyError`` — a ``TransientError``, so the engine
retries it under the loop's retry policy.
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .._json import deeper_than, is_text, lone_surrogate
from .._retry import TransientError
from .._usage import Usage

__all__ = [
    "PROPOSAL_SCHEMA",
    "REVIEW_SCHEMA",
    "MalformedReplyError",
    "parse_reply",
    "validate",
]


class MalformedReplyError(TransientError):
    """The model's reply was not JSON or did not fit the schema.

    A ``TransientError``: sampling again may give a well-formed reply, so the engine retries it
    (and gives up, escalating the run, once the retry policy's attempts are spent).

    Attributes:
        reason: what was wrong, naming the JSON path at fault.
        raw: the start of the reply as received (at most 2,000 characters), a lone surrogate
            in it escaped (``\\ud800``): it is shown back to the model in a repair turn, and a
            request holding one cannot be sent (not UTF-8).
        usage: what the malformed reply cost (set by the adapter). Inside an engine call the
            engine charges it (journaled with the failed attempt); outside one the adapter also
            adds it to the same ``bill_to``'s next successful call, so a caller that charges it
            here as well would count it twice.
        reply: the call as the adapter saw it (its ``ModelReply``: what had arrived of a
            stream that broke off), when the adapter sets it.
    """

    def __init__(self, reason: str, raw: str = "") -> None:
        self.reason = reason
        self.raw = raw[:2000].encode("utf-8", "backslashreplace").decode("utf-8")
        self.usage: Usage | None = None
        self.reply: Any = None
        super().__init__(f"malformed model reply: {reason}")

    def __reduce__(self) -> tuple[type[MalformedReplyError], tuple[str, str], dict[str, Any]]:
        return (type(self), (self.reason, self.raw), {"usage": self.usage})


_EDIT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact": {"type": "string", "minLength": 1},
        "part": {"type": "string", "minLength": 1},
        "value": {"description": "the part's complete new value (any JSON value)"},
    },
    "required": ["artifact", "part", "value"],
    "additionalProperties": False,
}

_QUESTION: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "text": {"type": "string", "minLength": 1},
        "choices": {"type": "array", "items": {"type": "string"}},
        "type": {"type": "string", "enum": ["text", "number", "integer", "boolean"]},
    },
    "required": ["text"],
    "additionalProperties": False,
}

PROPOSAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "edits": {"type": "array", "items": _EDIT},
        "note": {"type": "string"},
        "escalate": {"type": ["string", "null"]},
        "question": _QUESTION,
    },
    "required": ["edits"],
    "additionalProperties": False,
}
"""What an actor model replies: local edits to named parts, a note, and optionally a reason to
escalate or a question for a person."""

_REVIEW_FINDING: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact": {"type": ["string", "null"]},
        "part": {"type": ["string", "null"]},
        "dimension": {"type": "string"},
        "message": {"type": "string", "minLength": 1},
        "severity": {"type": "string", "enum": ["error", "warning"]},
    },
    "required": ["message"],
    "additionalProperties": False,
}

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "passed": {"type": "boolean"},
        "summary": {"type": "string"},
        "findings": {"type": "array", "items": _REVIEW_FINDING},
    },
    "required": ["score", "passed", "findings"],
    "additionalProperties": False,
}
"""What a reviewer model replies: a score in [0, 1], pass or fail, and located findings."""


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "number": (int, float),
    "integer": (int,),
}


def _is(value: Any, name: str) -> bool:
    if name in ("number", "integer") and isinstance(value, bool):
        return False  # JSON has no boolean numbers, Python does
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Every way ``value`` does not fit ``schema``, as ``"$.edits[0].part: ..."`` lines."""
    check = _made(schema)
    return [f"{path}{where}: {what}" for where, what in check(value)] if check else []


_MADE: dict[int, tuple[Mapping[str, Any], Mapping[str, Any], Callable[[Any], Misfits] | None]] = {}
_MADE_LOCK = threading.Lock()


def _made(schema: Mapping[str, Any]) -> Callable[[Any], Misfits] | None:
    """``_checker(schema)``, kept for the next reply while ``schema`` is the same object and
    still equal to a copy taken when it was made (a schema changed in place is made again)."""
    kept = _MADE.get(id(schema))
    if kept is not None and kept[0] is schema and kept[1] == schema:
        return kept[2]
    check = _checker(schema)
    with _MADE_LOCK:
        if len(_MADE) >= 32:  # schemas made on the fly are not kept for ever
            _MADE.clear()
        _MADE[id(schema)] = (schema, copy.deepcopy(schema), check)
    return check


Misfits = list[tuple[str, str]]
"""``validate``'s lines as ``(path below the value, what)``."""

_CONSTRAINTS = frozenset(
    {"type", "enum", "minimum", "maximum", "minLength", "properties", "required", "items"}
    | {"additionalProperties"}
)


def _checker(schema: Mapping[str, Any]) -> Callable[[Any], Misfits] | None:
    """``schema`` made into a function (``None``: it constrains nothing, every value fits).

    The schema's keys are read once, not at every value (a reply of 100,000 edits read each
    edit's schema 4 times over), and a path is spelt only for a value that does not fit (it was
    spelt for every item, ``$.edits[i]``)."""
    if not _CONSTRAINTS & schema.keys():
        return None
    wanted = schema.get("type")
    names = None if wanted is None else [wanted] if isinstance(wanted, str) else list(wanted)
    plain: tuple[type, ...] | None = None  # the types ``names`` allow, when isinstance decides
    if names is not None and not {"number", "integer"} & set(names):
        plain = tuple(t for n in names for t in _TYPES.get(n, (object,)))
    enum: Any = schema.get("enum")
    minimum: Any = schema.get("minimum")
    maximum: Any = schema.get("maximum")
    has_enum, has_min, has_max = "enum" in schema, "minimum" in schema, "maximum" in schema
    min_length = int(schema.get("minLength", 0))
    props: Mapping[str, Any] = schema.get("properties", {})
    below = {key: _checker(sub) for key, sub in props.items()}
    required = tuple(schema.get("required", ()))
    closed = schema.get("additionalProperties") is False
    has_items = "items" in schema
    items = _checker(schema["items"]) if has_items else None

    def check(value: Any) -> Misfits:
        if names is not None and not (
            isinstance(value, plain) if plain is not None else any(_is(value, n) for n in names)
        ):
            return [("", f"expected {' or '.join(names)}, got {_json_type(value)}")]
        errors: Misfits = []
        if has_enum and value not in enum:
            errors.append(("", f"must be one of {list(enum)}, got {value!r}"))
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value) and names is not None:
                # JSON's NaN passes every comparison below (all false): a typed number is finite
                return [("", f"must be a finite number, got {value}")]
            if has_min and value < minimum:
                errors.append(("", f"must be ≥ {minimum}, got {value}"))
            if has_max and value > maximum:
                errors.append(("", f"must be ≤ {maximum}, got {value}"))
        if isinstance(value, str):
            if min_length and len(value.strip()) < min_length:
                errors.append(("", "must not be empty"))
        elif isinstance(value, dict):
            for key in required:
                if key not in value:
                    errors.append(("", f"missing required key {key!r}"))
            for key, item in value.items():
                if key in below:
                    sub = below[key]
                    got = sub(item) if sub is not None else None
                    if got:
                        errors.extend((f".{key}{where}", what) for where, what in got)
                elif closed:
                    errors.append(("", f"unexpected key {key!r} (expected {sorted(props)})"))
        elif isinstance(value, list) and items is not None:
            for i, item in enumerate(value):
                got = items(item)
                if got:
                    errors.extend((f"[{i}]{where}", what) for where, what in got)
        return errors

    return check


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is(value, name) and not (name == "integer" and isinstance(value, float)):
            return name
    return type(value).__name__


MAX_DEPTH = 200
"""The deepest nesting of arrays and objects a reply may have (its edit values included)."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # JSON's escape of a surrogate, paired or not


def _candidates(text: str) -> list[str]:
    """Readings of a reply to try in turn: as is; without a reasoning model's ``<think>``
    block; the first fenced code block; the span from the first ``{`` to the last ``}``."""
    out = [text]
    stripped = _THINK.sub("", text).strip()
    out.append(stripped)
    fenced = _FENCE.search(stripped)
    if fenced:
        out.append(fenced.group(1).strip())
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        out.append(stripped[start : end + 1])
    return out


def parse_reply(text: str | None, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The reply's JSON object, checked against ``schema``; ``MalformedReplyError`` otherwise.

    Lenient about the wrapping (a code fence, a ``<think>`` block, prose around one object),
    strict about the object itself.
    """
    if text is None or not text.strip():
        raise MalformedReplyError("the reply is empty", text or "")
    parsed: list[Any] = []
    too_deep = False
    for candidate in _candidates(text):
        try:
            parsed.append(json.loads(candidate))
        except ValueError:
            continue
        except RecursionError:  # nested past the interpreter's stack: not a usable reply
            too_deep = True
            continue
        if isinstance(parsed[-1], dict):
            break
    if not parsed:
        why = f"nested deeper than {MAX_DEPTH} levels" if too_deep else "not JSON"
        raise MalformedReplyError(f"the reply is {why}", text)
    data = parsed[-1] if isinstance(parsed[-1], dict) else parsed[0]
    if deeper_than(data, MAX_DEPTH):
        # the engine stores and hashes the values: a reply nested past it is refused here
        raise MalformedReplyError(f"the reply is nested deeper than {MAX_DEPTH} levels", text)
    errors = validate(data, schema)
    if errors:
        shown = "; ".join(errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")
        raise MalformedReplyError(f"the reply does not fit the schema: {shown}", text)
    # (walked only when the text could hold one: a surrogate escape, or a character not text)
    maybe = _SURROGATE.search(text) or not (text.isascii() or is_text(text))
    bad = lone_surrogate(data) if maybe else None
    if bad is not None:
        # JSON's \ud800 escape read alone: not text. Kept, it would reach the next prompt
        # (a reviewer's finding does) and fail that request as it is encoded, a permanent error
        raise MalformedReplyError(
            f"the reply holds a lone surrogate ({bad}), which is not text: write the character "
            "itself or leave it out",
            text,
        )
    return dict(data)
