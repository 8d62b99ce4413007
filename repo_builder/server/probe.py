"""HTTP probes of a tritonserver endpoint (stdlib ``http.client`` only: the launcher polls without tritonclient).

Endpoints: KServe v2 ``GET /v2/health/ready`` and Triton's ``POST /v2/repository/index`` (model states);
tritonserver 2.51 answers both on rank 0's HTTP port.
"""

from __future__ import annotations

import http.client
import json


def connect_host(address: str) -> str:
    """The host to connect to for a bind ``address`` (a wildcard bind is reached on loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address, address)


def http_request(host: str, port: int, method: str, path: str, timeout_s: float = 2.0) -> tuple[int, bytes] | None:
    """One HTTP request to a Triton endpoint (POST sends ``{}``): ``(status, body)``, or None if nobody answers."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request(
            method,
            path,
            body=b"{}" if method == "POST" else None,
            headers={"Content-Type": "application/json"} if method == "POST" else {},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_ready(host: str, port: int) -> bool:
    """True when ``GET /v2/health/ready`` answers 200."""
    got = http_request(host, port, "GET", "/v2/health/ready")
    return got is not None and got[0] == 200


def model_states(host: str, port: int) -> dict[str, tuple[str, str]] | None:
    """``{model: (state, reason)}`` from ``POST /v2/repository/index``; ``None`` if it does not answer 200."""
    got = http_request(host, port, "POST", "/v2/repository/index")
    if got is None or got[0] != 200:
        return None
    states: dict[str, tuple[str, str]] = {}
    for entry in json.loads(got[1] or b"[]"):
        states[entry.get("name", "")] = (entry.get("state", ""), entry.get("reason", ""))
    return states
