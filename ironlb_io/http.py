"""A small HTTP/1.1 client over asyncio streams: what `ironlb_io.kube` needs of one, no more.

Requests on a bounded pool of kept-alive connections to one server; bodies by Content-Length,
chunked, or to the end of the connection; a response read whole, up to a limit, or line by line
as it arrives (a watch). No compression, redirects, cookies, proxies or HTTP/2: the Kubernetes
API needs none of them.

Why not aiohttp: this client was the speaker's only use of it, and importing aiohttp cost every
speaker 14 MB of resident memory (measured: an interpreter with asyncio and ssl, 20.6 MB; with
aiohttp as well, 34.7 MB). The controller still serves its webhook and metrics with aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

READ_LIMIT = 2**20  # the longest header block or line a stream buffers
MAX_HEADER_BYTES = 2**20

SocketFactory = Callable[[tuple[object, ...]], socket.socket]


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.1 as this client reads it, or it ended too early."""


# What a request may fail with when no (whole) answer came: a caller's "unavailable".
FAILURES = (TimeoutError, OSError, asyncio.LimitOverrunError)


@dataclass(frozen=True)
class Server:
    scheme: str
    host: str
    port: int
    prefix: str  # a path the server's URL carries before every request's own

    @classmethod
    def parse(cls, url: str) -> Server:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(eq=False)  # kept in a set by identity
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


