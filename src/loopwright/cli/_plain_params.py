"""Plain conversion of the CLI's option values, without importing pydantic.

Typer 0.2x converts every option value through a pydantic ``TypeAdapter``, built on first use:
any command given (or defaulting) a non-flag option imports pydantic, about as long as the rest
of ``loopwright runs`` together. Our options are plain ``str``, ``int``, ``float`` and ``Path``
values (and lists of them) without constraints, which need none of that: ``lighten`` gives such
parameters a converter that does what click did. Anything else, and any Typer without that
layer, is left as it is.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["lighten"]

_KINDS: dict[Any, str] = {
    str: "text",
    int: "integer",
    float: "number",
    Path: "path",
    bool: "boolean",  # flags (--json, --help) come as bools; an env value or default may not
}
_BOOLS = {"1": True, "true": True, "t": True, "yes": True, "y": True, "on": True}
_BOOLS |= {"0": False, "false": False, "f": False, "no": False, "n": False, "off": False}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return _BOOLS[str(value).strip().lower()]


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):  # "nan" and "inf" parse, but are no amount, share or interval
        raise ValueError(value)
    return number


def lighten(command: Any) -> None:
    """Give each plain parameter of ``command`` and its subcommands a pydantic-free converter."""
    try:
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
    except ImportError:  # a Typer without the pydantic layer: nothing to do
        return

    class Plain(RuntimeParam):  # a frozen dataclass: no fields added, no decorator needed
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            kind, many = _plain(self.annotation) or (str, False)
            convert: Any = _bool if kind is bool else _finite if kind is float else kind
            try:
                values = [convert(v) for v in value] if many else [convert(value)]
            except (TypeError, ValueError, KeyError):
                raise BadParameter(
                    f"{value!r} is not a valid {_KINDS[kind]}", ctx=ctx, param=param
                ) from None
            for v in values if kind is Path else ():
                if os.path.exists(v) and not os.access(v, os.R_OK):  # as Typer checks
                    raise BadParameter(f"{str(v)!r} is not readable", ctx=ctx, param=param)
            return values if many else values[0]

    stack = [command]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        for param in [*cmd.params, _help_option(cmd)]:
            desc = getattr(param, "type_descriptor", None) if param is not None else None
            if (
                desc is None
                or getattr(param, "_runtime_param", False) is not None
                or _plain(desc.annotation) is None
                or not _unconstrained(desc.parameter_info)
            ):
                continue
            param._runtime_param = Plain(
                parameter_info=desc.parameter_info, annotation=desc.annotation
            )


def _help_option(cmd: Any) -> Any:
    """The command's ``--help`` option, made now (click makes it on first use, then keeps it)."""
    names = (getattr(cmd, "context_settings", None) or {}).get("help_option_names", ["--help"])
    try:
        return cmd.get_help_option(SimpleNamespace(help_option_names=names))
    except (AttributeError, TypeError):
        return None


def _plain(annotation: Any) -> tuple[Any, bool] | None:
    """(the element type, whether a list) for the annotations converted here, else None."""
    if annotation in _KINDS:
        return annotation, False
    if getattr(annotation, "__origin__", None) is list:
        (item,) = annotation.__args__
        if item in _KINDS:
            return item, True
    return None


def _unconstrained(info: Any) -> bool:
    unset = ("parser", "min", "max", "formats", "path_type")
    off = ("exists", "resolve_path", "allow_dash", "writable")
    on = ("file_okay", "dir_okay")
    return (
        all(getattr(info, a, None) is None for a in unset)
        and not any(getattr(info, a, False) for a in off)
        and all(getattr(info, a, True) for a in on)
    )
