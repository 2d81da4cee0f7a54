"""The broker's guarded serving (head size, header count, head deadline) leaves an upgraded
connection alone: a WebSocket (the desktop relay's) carries frames past every head limit,
for longer than the head deadline, and a plain request on the same server is still refused
when its head is too slow."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from hostpool_operator.broker.serving import HeadLimits, serve
from support.ports import free_port


async def echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=1024 * 1024)
    await ws.prepare(request)
    async for message in ws:
        if message.type is aiohttp.WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


async def scenario() -> tuple[int, int, bytes]:
    app = web.Application()
    app.add_routes([web.get("/ws", echo)])
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    limits = HeadLimits(max_bytes=4096, max_headers=10, timeout=0.5)
    refusals: list[tuple[int, str]] = []
    server = await serve(
        runner,
        "127.0.0.1",
        port,
        tls=None,
        limits=limits,
        on_refusal=lambda s, r: refusals.append((s, r)),
    )
    echoed = 0
    try:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                chunk = b"\r\n\r\n" * 2048  # 8 KiB of what a head counter would take for lines
                for _ in range(40):  # 320 KiB over about 2 s: every head limit four times over
                    await ws.send_bytes(chunk)
                    message = await ws.receive(timeout=5)
                    assert message.type is aiohttp.WSMsgType.BINARY, message
                    echoed += len(message.data)
                    await asyncio.sleep(0.05)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /ws HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
    finally:
        server.close()
        await runner.cleanup()
    return echoed, len(refusals), answer


def test_a_websocket_is_no_request_head() -> None:
    echoed, refused, slow = asyncio.run(scenario())
    assert echoed == 40 * 8192
    assert refused == 1
    assert slow.startswith(b"HTTP/1.1 408 HeaderTimeout")
