"""The HTTP loop of an engine's own program: the part of llama.cpp's server interface refspec uses.

Standard library only, so that a program run by another interpreter (an engine's own environment,
``python -I program.py``) can load it from this folder. :func:`serve` answers, one request at a time
on ``127.0.0.1:port``:

* ``GET /health`` (``{"status": "ok"}``) and ``GET /props`` (``engine.props()``);
* ``POST /tokenize``, ``/detokenize`` and ``/completion``: ``engine.tokenize(body)`` ... as JSON.

A body that is not JSON is answered 400, an unknown path 404, the engine's own error 500 with its
type and message (whole, for the refusal the driver records).
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def serve(engine, port: int) -> int:
    """Serve ``engine`` until interrupted; first prints one JSON line (the port and its props)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the process log records requests one line each
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {fmt % args}\n")

        def reply(self, status: int, doc: dict) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            if self.path == "/health":
                return self.reply(200, {"status": "ok"})
            if self.path == "/props":
                return self.reply(200, engine.props())
            return self.reply(404, {"error": f"no {self.path}"})

        def do_POST(self):
            routes = {"/tokenize": engine.tokenize, "/detokenize": engine.detokenize, "/completion": engine.completion}
            fn = routes.get(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except ValueError as e:
                return self.reply(400, {"error": f"body is not JSON: {e}"})
            if fn is None:
                return self.reply(404, {"error": f"no {self.path}"})
            try:
                return self.reply(200, fn(body))
            except Exception as e:  # the engine's own error, whole, for the refusal
                return self.reply(500, {"error": f"{type(e).__name__}: {e}"})

    httpd = HTTPServer(("127.0.0.1", int(port)), Handler)
    print(json.dumps({"listening": port, **engine.props()}), flush=True)  # contract: its own program's log
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
