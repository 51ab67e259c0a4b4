"""The admin API's routes and request parts, without a server."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from magnetar import web
from magnetar.admin_client.functions import multipart
from magnetar.web.messages import Body, Headers, Request, Target


async def _nothing(_request: web.Request) -> web.Response:
    return web.Response()


def _router(*routes: web.RouteDef) -> web.Router:
    router = web.Router()
    router.add_routes(routes)
    return router


def test_a_part_matches_one_segment_and_is_decoded():
    router = _router(web.get("/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/stats",
                             _nothing))
    route, parts = router.resolve("GET", "/admin/v2/persistent/t/ns/a%2Fb%20c/stats")
    assert parts == {"domain": "persistent", "tenant": "t", "namespace": "ns", "topic": "a/b c"}
    assert route.canonical == "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats"
    assert router.resolve("GET", "/admin/v2/persistent/t/ns/a/b/stats") is None
    assert router.resolve("GET", "/admin/v2/other/t/ns/x/stats") is None
    assert router.resolve("GET", "/admin/v2/persistent/t//x/stats") is None  # an empty part matches nothing


def test_head_is_its_get_and_the_first_route_added_wins():
    first, second = web.get("/a/{x}", _nothing), web.get("/a/{y:[0-9]+}", _nothing)
    router = _router(first, second, web.post("/a/{x}", _nothing))
    assert router.resolve("HEAD", "/a/1") == (first, {"x": "1"})
    assert router.resolve("DELETE", "/a/1") is None


@pytest.mark.parametrize(("method", "path", "status", "allow"), [
    ("GET", "/nowhere", 404, None),
    ("DELETE", "/a/1", 405, "GET, POST, HEAD"),
    ("PATCH", "/a/1", 405, "GET, POST, HEAD"),
])
def test_what_no_route_takes_is_refused_as_json(method, path, status, allow):
    router = _router(web.get("/a/{x}", _nothing), web.post("/a/{x}", _nothing))
    with pytest.raises(web.HttpError) as refused:
        asyncio.run(router.refusal(method, path))
    response = refused.value.response
    assert response.status == status and json.loads(response.body)["reason"]
    assert response.headers.get("Allow") == allow


def test_a_route_takes_only_the_methods_the_api_has():
    with pytest.raises(ValueError, match="TRACE"):
        web.route("TRACE", "/a", _nothing)


@pytest.mark.parametrize(("target", "path", "query"), [
    (b"/a/b?x=1&x=2&y=a+b&z", "/a/b", {"x": "1", "y": "a b", "z": ""}),
    (b"http://host:8080/a%2Fb?q=%26", "/a/b", {"q": "&"}),
    (b"*", "*", {}),
])
def test_a_target_s_path_and_query(target, path, query):
    parsed = Target(target)
    assert (parsed.path, parsed.query) == (path, query)


def _request(body: bytes, content_type: str) -> Request:
    incoming = Body(len(body) + 1, len(body), lambda _held: None)
    incoming.receive(body)
    incoming.end()
    headers = Headers([(b"content-type", content_type.encode())])
    return Request("POST", Target(b"/"), headers, None, None, incoming, None)  # type: ignore[arg-type]


def test_form_parts_read_what_the_admin_client_uploads():
    """Random binary code (CRLFs, boundary-like bytes included) comes back byte for byte."""
    rng = random.Random(7)
    code = bytes(rng.randrange(256) for _ in range(50_000)) + b"\r\n--boundary\r\n"
    body, content_type = multipart({"functionConfig": (None, "application/json", b'{"name": "f"}'),
                                    "data": ("dir/f.py", "application/octet-stream", code)})

    async def read() -> list[web.FormPart]:
        return await _request(body, content_type).form_parts()

    parts = {part.name: part for part in asyncio.run(read())}
    assert parts["functionConfig"].data == b'{"name": "f"}' and parts["functionConfig"].filename is None
    assert parts["data"].data == code and parts["data"].filename == "dir/f.py"


@pytest.mark.parametrize(("body", "content_type", "status"), [
    (b"\xff\xfe", "application/json", 400),
    (b"caf\xe9", "text/plain; charset=latin-1", None),
    (b"x", "text/plain; charset=no-such-charset", 400),
])
def test_text_bodies_are_decoded_by_their_charset(body, content_type, status):
    async def text() -> str:
        return await _request(body, content_type).text()

    if status is None:
        assert asyncio.run(text()) == "café"
    else:
        with pytest.raises(web.HttpError) as refused:
            asyncio.run(text())
        assert refused.value.status == status


@pytest.mark.parametrize("cut", [10, -60, -3, -2])
def test_a_multipart_body_cut_short_is_400(cut):
    body, content_type = multipart({"data": ("f.py", "application/octet-stream", b"x" * 100)})

    async def read() -> list[web.FormPart]:
        return await _request(body[:cut], content_type).form_parts()

    if cut == -2:  # only the final CRLF after the closing delimiter is missing: still whole
        assert [part.data for part in asyncio.run(read())] == [b"x" * 100]
        return
    with pytest.raises(web.HttpError) as refused:
        asyncio.run(read())
    assert refused.value.status == 400
