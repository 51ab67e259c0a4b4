"""The console's files over HTTP: what is served at `/` and `/console/<name>`, with which
headers, what is not (paths out of the package, files not in its table), and the switch
that turns the console off (`--no-console`, webConsoleEnabled=false)."""

from __future__ import annotations

import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

import pytest
from admin_http import http, http_get
from standalone import Standalone

from magnetar.console.files import FILES

STATIC = Path(__file__).parents[2] / "src" / "magnetar" / "console" / "static"


def test_the_table_names_every_shipped_file():
    assert set(FILES) == {path.name for path in STATIC.iterdir()}


def test_the_page_and_its_files_come_with_a_policy_against_inline_script(module_broker, tmp_path):
    status, headers, body = http_get(f"{module_broker.admin_url}/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="console/app.js">' in body
    for name, content_type in FILES.items():
        status, headers, body = http_get(f"{module_broker.admin_url}/console/{name}")
        assert (status, headers["Content-Type"]) == (200, f"{content_type}; charset=utf-8"), name
        assert body == (STATIC / name).read_bytes()
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe" not in policy and "default-src 'none'" in policy
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert "web console on " + module_broker.admin_url + "/" in module_broker.log()


def raw_get(admin_url: str, target: str) -> tuple[int, bytes]:
    """A GET of `target` exactly as written (no client normalises its dots or escapes)."""
    url = urllib.parse.urlsplit(admin_url)
    connection = HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        connection.putrequest("GET", target, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("target", [
    "/console/../../etc/passwd", "/console/..%2f..%2f..%2fetc%2fpasswd", "/console/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/console/..%252f..%252fetc%252fpasswd", "/console/%2e%2e", "/console/..", "/console/.", "/console/",
    "/console//etc/passwd", "/console/%2fetc%2fpasswd", "/console/static%2fapp.js", "/console/files.py",
    "/console/__init__.py", "/console/app.js%00", "/console/app.js/", "/console/APP.JS", "/console/app.js%20",
    "/console/..\\..\\etc\\passwd", "/console/%5c..%5c..%5cetc%5cpasswd", "/index.html", "/../etc/passwd",
])
def test_paths_outside_the_table_get_404(module_broker, target):
    status, body = raw_get(module_broker.admin_url, target)
    assert status == 404, (target, body[:200])
    assert b"root:" not in body and b"import" not in body


@pytest.mark.parametrize("switch", [["--no-console"], ["-c", "webConsoleEnabled=false"]])
def test_the_console_turned_off_is_404_as_before(tmp_path, switch):
    broker = Standalone(tmp_path / "off", args=switch).start()
    try:
        assert http_get(f"{broker.admin_url}/")[0] == 404
        assert http_get(f"{broker.admin_url}/console/app.js")[0] == 404
        assert http_get(f"{broker.admin_url}/admin/v2/tenants")[0] == 200
        assert "web console" not in broker.log()
    finally:
        broker.stop()


def test_the_console_is_served_to_anyone_while_the_admin_api_asks_for_a_token(broker_factory, tmp_path):
    key = tmp_path / "secret.key"
    key.write_bytes(b"k" * 32)
    broker = broker_factory("authenticationEnabled=true", "authenticationProviders=token",
                            f"tokenSecretKey=file://{key}", "authenticateMetricsEndpoint=true")
    assert http_get(f"{broker.admin_url}/")[0] == 200
    assert http_get(f"{broker.admin_url}/console/api.js")[0] == 200
    assert http_get(f"{broker.admin_url}/admin/v2/brokers/version")[0] == 401
    assert http("GET", f"{broker.admin_url}/metrics")[0] == 401
