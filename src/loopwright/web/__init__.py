"""The dashboard and HTTP API (extra ``loopwright[ui]``): ``create_app(store_url, token=...)``.

Server-rendered pages (Jinja2, autoescaped) and a JSON API under ``/api`` over the same store
the CLI uses; ``verify_webhook(secret, body, timestamp, signature)`` checks a notification's
signature on the receiving side (``docs/ui.md``). Reads are open on loopback unless ``require_token_for_reads``; every mutating
request needs the token (``Authorization: Bearer`` or a session cookie from ``/login``) and form
posts also need the session's CSRF token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["create_app", "sign_webhook", "verify_webhook"]

if TYPE_CHECKING:
    from ._app import create_app
    from ._notify import sign as sign_webhook
    from ._notify import verify as verify_webhook


def __getattr__(name: str) -> Any:
    # The webhook signature helpers are stdlib only: a receiver needs no ui extra.
    if name in ("sign_webhook", "verify_webhook"):
        from . import _notify

        return _notify.sign if name == "sign_webhook" else _notify.verify
    if name == "create_app":
        try:
            from ._app import create_app
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"the dashboard needs its extra: pip install 'loopwright[ui]' ({exc})"
            ) from exc
        return create_app
    raise AttributeError(name)
