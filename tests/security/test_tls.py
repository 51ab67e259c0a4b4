"""TLS on the broker and admin ports with the official client and the certificates the
test makes: encryption with and without client certificates, lookups answering the TLS
URL, plaintext ports off, certificate reload, and peers that never finish a handshake."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from certs import Pair
from kept_messages import keep_while_reading
from polling import wait_for
from security_helpers import QUIET, assert_producer_refused, cert_client, make_client, round_trip
from seeds import fresh_seed
from standalone import Standalone, run_standalone

import magnetar.client


def tls_settings(broker_pair: Pair, ca: Path) -> list[str]:
    return [f"tlsCertificateFilePath={broker_pair.cert}", f"tlsKeyFilePath={broker_pair.key}",
            f"tlsTrustCertsFilePath={ca}", "brokerServicePortTls=0", "webServicePortTls=0"]


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory) -> Iterator[Standalone]:
    """Both plaintext and TLS ports; client certificates checked when offered."""
    ca, _ = pki
    pair = ca.issue("broker", "broker", server=True)
    broker = Standalone(tmp_path_factory.mktemp("tls") / "data",
                        [*tls_settings(pair, ca.pem), "tlsHandshakeTimeoutSeconds=1",
                         "tlsCertRefreshCheckDurationSec=1"]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def strict_broker(pki, tmp_path_factory) -> Iterator[Standalone]:
    """TLS only, a trusted client certificate required."""
    ca, _ = pki
    pair = ca.issue("broker-strict", "broker", server=True)
    broker = Standalone(tmp_path_factory.mktemp("strict") / "data",
                        [*tls_settings(pair, ca.pem), "tlsRequireTrustedClientCertOnConnect=true",
                         "brokerServicePort=", "webServicePort="], plaintext=False).start()
    yield broker
    broker.stop()


def test_produce_and_consume_over_tls_with_hostname_verification(tls_broker, pki):
    ca, _ = pki
    client = make_client(tls_broker.tls_url, tls_trust_certs_file_path=str(ca.pem), tls_validate_hostname=True)
    assert round_trip(client, "tls-plain") == b"secured"


@pytest.mark.parametrize("module", [pulsar, magnetar.client], ids=["official", "magnetar"])
def test_messages_kept_while_more_arrive_over_tls_stay_intact(tls_broker, pki, module):
    """A TLS transport fills magnetar.client's kept read buffer record by record, a frame
    larger than the buffer included."""
    ca, _ = pki
    kwargs = {"logger": QUIET} if module is pulsar else {}
    client = module.Client(tls_broker.tls_url, tls_trust_certs_file_path=str(ca.pem), **kwargs)
    try:
        keep_while_reading(client, f"persistent://public/default/tls-kept-{module.__name__}", batching=False,
                           seed=fresh_seed())
    finally:
        client.close()


def test_untrusted_broker_certificate_is_refused_by_the_client(tls_broker, pki):
    _, rogue = pki
    client = make_client(tls_broker.tls_url, tls_trust_certs_file_path=str(rogue.pem), operation_timeout_seconds=2)
    assert_producer_refused(client, "never")


def test_client_certificate_from_the_trusted_ca(strict_broker, pki):
    ca, _ = pki
    pair = ca.issue("client-ok", "app")
    assert round_trip(cert_client(strict_broker.tls_url, ca, pair), "tls-client-cert") == b"secured"


@pytest.mark.parametrize("module", [pulsar, magnetar.client], ids=["official", "magnetar"])
def test_client_certificate_from_the_tls_paths_without_authentication(strict_broker, pki, module):
    """`tls_certificate_file_path` and `tls_private_key_file_path`: the client's certificate in
    the handshake whatever the authentication (here none), in both clients."""
    ca, _ = pki
    pair = ca.issue(f"client-paths-{module.__name__}", "app")
    kwargs = {"logger": QUIET} if module is pulsar else {}
    client = module.Client(strict_broker.tls_url, tls_trust_certs_file_path=str(ca.pem),
                           tls_certificate_file_path=str(pair.cert), tls_private_key_file_path=str(pair.key),
                           operation_timeout_seconds=3, **kwargs)
    assert round_trip(client, f"tls-paths-{module.__name__}") == b"secured"


def test_magnetar_client_without_a_certificate_is_refused_by_the_strict_broker(strict_broker, pki):
    ca, _ = pki
    client = magnetar.client.Client(strict_broker.tls_url, tls_trust_certs_file_path=str(ca.pem),
                                    operation_timeout_seconds=2)
    assert_producer_refused(client, "no-client-cert", magnetar.client.PulsarException)


@pytest.mark.parametrize("credentials", ["none", "rogue", "mismatched"])
def test_connection_without_a_trusted_client_certificate_is_refused(strict_broker, pki, credentials):
    ca, rogue = pki
    kwargs = {}
    if credentials == "rogue":
        pair = rogue.issue("client-rogue", "app")
        kwargs["authentication"] = pulsar.AuthenticationTLS(str(pair.cert), str(pair.key))
    elif credentials == "mismatched":  # a trusted certificate with another certificate's key
        one, other = ca.issue("client-a", "app"), ca.issue("client-b", "app")
        kwargs["authentication"] = pulsar.AuthenticationTLS(str(one.cert), str(other.key))
    client = make_client(strict_broker.tls_url, tls_trust_certs_file_path=str(ca.pem), operation_timeout_seconds=2,
                         **kwargs)
    assert_producer_refused(client, "refused")


def test_plaintext_ports_can_be_turned_off(strict_broker):
    assert strict_broker.url.startswith("pulsar+ssl://")
    assert strict_broker.admin_url == ""
    assert "accepting connections on pulsar://" not in strict_broker.log()


def test_lookups_answer_the_tls_url(tls_broker, pki):
    ca, _ = pki
    context = ssl.create_default_context(cafile=str(ca.pem))
    status, _, body = http("GET", f"{tls_broker.admin_tls_url}/lookup/v2/topic/persistent/public/default/lk",
                           context=context)
    assert status == 200
    answer = json.loads(body)
    assert answer["brokerUrlTls"] == tls_broker.tls_url
    assert answer["brokerUrl"] == tls_broker.url
    assert answer["httpUrlTls"] == tls_broker.admin_tls_url
    status, _, body = http("GET", f"{tls_broker.admin_tls_url}/admin/v2/clusters/standalone", context=context)
    assert json.loads(body)["brokerServiceUrlTls"] == tls_broker.tls_url
    # a client given the https:// service URL follows the lookup to pulsar+ssl://
    client = make_client(tls_broker.admin_tls_url, tls_trust_certs_file_path=str(ca.pem))
    assert round_trip(client, "lk") == b"secured"


def _tls_port(broker: Standalone) -> int:
    return int(broker.tls_url.rsplit(":", 1)[1])


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer closes `sock` (EOF or reset) within `seconds`; what it sends before
    (a TLS alert) is read and ignored."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_garbage_before_the_handshake_is_dropped(tls_broker, pki):
    with socket.create_connection(("127.0.0.1", _tls_port(tls_broker))) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)) * 4)
        assert closed_within(sock, 5)
    ca, _ = pki
    assert round_trip(make_client(tls_broker.tls_url, tls_trust_certs_file_path=str(ca.pem)), "after-garbage")


def test_a_handshake_that_never_finishes_is_dropped_after_the_timeout(tls_broker, pki):
    ca, _ = pki
    with socket.create_connection(("127.0.0.1", _tls_port(tls_broker))) as silent:
        # others are served meanwhile
        assert round_trip(make_client(tls_broker.tls_url, tls_trust_certs_file_path=str(ca.pem)), "during-stall")
        assert closed_within(silent, 10)


def test_certificates_reload_when_the_files_change(tls_broker, pki):
    ca, _ = pki
    address = ("127.0.0.1", _tls_port(tls_broker))
    before = ssl.get_server_certificate(address)
    renewed = ca.issue("broker-renewed", "broker", server=True)
    settings = dict(item.split("=", 1) for item in tls_broker.config)
    # replace the files in place, as certificate renewal tools do
    Path(settings["tlsKeyFilePath"]).write_bytes(renewed.key.read_bytes())
    Path(settings["tlsCertificateFilePath"]).write_bytes(renewed.cert.read_bytes())
    assert wait_for(lambda: ssl.get_server_certificate(address) != before, timeout=15)
    assert "TLS certificate reloaded" in tls_broker.log()
    assert round_trip(make_client(tls_broker.tls_url, tls_trust_certs_file_path=str(ca.pem),
                                  tls_validate_hostname=True), "after-reload")


@pytest.mark.parametrize(("settings", "named"), [
    (["brokerServicePortTls=0"], "tlsCertificateFilePath"),
    (["brokerServicePortTls=0", "tlsCertificateFilePath=/nonexistent.pem", "tlsKeyFilePath=/nonexistent.key"],
     "tlsCertificateFilePath"),
    (["brokerServicePortTls=0", "tlsCertificateFilePath={cert}", "tlsKeyFilePath={key}", "tlsProtocols=SSLv2"],
     "tlsProtocols"),
    (["brokerServicePortTls=0", "tlsCertificateFilePath={cert}", "tlsKeyFilePath={key}",
      "tlsRequireTrustedClientCertOnConnect=true"], "tlsTrustCertsFilePath"),
])
def test_bad_tls_settings_stop_the_broker_naming_the_key(settings, named, pki, tmp_path):
    pair = pki[0].issue("broker-bad", "broker", server=True)
    args = [arg for item in settings for arg in ("-c", item.format(cert=pair.cert, key=pair.key))]
    result = run_standalone("--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr


def test_trusted_certificates_reload_when_their_file_changes(tls_broker, pki):
    """Runs last among the tls_broker tests: it makes the rogue CA trusted."""
    ca, rogue = pki
    pair = rogue.issue("client-rogue-later", "app")

    def served() -> bool:
        client = cert_client(tls_broker.tls_url, ca, pair, operation_timeout_seconds=2)
        try:
            client.create_producer("trust-reload")
            return True
        except pulsar.PulsarException:
            return False
        finally:
            client.close()

    assert not served()
    trust = Path(dict(item.split("=", 1) for item in tls_broker.config)["tlsTrustCertsFilePath"])
    trust.write_bytes(trust.read_bytes() + rogue.pem.read_bytes())
    assert wait_for(served, timeout=20, interval=0.5)
