"""The dashboard (``loopwright.web``) served to a test client over a store, with a server
token: its client, a rerun asked through its API, its run list, and a run's page as a person
signed in reads it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

TOKEN = "server-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def dashboard(url: str | os.PathLike[str] | None, *, token: str = TOKEN, **app: Any) -> TestClient:
    """A client of the dashboard over the store at ``url``, at a loopback address (its server
    token: ``token``, ``TOKEN`` unless given; ``app``: ``create_app``'s other arguments)."""
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    return TestClient(create_app(url, token=token, **app), base_url="http://127.0.0.1")


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


def run_page(c: TestClient, run_id: str, *, token: str = TOKEN, before: str = "") -> str:
    """The page of ``run_id`` as the person of ``token`` reads it once signed in (the client's
    session from then on); with ``before``, only what comes before its section of that id."""
    c.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    page = c.get(f"/runs/{run_id}").text
    return page.split(f'<h2 id="{before}">')[0] if before else page
