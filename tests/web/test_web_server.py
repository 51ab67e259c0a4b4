"""The admin API's HTTP server as clients that curl and scripts do not cover use it:
pipelining, HTTP/1.0, Expect: 100-continue, and the requests an attacker sends (over-long
headers, oversized or smuggled bodies, slow headers, header injection through a message
property). Raw sockets, with responses read by llhttp's response parser."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import httptools
import pytest
from admin_http import get_json, http
from procfs import established, rss_kb
from standalone import Standalone

from magnetar.functions.routes import MAX_CODE_BYTES
from magnetar.web import MAX_BODY_BYTES
from magnetar.web.server import MAX_HEAD_BYTES

BUDGET = 2  # webServiceRequestTimeoutSeconds: how long a client may take to send its headers


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("web") / "data", [f"webServiceRequestTimeoutSeconds={BUDGET}"]).start()
    yield broker
    broker.stop()


class _Responses:
    """What llhttp reads from the server's bytes: (status, headers, body) per response."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, dict[str, str], bytes]] = []
        self._headers: dict[str, str] = {}
        self._body = bytearray()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self._headers, bytes(self._body)))
        self._headers, self._body = {}, bytearray()


def _connect(broker: Standalone) -> socket.socket:
    parts = urlsplit(broker.admin_url)
    return socket.create_connection((parts.hostname, parts.port), timeout=BUDGET + 30)


def _read(sock: socket.socket, count: int) -> tuple[list, bool]:
    """`count` responses, and whether the server closed the connection after them."""
    responses = _Responses()
    while len(responses.done) < count:
        data = sock.recv(65536)
        if not data:
            return responses.done, True
        responses.parser.feed_data(data)
    sock.settimeout(0.5)
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    sock.settimeout(BUDGET + 30)
    return responses.done, closed


def _reason(response: tuple[int, dict[str, str], bytes]) -> str:
    assert response[1]["content-type"].startswith("application/json"), response
    return json.loads(response[2])["reason"]


def test_pipelined_requests_are_answered_in_order_on_one_connection(broker):
    with _connect(broker) as sock:
        sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
        responses, closed = _read(sock, 4)
    assert [status for status, _, _ in responses] == [200, 200, 404, 200]
    assert json.loads(responses[0][2]) == ["standalone"] == json.loads(responses[3][2])
    assert "public" in json.loads(responses[1][2])
    assert "/nowhere" in _reason(responses[2])
    assert not closed


