"""ironlb_io.http against aiohttp's server (an independent HTTP/1.1 implementation) on loopback:
bodies by length, chunked and to the end; lines across chunks; kept-alive connections, one that
the server closed meanwhile, the pool's bound; a URL with a path prefix."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from ironlb_io import http

LINES = [b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i * 37 % 300)) for i in range(200)]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, int]]]:
    seen = {"connections": 0, "in_flight": 0, "most_in_flight": 0}

    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=b"a" * int(request.query.get("n", "10")))

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        joined = b"".join(LINES)
        step = int(request.query.get("step", "7"))
        for i in range(0, len(joined), step):  # pieces that cut lines anywhere
            await response.write(joined[i : i + step])
        await response.write_eof()
        return response

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {"method": request.method, "body": body.decode(), "query": dict(request.query)},
            status=int(request.query.get("status", "200")),
        )

    async def slow(request: web.Request) -> web.Response:
        seen["in_flight"] += 1
        seen["most_in_flight"] = max(seen["most_in_flight"], seen["in_flight"])
        await asyncio.sleep(0.05)
        seen["in_flight"] -= 1
        return web.Response(text="ok")

    async def closing(request: web.Request) -> web.Response:
        return web.Response(text="bye", headers={"Connection": "close"})

    app = web.Application()
    for path, handler in (
        ("/sized", sized),
        ("/chunked", chunked),
        ("/slow", slow),
        ("/closing", closing),
        ("/prefix/echo", echo),
    ):
        app.router.add_get(path, handler)
    app.router.add_route("*", "/echo", echo)

    runner = web.AppRunner(app, shutdown_timeout=0.1, keepalive_timeout=30)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def pool(url: str, limit: int = 4) -> http.Pool:
    return http.Pool(url, None, limit=limit, connect_timeout=5)


async def test_bodies_by_length_chunked_and_lines_across_chunks(
    server: tuple[str, dict[str, int]],
) -> None:
    url, _ = server
    client = pool(url)
    try:
        async with client.request("GET", "/sized", params={"n": "100000"}) as response:
            assert response.status == 200 and await response.read() == b"a" * 100000
        for step in (1, 7, 4096):
            async with client.request("GET", "/chunked", params={"step": str(step)}) as r:
                assert [line async for line in r.lines()] == LINES
        async with client.request("GET", "/chunked") as response:
            assert await response.read() == b"".join(LINES)
        async with client.request("GET", "/sized", params={"n": "5000"}) as response:
            assert await response.read_at_most(100) == b"a" * 100
        # A body left unread cannot be skipped on a kept-alive connection: it is closed.
        assert len(client._open) == 0 and len(client._idle) == 0
    finally:
        await client.close()


async def test_methods_bodies_queries_and_errors(server: tuple[str, dict[str, int]]) -> None:
    url, _ = server
    client = pool(url)
    try:
        async with client.request(
            "PATCH", "/echo", params={"a": "b c/d"}, body=b'{"x":1}'
        ) as response:
            assert response.headers["content-type"].startswith("application/json")
            answer = await response.read()
        assert b'"method": "PATCH"' in answer and b'"a": "b c/d"' in answer
        assert b'"body": "{\\"x\\":1}"' in answer
        async with client.request("DELETE", "/echo", params={"status": "404"}) as response:
            assert response.status == 404 and b"DELETE" in await response.read()
        async with client.request("POST", "/echo") as response:
            assert b'"body": ""' in await response.read()
    finally:
        await client.close()


async def test_kept_alive_then_a_connection_the_server_closed(
    server: tuple[str, dict[str, int]],
) -> None:
    url, _ = server
    client = pool(url)
    try:
        for _ in range(3):
            async with client.request("GET", "/sized") as response:
                await response.read()
        assert len(client._open) == 1 and len(client._idle) == 1
        # The server closes the idle connection (made to: we half-close it, it closes its
        # side): the next request notices before any answer came and goes on a new one.
        (idle,) = client._idle
        sock = idle.writer.get_extra_info("socket")
        sock.shutdown(socket.SHUT_WR)
        await asyncio.sleep(0.1)
        async with client.request("GET", "/sized", params={"n": "3"}) as response:
            assert await response.read() == b"aaa"
        async with client.request("GET", "/closing") as response:
            assert await response.read() == b"bye"
        assert len(client._idle) == 0  # Connection: close is honoured
    finally:
        await client.close()


async def test_no_more_connections_than_the_limit(server: tuple[str, dict[str, int]]) -> None:
    url, seen = server
    client = pool(url, limit=3)

    async def one() -> None:
        async with client.request("GET", "/slow") as response:
            assert await response.read() == b"ok"

    try:
        await asyncio.gather(*(one() for _ in range(12)))
        assert seen["most_in_flight"] == 3
        assert len(client._open) <= 3
    finally:
        await client.close()


async def test_a_server_url_with_a_path_prefix(server: tuple[str, dict[str, int]]) -> None:
    url, _ = server
    client = pool(url + "/prefix/")
    try:
        async with client.request("GET", "/echo") as response:
            assert response.status == 200
    finally:
        await client.close()


async def test_a_refused_connection_and_a_silent_answer_fail_as_os_errors() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = pool(f"http://127.0.0.1:{port}")
    with pytest.raises(http.FAILURES):
        async with client.request("GET", "/") as response:
            await response.read()
    await client.close()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = quiet.sockets[0].getsockname()[1]
    client = pool(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(http.FAILURES):
            async with client.request("GET", "/", read_timeout=0.2) as response:
                await response.read()
    finally:
        await client.close()
        quiet.close()


def test_server_urls() -> None:
    assert http.Server.parse("https://10.0.0.1:6443").authority == "10.0.0.1:6443"
    assert http.Server.parse("https://[fd00::1]:443/x/").authority == "[fd00::1]"
    assert http.Server.parse("https://[fd00::1]:443/x/").prefix == "/x"
    assert http.Server.parse("http://h").port == 80
    with pytest.raises(ValueError):
        http.Server.parse("ftp://h")
