"""Waiting for and stopping a ``passkt serve`` subprocess, shared by the tests that start one."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for 127.0.0.1


def wait_until_healthy(
    server: subprocess.Popen, url_of: Callable[[], str | None], log: Path, seconds: float = 120
) -> str:
    """The server's URL once ``url_of()`` knows it and its ``/health`` answers 200; an
    ``AssertionError`` with the server's log if it exits or does not answer in ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"passkt serve exited: {log.read_text()[-2000:]}")
        url = url_of()
        if url is not None:
            try:
                with _DIRECT.open(f"{url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.1)
    stop(server)
    raise AssertionError(
        f"passkt serve did not answer /health in {seconds:g} s: {log.read_text()[-2000:]}"
    )


def stop(server: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