def test_head_has_the_get_length_and_no_body(broker):
    with _connect(broker) as sock:
        sock.sendall(b"HEAD /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
        head = sock.recv(65536)
        while head.count(b"\r\n\r\n") < 2 or not head.endswith(b'["standalone"]'):
            head += sock.recv(65536)
    first, second = head.split(b"HTTP/1.1 200 OK")[1:]
    assert b"Content-Length: 14\r\n" in first and first.endswith(b"\r\n\r\n")
    assert second.endswith(b'\r\n\r\n["standalone"]')


def test_http_1_0_is_answered_and_closed(broker):
    with _connect(broker) as sock:
        sock.sendall(b"GET /admin/v2/clusters HTTP/1.0\r\n\r\n")
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 200 and closed


def test_expect_continue_asks_for_the_body_then_answers(broker):
    body = json.dumps({"allowedClusters": ["standalone"]}).encode()
    with _connect(broker) as sock:
        sock.sendall(b"PUT /admin/v2/tenants/expecting HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 204 and not closed
    assert "expecting" in get_json(f"{broker.admin_url}/admin/v2/tenants")


def test_a_request_refused_before_its_body_never_uploads_it(broker):
    """A 404 (or 401, 413) is answered without 100 Continue, and the connection closes, as
    the body the client holds back cannot be told apart from a next request."""
    with _connect(broker) as sock:
        sock.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 404 and closed
    with _connect(broker) as sock:
        sock.sendall(b"PUT /admin/v2/tenants/huge HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % (64 * 1024 * 1024))
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 413 and closed
    assert "huge" not in get_json(f"{broker.admin_url}/admin/v2/tenants")


def test_a_chunked_body_past_the_limit_is_413(broker):
    chunk = b"1" * 65536
    with _connect(broker) as sock:
        sock.sendall(b"PUT /admin/v2/persistent/public/default/chunked/partitions HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
        for _ in range(17):  # 17 x 64 KiB, past the 1 MiB the admin API's JSON bodies take
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        responses, _ = _read(sock, 1)  # kept open when the whole body was read before the answer
    assert responses[0][0] == 413
    assert "1048576 bytes" in _reason(responses[0])


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
    # request smuggling: both framings, a bad chunk size, a bare LF in a header, no HTTP at all
    (b"POST /admin/v2/clusters HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", 400),
    (b"POST /admin/v2/persistent/public/default/chunky/partitions HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\nX-Injected: y\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)) + b"\r\n\r\n", 400),
], ids=["long-header", "long-url", "cl-and-te", "bad-chunk", "bare-lf", "tls-hello"])
def test_a_request_that_cannot_be_read_is_refused_and_the_connection_closed(broker, request_bytes, status):
    with _connect(broker) as sock:
        sock.sendall(request_bytes)
        responses, closed = _read(sock, 1)
    assert responses[0][0] == status and closed
    assert _reason(responses[0])


def test_an_unreadable_request_is_answered_after_the_good_ones_before_it(broker):
    with _connect(broker) as sock:
        sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\nNOT-HTTP\r\n\r\n")
        responses, closed = _read(sock, 2)
    assert [status for status, _, _ in responses] == [200, 400] and closed


def test_headers_that_trickle_in_are_cut_off(broker):
    with _connect(broker) as sock:
        sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n")
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 408 and closed
    assert f"within {BUDGET}" in _reason(responses[0])


def test_a_connection_that_sends_nothing_is_closed_within_the_budget(broker):
    """A new connection's first request must come within the request budget (idle sockets
    once held their place for the 75 s of an idle keep-alive)."""
    with _connect(broker) as sock:
        responses, closed = _read(sock, 1)
    assert responses[0][0] == 408 and closed


def test_connections_past_max_http_server_connections_are_closed(broker_factory):
    limited = broker_factory("maxHttpServerConnections=3")
    held = [_connect(limited) for _ in range(3)]
    try:
        with _connect(limited) as refused, contextlib.suppress(ConnectionResetError):
            assert refused.recv(1) == b""  # closed before anything is read
        held.pop().close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the broker has seen that one leave
            with _connect(limited) as sock:
                sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    responses, _ = _read(sock, 1)
                except ConnectionResetError:
                    continue
                if responses:
                    break
        assert responses[0][0] == 200
    finally:
        for sock in held:
            sock.close()
    assert "admin API connections refused: 3 are open (maxHttpServerConnections)" in limited.log()


DEEP = b"[" * 100_000


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("POST", "/admin/v2/namespaces/public/default/messageTTL", DEEP, 400),
    ("PUT", "/admin/v2/tenants/deep", DEEP, 400),
    ("POST", "/admin/v2/schemas/public/default/deep/schema", DEEP, 400),
    ("POST", "/admin/v2/schemas/public/default/deep/compatibility", DEEP, 400),
    ("POST", "/admin/v2/schemas/public/default/deep/schema",
     json.dumps({"type": "KEY_VALUE", "schema": "[" * 100_000, "properties": {}}).encode(), 422),
    ("POST", "/admin/v3/functions/public/default/deep/counter/k", DEEP, 400),
], ids=["policy", "tenant", "schema", "compatibility", "key-value-sides", "function-counter"])
def test_json_nested_beyond_the_parser_is_a_400_not_a_server_error(broker, method, path, body, status):
    """JSON nested deeper than the interpreter's stack once answered 500 with a traceback in
    the log; it is as malformed as any other body."""
    got, _, content = http(method, f"{broker.admin_url}{path}", body)
    assert got == status, content
    assert "nested too deeply" in json.loads(content)["reason"] or status == 422
    assert "Traceback" not in broker.log()


def test_a_key_value_side_nested_deeply_is_shown_as_text(broker):
    """A BYTES side holds anything; shown back, it is text when it is no JSON this broker reads."""
    deep_side = "[" * 100_000
    payload = {"type": "KEY_VALUE", "schema": json.dumps({"key": deep_side, "value": ""}),
               "properties": {"key.schema.type": "BYTES", "value.schema.type": "BYTES"}}
    path = f"{broker.admin_url}/admin/v2/schemas/public/default/deep-side/schema"
    status, _, content = http("POST", path, json.dumps(payload).encode())
    assert status == 200, content
    status, _, content = http("GET", path)
    assert status == 200, content
    assert json.loads(json.loads(content)["data"])["key"] == deep_side


def test_a_message_property_cannot_inject_a_response_header(broker, client_factory):
    """Peeking shows properties as X-Pulsar-PROPERTY-* headers: a line break in one is refused
    (500 naming no header), never written into the response."""
    topic = "persistent://public/default/injected"
    client = client_factory(broker.url)
    client.subscribe(topic, "peek").close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"payload", properties={"safe": "value"})
    producer.send(b"payload", properties={"evil": "x\r\nSet-Cookie: session=stolen"})
    base = f"{broker.admin_url}/admin/v2/persistent/public/default/injected/subscription/peek/position"
    status, headers, _ = http("GET", f"{base}/1")
    assert status == 200 and headers["X-Pulsar-PROPERTY-safe"] == "value"
    status, headers, body = http("GET", f"{base}/2")
    assert status == 500, (status, headers)
    assert "Set-Cookie" not in headers and not any(name.startswith("X-Pulsar") for name in headers)
    assert json.loads(body)["reason"]


