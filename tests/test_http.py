"""broker.http: the HTTP/1.1 server of the metrics endpoint and the web console, over real
sockets on loopback: keep-alive, query strings, bodies, and the limits a bad client meets."""

import asyncio
import http.client
import json

from broker.http import HttpResponse, HttpServer


async def _echo(request):
    if request.path == "/fail":
        raise RuntimeError("secret detail")
    return HttpResponse(200, json.dumps({"method": request.method, "path": request.path,
                                         "query": request.query, "body": request.body.decode(),
                                         "agent": request.headers.get("user-agent")}).encode(),
                        "application/json")


def _with_server(check, **limits):
    async def run():
        server = HttpServer(_echo, "127.0.0.1", 0, **limits)
        await server.start()
        try:
            await asyncio.to_thread(check, server.port)
        finally:
            await server.stop()
    asyncio.run(asyncio.wait_for(run(), 30))


def test_requests_on_one_kept_alive_connection():
    def check(port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics?name=a&x=1", headers={"User-Agent": "t"})
        first = conn.getresponse()
        assert first.status == 200 and first.getheader("content-type") == "application/json"
        assert json.loads(first.read()) == {"method": "GET", "path": "/metrics", "query": {"name": "a", "x": "1"},
                                            "body": "", "agent": "t"}
        conn.request("POST", "/reset", body=b"group=g")
        second = conn.getresponse()
        assert json.loads(second.read())["body"] == "group=g"
        conn.close()
    _with_server(check)


def test_bad_requests_get_an_error_status_and_no_detail():
    def check(port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/fail")
        failed = conn.getresponse()
        assert failed.status == 500 and b"secret" not in failed.read()
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/big", body=b"x" * 2048)
        assert conn.getresponse().status == 413
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"X-Long": "y" * 20000})
        assert conn.getresponse().status == 431
        conn.close()
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
    _with_server(check, max_body=1024)


def test_an_idle_connection_is_closed():
    def check(port):
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\n")  # never finishes its head
            assert raw.recv(100) == b""  # closed by the server, well before the socket timeout
    _with_server(check, idle_timeout=0.5)


def test_connections_beyond_the_limit_are_closed():
    connections = 3

    def check(port):
        import socket
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(connections)]
        try:
            held[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert held[0].recv(100).startswith(b"HTTP/1.1 200")
            extra = socket.create_connection(("127.0.0.1", port), timeout=10)
            assert extra.recv(100) == b""
            extra.close()
        finally:
            for s in held:
                s.close()
    _with_server(check, max_connections=3)


def test_a_connection_cancelled_as_its_next_request_arrives_stops():
    """stop() cancels each connection's task once; a cancellation that lands in the step its
    next request's bytes arrive in stops the connection too. Python 3.11's asyncio.wait_for
    returned the bytes instead: the connection served on and stop() waited out its idle
    timeout."""
    def tasks_running(name):
        return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == name]

    async def response(reader):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return head + await reader.readexactly(length)

    async def run():
        server = HttpServer(_echo, "127.0.0.1", 0, idle_timeout=30)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b'"/first"' in await response(reader)
            [connection] = tasks_running("HttpServer._accept")
            for _ in range(1000):  # the server is back to reading the connection
                reads = tasks_running("StreamReader.read")
                if reads:
                    break
                await asyncio.sleep(0)
            [read] = reads
            read.add_done_callback(lambda _: connection.cancel())
            writer.write(b"GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
            done, _ = await asyncio.wait((connection,), timeout=5)
            assert connection in done, "the cancelled connection is still served"
        finally:
            writer.close()
            await server.stop()
    asyncio.run(asyncio.wait_for(run(), 30))
