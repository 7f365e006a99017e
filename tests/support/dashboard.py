"""The dashboard (``loopwright.web``) served to a test client over a store, with a server
token: its client, a rerun asked through its API, and its run list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

TOKEN = "server-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def dashboard(url: str) -> TestClient:
    """A client of the dashboard over the store at ``url`` (its token: ``TOKEN``)."""
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    return TestClient(create_app(url, token=TOKEN), base_url="http://127.0.0.1")


def rerun(c: TestClient, run_id: str, **body: Any) -> dict[str, Any]:
    """The API's rerun of ``run_id`` (``body``: its fields), accepted: its response."""
    got = c.post(f"/api/runs/{run_id}/rerun", json=body, headers=AUTH)
    assert got.status_code == 200, got.text
    answer: dict[str, Any] = got.json()
    return answer


def listed_runs(c: TestClient) -> list[dict[str, Any]]:
    """The runs ``/api/runs`` lists (a page of them, or the list itself)."""
    listed = c.get("/api/runs", headers=AUTH).json()
    rows: list[dict[str, Any]] = listed["runs"] if isinstance(listed, dict) else listed
    return rows
