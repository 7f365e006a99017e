"""``write_json`` writes what ``json.dumps(doc, indent=2, default=str)`` writes, byte for
byte, whichever containers are written member by member (``Open``) or item by item (``Lazy``)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.cli._json_stream import Lazy, Open, write_json

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_docs = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def _wrapped(doc: Any, choice: st.DataObject) -> Any:
    """``doc`` with some of its containers streamed."""
    if isinstance(doc, dict):
        inner = {k: _wrapped(v, choice) for k, v in doc.items()}
        streamed = any(isinstance(v, (Open, Lazy)) for v in inner.values())
        return Open(inner) if streamed or choice.draw(st.booleans()) else inner
    if isinstance(doc, list):
        items = [_wrapped(v, choice) for v in doc]
        streamed = any(isinstance(v, (Open, Lazy)) for v in items)
        how = choice.draw(
            st.sampled_from(["open", "lazy"] if streamed else ["plain", "open", "lazy"])
        )
        if how == "open":
            return Open(items)
        if how == "lazy":
            return Lazy(iter(items))  # an iterator: read once, as a store's pages are
        return items
    return doc


def _plain(doc: Any) -> Any:
    if isinstance(doc, (Open, Lazy)):
        return _plain(doc.value if isinstance(doc, Open) else list(doc.items))
    if isinstance(doc, dict):
        return {k: _plain(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_plain(v) for v in doc]
    return doc


@given(_docs, st.data())
def test_streamed_text_is_json_dumps_text(doc: Any, choice: st.DataObject) -> None:
    wrapped = Open(doc) if isinstance(doc, (dict, list)) else doc
    wrapped = _wrapped(doc, choice) if isinstance(doc, (dict, list)) else wrapped
    out: list[str] = []
    write_json(wrapped, out.append)
    assert "".join(out) == json.dumps(doc, indent=2, default=str)


def test_lazy_items_are_read_while_written() -> None:
    """Each item is written before the next one is read: nothing holds the whole list."""
    out: list[str] = []

    def items() -> Any:
        for i in range(3):
            # everything before this item is written already
            assert "".join(out).count('"n"') == i
            yield {"n": i}

    write_json(Open({"all": Lazy(items()), "at": dt.date(2026, 12, 3)}), out.append)
    text = "".join(out)
    assert json.loads(text) == {"all": [{"n": 0}, {"n": 1}, {"n": 2}], "at": "2026-12-03"}
    assert text == json.dumps(
        {"all": [{"n": 0}, {"n": 1}, {"n": 2}], "at": dt.date(2026, 12, 3)}, indent=2, default=str
    )


def test_a_stream_inside_a_plain_container_is_refused_not_written_as_its_repr() -> None:
    with pytest.raises(TypeError, match="make it Open"):
        write_json(Open({"parts": [{"versions": Lazy(iter(()))}]}), [].append)


def test_empty_streamed_containers_are_written_as_json_dumps_writes_them() -> None:
    out: list[str] = []
    write_json(Open({"a": Lazy(iter(())), "b": Open({}), "c": Open([])}), out.append)
    assert "".join(out) == json.dumps({"a": [], "b": {}, "c": []}, indent=2)


class _Count(int):
    pass


class _Ratio(float):
    pass


_edge_scalars = (
    _scalars
    | st.floats()  # NaN and the infinities: json writes NaN, Infinity, -Infinity
    | st.integers().map(_Count)
    | st.floats().map(_Ratio)
    | st.datetimes()  # default=str
)
_edge_keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
_edge_docs = st.recursive(
    _edge_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_edge_keys, inner, max_size=4)
    ),
    max_leaves=30,
)


@given(_edge_docs, st.integers(0, 3))
def test_a_plain_value_is_written_as_json_dumps_indents_it(doc: Any, level: int) -> None:
    # the writer's own indenting encoder (json's is its pure-Python one): every scalar, key
    # and container json.dumps(indent=2, default=str) takes, at any depth of the document
    got: list[str] = []
    write_json(Open([Open([doc])] if level else [doc]), got.append)
    want = json.dumps([[doc]] if level else [doc], indent=2, default=str)
    assert "".join(got) == want


def test_a_key_json_refuses_is_refused_alike() -> None:
    with pytest.raises(TypeError, match="keys must be str, int, float, bool or None, not tuple"):
        write_json({(1, 2): 3}, [].append)
