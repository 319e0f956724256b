"""One ExaBGP process for one peer: started, spoken to, and stopped. No decisions here.

The speaker listens on a Unix socket in a private directory (mode 0700), writes the rendered
configuration next to it and starts `exabgp server <conf>`; ExaBGP starts the bridge
(`bridge.py`), which connects back and hands over the two pipe ends ExaBGP gave it. From then on
the speaker writes API commands into ExaBGP's pipe and reads ExaBGP's lines (acks, session
states, sent UPDATEs) from the other, exactly as if it were the helper process itself.

Commands are strictly serial: ExaBGP acknowledges a parse error at once but a valid announcement
only after its asynchronous handler ran, so with several commands in flight the acks can come
back out of order and could not be matched to their commands. One at a time costs ~1 ms each
(measured), and batching many prefixes per command keeps the number of commands small.

ExaBGP runs in its own session (terminal signals meant for the speaker do not reach it) and
with PR_SET_PDEATHSIG, so that it dies with the speaker instead of keeping routes alive for a
speaker that no longer exists; `exabgp.api.terminate=true` does the same if the bridge dies.
Once ExaBGP has exited, what it left behind (its bridge, reparented to the speaker, which is PID 1
of its container) is reaped, or killed and reaped (`orphans`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speaker.bgp import bridge, events, orphans, peers, rendering

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
# Resolved here, at import: the forked child (`_die_with_parent`) then only calls it. Loading the
# library there (dlopen, dlsym) could hang on a loader lock another thread of the speaker held at
# the fork, since only the forking thread exists in the child.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


class ExaBGPError(Exception):
    """ExaBGP could not be started, or stopped answering."""


def _default_exabgp() -> str:
    beside = Path(sys.executable).parent / "exabgp"
    if beside.exists():
        return str(beside)
    return shutil.which("exabgp") or "exabgp"


@dataclass(frozen=True, slots=True)
class Options:
    node_name: str
    exabgp: str = field(default_factory=_default_exabgp)
    python: str = sys.executable
    workdir: Path | None = None  # where each process gets its own fresh directory
    start_timeout: float = 15.0
    command_timeout: float = 30.0
    # ExaBGP's own log goes to its stdout, which we relay to our logger at debug level.
    log_level: str = "INFO"


def environment(options: Options) -> dict[str, str]:
    """ExaBGP settings (see docs/bgp.md for why each one is needed)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("exabgp")}
    env.update(
        {
            "exabgp.daemon.user": "root",
            "exabgp.daemon.drop": "false",
            "exabgp.daemon.daemonize": "false",
            "exabgp.api.cli": "false",
            "exabgp.api.ack": "true",
            "exabgp.api.terminate": "true",
            "exabgp.api.respawn": "false",
            "exabgp.log.destination": "stdout",
            "exabgp.log.level": options.log_level,
            "exabgp.log.statistics": "false",
            # Never listen: sessions are outgoing only, like MetalLB's, and several ExaBGP
            # processes on one node must not fight over port 179.
            "exabgp.tcp.bind": "",
        }
    )
    return env


async def _receive_pipes(
    loop: asyncio.AbstractEventLoop, listener: socket.socket
) -> tuple[int, int]:
    """Accept the bridge and take the (read, write) pipe ends it passes with SCM_RIGHTS."""
    conn, _ = await loop.sock_accept(listener)
    try:
        received: asyncio.Future[list[int]] = loop.create_future()

        def readable() -> None:
            try:
                _data, fds, _flags, _addr = socket.recv_fds(conn, 64, 2)
            except BlockingIOError:
                return
            except OSError as e:
                received.set_exception(e)
            else:
                received.set_result(fds)
            loop.remove_reader(conn.fileno())

        conn.setblocking(False)
        loop.add_reader(conn.fileno(), readable)
        try:
            fds = await received
        finally:
            loop.remove_reader(conn.fileno())
    finally:
        conn.close()
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        raise ExaBGPError(f"the bridge passed {len(fds)} descriptors instead of 2")
    return fds[0], fds[1]


