"""A spec's ``[reflector]`` table: the note a loop writes after a failed cycle (docs/memory.md).

```toml
[reflector]
ref = "invoices.py:reflect"           # (ctx, visible verdicts) -> str | None, as Loop(reflector=)
# options = { ... }                   # when given, ref is a factory called with these
# kept = 20                           # a task's active reflections (Loop(reflections_kept=))
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import SpecError

__all__ = ["reflector_of"]

_REFLECTOR = {"ref", "options", "kept"}


def reflector_of(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """The ``Loop`` arguments the spec's ``[reflector]`` gives: none where it has none."""
    if "reflector" not in data:
        return {}
    # (imported here: _spec imports this module; its helpers keep one rule for every ref)
    from ._spec import build_from_ref, vetted

    t = vetted(data["reflector"], "reflector", _REFLECTOR)
    if "ref" not in t:
        raise SpecError("is required: [reflector] ref = 'file.py:function'", field="reflector.ref")
    out: dict[str, Any] = {
        "reflector": build_from_ref(t["ref"], t.get("options"), base, "reflector")
    }
    if "kept" in t:
        kept = t["kept"]
        if isinstance(kept, bool) or not isinstance(kept, int) or kept < 1:
            raise SpecError(f"must be a positive integer, got {kept!r}", field="reflector.kept")
        out["reflections_kept"] = kept
    return out