@dataclass
class Response:
    """A response's status and headers (names lower-cased); its body is read once, by `read`,
    `read_at_most` or `lines`."""

    status: int
    headers: Mapping[str, str]
    _connection: _Connection
    _chunked: bool
    _length: int | None  # None with neither Content-Length nor chunked: to the end
    _read_timeout: float | None
    _left: int = 0  # of the current chunk, or of a Content-Length body
    _done: bool = False
    _reusable: bool = False
    _started: bool = field(default=False, repr=False)

    async def _piece(self, most: int) -> bytes:
        """The next bytes of the body (at most `most`); b"" at its end."""
        if self._done:
            return b""
        reader = self._connection.reader
        if not self._started:
            self._started = True
            if self._length is not None:
                self._left = self._length
        if self._chunked:
            if self._left == 0:
                size_line = await self._timed(reader.readline())
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
                if size == 0:
                    while (await self._timed(reader.readline())).strip():
                        pass  # trailer fields: none is read
                    self._finish(reusable=True)
                    return b""
                self._left = size
            data = await self._timed(reader.read(min(most, self._left)))
            if not data:
                raise ProtocolError("the connection ended inside a chunk")
            self._left -= len(data)
            if self._left == 0 and await self._timed(reader.readexactly(2)) != b"\r\n":
                raise ProtocolError("a chunk does not end with CRLF")
            return data
        if self._length is not None:
            if self._left == 0:
                self._finish(reusable=True)
                return b""
            data = await self._timed(reader.read(min(most, self._left)))
            if not data:
                raise ProtocolError("the connection ended before Content-Length bytes")
            self._left -= len(data)
            if self._left == 0:
                self._finish(reusable=True)
            return data
        data = await self._timed(reader.read(most))
        if not data:
            self._finish(reusable=False)
        return data

    async def _timed(self, step: Awaitable[bytes]) -> bytes:
        try:
            return await _wait(step, self._read_timeout)
        except asyncio.IncompleteReadError as e:
            raise ProtocolError(f"the connection ended inside the body: {e!r}") from e

    def _finish(self, reusable: bool) -> None:
        self._done, self._reusable = True, reusable

    async def read(self) -> bytes:
        parts = []
        while piece := await self._piece(READ_LIMIT):
            parts.append(piece)
        return b"".join(parts)

    async def read_at_most(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body; the rest is not read (the connection is closed)."""
        parts, size = [], 0
        while size < limit and (piece := await self._piece(limit - size)):
            parts.append(piece)
            size += len(piece)
        return b"".join(parts)

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines as they arrive (with their newline; the last without one)."""
        pending = b""
        while piece := await self._piece(READ_LIMIT):
            pending += piece
            while (end := pending.find(b"\n")) >= 0:
                yield pending[: end + 1]
                pending = pending[end + 1 :]
            if len(pending) > READ_LIMIT * 64:
                raise ProtocolError("a line longer than 64 MiB")
        if pending:
            yield pending


class Pool:
    """At most `limit` connections to one server, kept alive between requests."""

    def __init__(
        self,
        url: str,
        context: ssl.SSLContext | None,
        *,
        limit: int,
        connect_timeout: float,
        socket_factory: SocketFactory | None = None,
    ) -> None:
        self.server = Server.parse(url)
        self._context = context if self.server.scheme == "https" else None
        self._connect_timeout = connect_timeout
        self._socket_factory = socket_factory
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def close(self) -> None:
        for connection in list(self._open):
            connection.close()
        for connection in list(self._open):
            with contextlib.suppress(Exception):
                await connection.writer.wait_closed()
        self._open.clear()
        self._idle.clear()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            infos = await loop.getaddrinfo(
                self.server.host, self.server.port, type=socket.SOCK_STREAM
            )
            failure: OSError | None = None
            for info in infos:
                sock = (
                    self._socket_factory(info)
                    if self._socket_factory is not None
                    else socket.socket(info[0], info[1], info[2])
                )
                try:
                    sock.setblocking(False)
                    await loop.sock_connect(sock, info[4])
                except OSError as e:
                    sock.close()
                    failure = e
                    continue
                reader, writer = await asyncio.open_connection(
                    sock=sock,
                    ssl=self._context,
                    server_hostname=self.server.host if self._context is not None else None,
                    limit=READ_LIMIT,
                )
                connection = _Connection(reader, writer)
                self._open.add(connection)
                return connection
            raise failure or OSError(f"no address for {self.server.host}")

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[Response]:
        """One request; the response's body must be read inside the block. `read_timeout`:
        the longest wait for any piece of the answer (None: no limit but the caller's)."""
        target = self.server.prefix + path
        if params:
            target += ("&" if "?" in target else "?") + urlencode(params)
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.server.authority}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}")
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        async with self._slots:
            response, connection = await self._send(message, method, read_timeout)
            try:
                yield response
            finally:
                if response._done and response._reusable and not _closes(response.headers):
                    self._idle.append(connection)
                else:
                    self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    async def _send(
        self, message: bytes, method: str, read_timeout: float | None
    ) -> tuple[Response, _Connection]:
        """Writes the request on an idle connection (once more on a new one if the server had
        closed that one meanwhile, which shows as an answer that never starts) or a new one."""
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect()
            try:
                connection.writer.write(message)
                await connection.writer.drain()
                head = await _wait(connection.reader.readuntil(b"\r\n\r\n"), read_timeout)
                return _response(head, method, connection, read_timeout), connection
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                self._drop(connection)
                if reused and not getattr(e, "partial", b""):
                    continue
                raise ProtocolError(f"the connection ended before an answer: {e!r}") from e
            except BaseException:
                self._drop(connection)
                raise


async def _wait(step: Awaitable[bytes], timeout: float | None) -> bytes:
    if timeout is None:
        return await step
    return await asyncio.wait_for(step, timeout)


def _response(
    head: bytes, method: str, connection: _Connection, read_timeout: float | None
) -> Response:
    if len(head) > MAX_HEADER_BYTES:
        raise ProtocolError("a header block over 1 MiB")
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise ProtocolError(f"bad status {status_line[1][:10]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length: int | None = None
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        length = 0
    elif not chunked and "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise ProtocolError("bad Content-Length") from None
        if length < 0:
            raise ProtocolError("negative Content-Length")
    return Response(status, headers, connection, chunked, length, read_timeout)


def _closes(headers: Mapping[str, str]) -> bool:
    return "close" in headers.get("connection", "").lower()