def _die_with_parent() -> None:
    """Run in the forked child, before the exec, while the speaker has other threads: nothing but
    the one system call (see `_prctl`)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _kill_unless_exited(pid: int) -> None:
    """SIGKILL our child `pid` unless it has exited, without taking its exit status.

    Its status belongs to asyncio's child watcher, which `Process.exited` waits for. asyncio's own
    `kill()` would not do: subprocess's `send_signal()` first polls with `waitpid`, and if the
    child has just exited, that reaps it, and the watcher then finds nothing and reports 255.
    `waitid` with WNOWAIT only looks: a child that has exited is left to the watcher, unsignalled,
    and a child already reaped (whose pid may belong to another process by now) is not signalled.
    """
    try:
        exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return  # reaped already; the watcher is about to say so
    if exited is None:
        # A watcher reaping in a thread of its own (Python 3.11's) may have reaped it since.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Process:
    """ExaBGP serving `peer`. `on_event` gets every non-ack line ExaBGP sends."""

    def __init__(
        self,
        peer: peers.Peer,
        options: Options,
        on_event: Callable[[events.Event], None],
    ) -> None:
        self.peer = peer
        self.options = options
        self._on_event = on_event
        self._dir: Path | None = None
        self._own_dir = False
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._acks: asyncio.Queue[bool] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self.recent_output: deque[str] = deque(maxlen=40)
        self.exited: asyncio.Event = asyncio.Event()
        self.returncode: int | None = None
        self._orphans_collected = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self.exited.is_set()

    async def start(self) -> None:
        base = self.options.workdir
        if base is not None:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdtemp makes the directory 0700: only root reaches the socket and the password.
        self._dir = Path(tempfile.mkdtemp(prefix="ironlb-bgp-", dir=base))
        self._own_dir = True
        sock_path = self._dir / "api.sock"
        conf_path = self._dir / "exabgp.conf"
        with contextlib.suppress(FileNotFoundError):
            sock_path.unlink()
        helper = (self.options.python, "-I", bridge.__file__, str(sock_path))
        conf_path.write_text(rendering.config(self.peer, helper, self.options.node_name))
        loop = asyncio.get_running_loop()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(sock_path))
            listener.listen(1)
            listener.setblocking(False)
            if shutil.which(self.options.exabgp) is None:
                # Retried by the session's runner with backoff, like any failed start.
                raise ExaBGPError(
                    f"ExaBGP executable {self.options.exabgp!r} not found or not executable"
                )
            self._proc = await asyncio.create_subprocess_exec(
                self.options.exabgp,
                "server",
                str(conf_path),
                env=environment(self.options),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
            self._tasks.append(asyncio.create_task(self._relay_output()))
            self._tasks.append(asyncio.create_task(self._wait_exit()))
            handed = asyncio.ensure_future(_receive_pipes(loop, listener))
            exit_wait = asyncio.ensure_future(self.exited.wait())
            waiters: list[asyncio.Future[Any]] = [handed, exit_wait]
            await asyncio.wait(
                waiters, timeout=self.options.start_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            exit_wait.cancel()
            if not handed.done() or handed.exception() is not None:
                handed.cancel()
                with contextlib.suppress(BaseException):
                    await handed
                await self.kill()
                tail = " | ".join(self.recent_output)
                raise ExaBGPError(f"ExaBGP for {self.peer.name} did not start: {tail}")
            from_exabgp, to_exabgp = handed.result()
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                sock_path.unlink()
        reader = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(from_exabgp, "rb", 0)
        )
        self._reader = reader
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(to_exabgp, "wb", 0)
        )
        self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
        self._tasks.append(asyncio.create_task(self._read_api()))

    async def _relay_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for raw in self._proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.recent_output.append(line)
                log.debug("exabgp[%s] %s", self.peer.name, line)

    async def _wait_exit(self) -> None:
        assert self._proc is not None
        self.returncode = await self._proc.wait()
        self.exited.set()
        self._acks.put_nowait(False)  # wake a command waiting for an ack that will never come

    async def _read_api(self) -> None:
        assert self._reader is not None
        while True:
            raw = await self._reader.readline()
            if not raw:
                break
            event = events.parse(raw.decode(errors="replace"))
            if isinstance(event, events.Ack):
                self._acks.put_nowait(event.ok)
            else:
                self._on_event(event)
        # The bridge is gone; ExaBGP exits by itself (api.terminate), make sure of it.
        if self.alive:
            await self.kill()

    async def command(self, text: str) -> bool:
        """Send one API command and wait for its ack: True = done, False = error."""
        async with self._lock:
            if not self.alive or self._writer is None:
                raise ExaBGPError("ExaBGP is not running")
            while not self._acks.empty():
                self._acks.get_nowait()  # stale wake-ups
            self._writer.write(text.encode() + b"\n")
            await self._writer.drain()
            try:
                ok = await asyncio.wait_for(self._acks.get(), self.options.command_timeout)
            except TimeoutError:
                await self.kill()
                raise ExaBGPError(f"ExaBGP did not acknowledge {text[:60]!r}") from None
            if not self.alive:
                raise ExaBGPError("ExaBGP exited")
            if not ok:
                log.warning("exabgp[%s] refused command %r", self.peer.name, text[:200])
            return ok

    async def stop(self, timeout: float = 5.0) -> None:
        """Ask ExaBGP to shut down; kill it if it does not within `timeout`."""
        if self.alive:
            with contextlib.suppress(ExaBGPError, ConnectionError, TimeoutError):
                async with asyncio.timeout(timeout / 2):
                    await self.command("shutdown")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), timeout / 2)
        await self.kill()

    async def kill(self) -> None:
        if self._proc is not None and not self.exited.is_set():
            _kill_unless_exited(self._proc.pid)
            await self.exited.wait()
        await self._cleanup()

    async def _cleanup(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
            self._writer = None
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current and not task.done():
                task.cancel()
        for task in self._tasks:
            if task is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._tasks = [t for t in self._tasks if t is current]
        if self._proc is not None and self.exited.is_set() and not self._orphans_collected:
            self._orphans_collected = True
            # ExaBGP leads its own session (start_new_session), and its bridge is in it.
            await orphans.collect(self._proc.pid)
        if self._own_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._own_dir = False
