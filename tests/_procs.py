"""Process helpers shared by the engine-server tests (fake servers, pid checks).

Linux: a process counts as running while ``/proc/<pid>/stat`` exists and its state
is not ``Z`` (a zombie left for an init that does not reap counts as gone).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Poll until none of ``pids`` is running or ``timeout_s`` passed; those still running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(running(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def python_script(path: Path, source: str) -> Path:
    """Write ``source`` as an executable script run by this interpreter; returns ``path``."""
    path.write_text(f"#!{sys.executable}\n{source}")
    path.chmod(0o755)
    return path


FAKE_HTTP_SERVE = """
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = get(self.path)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""
"""The serving end of a fake engine server script: the script before it imports
``http.server``, sets ``port`` and defines ``get(path) -> (status, body bytes)``."""
