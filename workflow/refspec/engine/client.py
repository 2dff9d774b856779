"""The loopback HTTP client: one request, its answer or the error that says why there is none."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from .errors import RequestError, TransportError

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def open_request(req: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    """Send one loopback request; an HTTP error is a RequestError, no complete answer a TransportError."""
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            msg = json.loads(body)["error"]["message"]
        except Exception:
            msg = body.decode("utf-8", "replace")[:500]
        raise RequestError(e.code, msg) from e
    except (urllib.error.URLError, OSError, ConnectionError) as e:  # refused, reset, timeout, remote closed
        reason = getattr(e, "reason", e)
        raise TransportError(f"{type(reason).__name__}: {reason}") from e
    except Exception as e:  # http.client.RemoteDisconnected, IncompleteRead, BadStatusLine
        raise TransportError(f"{type(e).__name__}: {e}") from e


def get_json(url: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> dict:
    """GET ``url`` and parse its JSON answer (an HTTP error: RequestError; anything else: TransportError)."""
    try:
        with _OPENER.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise RequestError(e.code, e.read().decode("utf-8", "replace")[:500]) from e
    except Exception as e:
        raise TransportError(f"{type(e).__name__}: {e}") from e


def send_json(method: str, url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    """``method`` ``url`` with ``body`` as compact JSON (no authorization): the server arms' requests."""
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", "Connection": "close"}
    )
    return open_request(req, timeout)