def test_an_encoded_slash_stays_inside_its_path_part(broker):
    """`a%2Fb` is one topic part (decoded to `a/b`, not a valid local name), not two parts."""
    status, _, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{quote('a/b', safe='')}"
                                  f"/stats")
    assert status in (404, 412), (status, body)
    assert "no admin API path" not in json.loads(body)["reason"]


def test_a_client_that_does_not_read_its_answers_is_not_read_either(broker):
    """Pipelined requests whose answers pile up unread: once the kernel's buffers and the
    transport's are full the server stops answering and reading, so the client's sending
    blocks and the broker's memory stays flat (a server that kept answering would hold
    every answer, ~10 KB each here, in memory); after the request budget without the client
    taking its answers, the server drops the connection."""
    request = b"GET /admin/v2/brokers/configuration/runtime HTTP/1.1\r\nHost: x\r\n\r\n" * 100
    rss_before = rss_kb(broker.proc.pid)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        parts = urlsplit(broker.admin_url)
        sock.connect((parts.hostname, parts.port))
        sock.settimeout(BUDGET / 4)
        deadline, blocked = time.monotonic() + 20, False
        while not blocked and time.monotonic() < deadline:
            try:
                sock.sendall(request)
            except TimeoutError:
                blocked = True
        grown_mb = (rss_kb(broker.proc.pid) - rss_before) / 1024
        assert blocked and grown_mb < 24, f"blocked: {blocked}, broker RSS +{grown_mb:.1f} MB"
        _dropped_while_read_slowly(broker, sock)
    assert get_json(f"{broker.admin_url}/admin/v2/clusters") == ["standalone"]


