"""Names a remote user writes resolve only to plugins the operator installed (issue 28, 1).

A tenant admin naming `os:abort` as an entry filter once killed the broker while the value
was being checked; now policies (namespace and topic, with or without
allowOverrideEntryFilters), client auth methods and payload-processor names load only
built-ins, installed entry points and what the broker's configuration names, and nothing
else is imported. The probe module below records its own import in a file, so "nothing
was imported" is observed, not assumed."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http
from plugin_dist import install_entry_points
from rawclient import RawClient
from security_helpers import AUTHZ_SETTINGS, admin_json, build_scene
from standalone import Standalone

import magnetar.client
from magnetar.broker.entry_filters import EntryFilterProvider
from magnetar.client import errors as client_errors
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
PROBE_MODULE = "imported_probe"
PROBE_SOURCE = '''
import os, pathlib
pathlib.Path(os.environ["PROBE_MARKER"]).write_text("imported")
from magnetar.broker.entry_filters import FilterResult
class Filter:
    def filter_entry(self, entry, context):
        return FilterResult.ACCEPT
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A directory on the broker's path holding the probe module, and one installed plugin
    (`installed-filter`, an entry point of the probe's own class)."""
    directory = tmp_path_factory.mktemp("site")
    (directory / f"{PROBE_MODULE}.py").write_text(PROBE_SOURCE)
    return install_entry_points(directory, "probe-plugins", "magnetar.entry_filters",
                                {"installed-filter": f"{PROBE_MODULE}:Filter"})


@pytest.fixture(scope="module")
def marker(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("marker") / "imported"


@pytest.fixture(scope="module")
def broker(signer, site, marker, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("plugins") / "data", [*AUTHZ_SETTINGS, signer.setting],
                        env={"PYTHONPATH": str(site), "PROBE_MARKER": str(marker)}).start()
    build_scene(broker.admin_url, signer)
    yield broker
    broker.stop()


def policy_urls(broker: Standalone) -> list[str]:
    base = f"{broker.admin_url}/admin/v2"
    return [f"{base}/namespaces/t1/ns/entryFilters", f"{base}/persistent/t1/ns/some-topic/entryFilters"]


@pytest.mark.parametrize("name", ["os:abort", "this:s", f"{PROBE_MODULE}:Filter", "subprocess:Popen"])
def test_a_tenant_admin_cannot_make_the_broker_import_anything(broker, signer, marker, name):
    for url in policy_urls(broker):
        status, body = admin_json("POST", url, signer.bearer("t1-admin"), {"entryFilterNames": f"selector,{name}"})
        assert status == 412, (url, status, body)
        assert f"no entry filter named {name!r} is installed" in body["reason"]  # type: ignore[index]
        assert "installed-filter" in body["reason"]  # type: ignore[index]
    assert broker.proc is not None and broker.proc.poll() is None
    assert http("GET", f"{broker.admin_url}/admin/v2/brokers/ready", headers=signer.bearer("admin"))[0] == 200
    assert not marker.exists()
    assert "Beautiful is better than ugly" not in broker.log()  # `this` was never imported


def test_an_auth_method_name_picks_among_configured_providers_only(broker, marker):
    raw = RawClient(broker.url)
    try:
        raw.command(T(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="raw", protocol_version=20, auth_method_name=f"{PROBE_MODULE}:Filter", auth_data=b"x")))
        frame = raw.next_frame()
        assert frame is not None and frame.command.type == T.ERROR
        assert frame.command.error.error == pb.AuthenticationError
        assert "no authentication provider for method" in frame.command.error.message
    finally:
        raw.close()
    assert not marker.exists()


def test_installed_and_built_in_filters_may_be_named(broker, signer, marker):
    for url in policy_urls(broker):
        status, body = admin_json("POST", url, signer.bearer("t1-admin"),
                                  {"entryFilterNames": "selector,installed-filter"})
        assert status == 204, body
    assert marker.exists()  # the installed plugin did load


def test_a_policy_stored_before_naming_a_module_is_ignored_unimported(site, monkeypatch):
    """What a broker finds in a policy an older version accepted: left out, never imported."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, PROBE_MODULE, raising=False)
    provider = EntryFilterProvider(configured=["selector"])
    chain = provider.chain(["selector", f"{PROBE_MODULE}:Filter", "os:abort"])
    assert chain is not None and chain.names == ["selector"]
    assert PROBE_MODULE not in sys.modules


def test_payload_processor_names_never_import_a_module(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, PROBE_MODULE, raising=False)
    monkeypatch.setenv("PROBE_MARKER", os.devnull)
    client = magnetar.client.Client("pulsar://127.0.0.1:1")
    try:
        with pytest.raises(client_errors.InvalidConfiguration, match=r"no payload processor named .* is installed"):
            client.subscribe("t", "s", payload_processor=f"kafka,{PROBE_MODULE}:Filter")
    finally:
        client.close()
    assert PROBE_MODULE not in sys.modules


def test_the_operator_may_still_name_a_class(signer, site, marker, tmp_path):
    """broker.conf is the operator's: `entryFilterNames=module:Class` loads, and policies may
    then name it too."""
    marker.unlink(missing_ok=True)
    broker = Standalone(tmp_path / "data", [*AUTHZ_SETTINGS, signer.setting, f"entryFilterNames={PROBE_MODULE}:Filter"],
                        env={"PYTHONPATH": str(site), "PROBE_MARKER": str(marker)}).start()
    try:
        assert marker.exists()
        status, body = admin_json("POST", f"{broker.admin_url}/admin/v2/namespaces/public/default/entryFilters",
                                  signer.bearer("admin"), {"entryFilterNames": f"{PROBE_MODULE}:Filter"})
        assert status == 204, body
    finally:
        broker.stop()