def _dropped_while_read_slowly(broker, sock: socket.socket) -> None:
    """While `sock` takes a byte every 10 ms, the broker drops its end of the connection."""
    stop = threading.Event()

    def read_slowly() -> None:
        sock.settimeout(1)
        with contextlib.suppress(OSError):
            while not stop.is_set() and sock.recv(1):
                time.sleep(0.01)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    port = urlsplit(broker.admin_url).port
    deadline = time.monotonic() + BUDGET + 30
    try:
        while established(broker.proc.pid, port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not established(broker.proc.pid, port), "the broker still serves a client that does not read"
    finally:
        stop.set()
        reader.join()


def test_a_client_that_reads_a_byte_at_a_time_is_cut_off(broker, client_factory):
    """Four peeks at a 3 MB message, pipelined, their answers read a byte every 10 ms: once
    the socket's buffers are full they are not taken within the request budget, and the
    connection is dropped (it once stayed open, 12 MB of answers held, for the 33 hours such
    a client takes)."""
    topic = "persistent://public/default/slow-reader"
    client = client_factory(broker.url)
    client.subscribe(topic, "s").close()
    client.create_producer(topic, batching_enabled=False).send(b"m" * (3 * 1024 * 1024))
    peek = (b"GET /admin/v2/persistent/public/default/slow-reader/examinemessage?initialPosition=earliest "
            b"HTTP/1.1\r\nHost: x\r\n\r\n")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        parts = urlsplit(broker.admin_url)
        sock.connect((parts.hostname, parts.port))
        sock.sendall(peek * 4)
        _dropped_while_read_slowly(broker, sock)
    assert get_json(f"{broker.admin_url}/admin/v2/clusters") == ["standalone"]


# -- every limit on both sides of its edge (issue 42): at the limit is taken, one byte more refused

def _head_of(size: int, target: bytes = b"/admin/v2/clusters") -> bytes:
    """A GET whose target and header lines (name, value, ": " and CRLF each) count `size`
    bytes, what MAX_HEAD_BYTES bounds; the padding is one header."""
    fixed = len(target) + len(b"Host") + len(b"x") + 4 + len(b"X-Pad") + 4
    return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * (size - fixed) + b"\r\n\r\n"


@pytest.mark.parametrize(("size", "status"), [(MAX_HEAD_BYTES, 200), (MAX_HEAD_BYTES + 1, 431)])
def test_the_head_limit_at_its_edge(broker, size, status):
    with _connect(broker) as sock:
        sock.sendall(_head_of(size))
        responses, _ = _read(sock, 1)
    assert responses[0][0] == status


@pytest.mark.parametrize(("size", "status"), [(MAX_HEAD_BYTES, 404), (MAX_HEAD_BYTES + 1, 431)])
def test_the_target_limit_at_its_edge(broker, size, status):
    """The request target alone counts against the same limit (a long path is a 404 within it)."""
    target = b"/" + b"t" * (size - len(b"Host") - len(b"x") - 4 - 1)
    with _connect(broker) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        responses, _ = _read(sock, 1)
    assert responses[0][0] == status


def _chunked(body: bytes, size: int = 65536) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b"0\r\n\r\n"


def _upload(broker, method: str, path: str, body: bytes, *, chunked: bool, content_type: str) -> int:
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(body)
    with _connect(broker) as sock:
        sock.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n%s\r\n\r\n"
                     % (method.encode(), path.encode(), content_type.encode(), framing))
        sender = threading.Thread(target=sock.sendall, args=(_chunked(body) if chunked else body,))
        sender.start()  # the answer may come before all is sent (413): read it meanwhile
        responses, _ = _read(sock, 1)
        sender.join()
    return responses[0][0]


def _json_text(size: int) -> bytes:
    """A JSON string of `size` bytes: well formed, and not what the route takes (400 or 412)."""
    return b'"' + b"a" * (size - 2) + b'"'


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-limit", "one-over"])
def test_the_body_limit_of_a_json_route_at_its_edge(broker, chunked, extra):
    status = _upload(broker, "PUT", "/admin/v2/tenants/edge", _json_text(MAX_BODY_BYTES + extra), chunked=chunked,
                     content_type="application/json")
    assert status == 413 if extra else status in (400, 412), status


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-limit", "one-over"])
def test_the_function_upload_limit_at_its_edge(broker, chunked, extra):
    """Function code is a multipart upload of up to MAX_CODE_BYTES: a body of exactly that
    is read (and refused for what it holds: no functionConfig part), one byte more is 413."""
    body = b"--b\r\nContent-Disposition: form-data; name=\"data\"; filename=\"f.py\"\r\n\r\n"
    body += b"#" * (MAX_CODE_BYTES + extra - len(body) - len(b"\r\n--b--\r\n")) + b"\r\n--b--\r\n"
    status = _upload(broker, "POST", "/admin/v3/functions/public/default/edge", body, chunked=chunked,
                     content_type="multipart/form-data; boundary=b")
    assert status == 413 if extra else status == 400, status
