"""What security costs: TLS vs plaintext throughput, and authentication per connection.

    .venv/bin/python benchmarks/tls_bench.py [--quick]

Starts one real `magnetar standalone` with both a plaintext and a TLS port (certificates
made here with `cryptography`) and, in one run, with the official client:

- produce (batched 1000 msgs / 10 ms, and unbatched pipelined send_async) and consume
  of 100-byte messages over pulsar:// and over pulsar+ssl://, msg/s, and the TLS/plain
  ratio of each;
- connection set-up: a new client's first producer (connect, CONNECT, lookup, PRODUCER)
  over plain, TLS, TLS with a client certificate (tls auth), token (HS256, RS256) and
  basic (bcrypt, apr1) auth, on a second broker with authentication on; median ms and
  the extra over plain;
- the providers alone, in this process: authentications per second for each kind of
  credential (what a broker core spends per CONNECT or AUTH_RESPONSE).

Prints ONE JSON object. The figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jwt
import pulsar
from passlib.apache import HtpasswdFile
from passlib.hash import apr_md5_crypt, bcrypt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker_process import PAYLOAD, produce
from certs import CertificateAuthority
from standalone import Standalone

from magnetar.broker.auth.authentication import AuthenticationService, Credentials
from magnetar.broker.auth.tokens import new_key_pair
from magnetar.broker.config import ServiceConfiguration

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def client(url: str, ca: Path, **kwargs) -> pulsar.Client:
    return pulsar.Client(url, tls_trust_certs_file_path=str(ca), operation_timeout_seconds=30, logger=QUIET,
                         **kwargs)


# ---------------------------------------------------------------- throughput
def produce_rate(url: str, ca: Path, topic: str, count: int, *, batched: bool) -> float:
    pulsar_client = client(url, ca)
    kwargs = {"batching_enabled": batched, "max_pending_messages": 20000, "block_if_queue_full": True}
    if batched:
        kwargs.update(batching_max_messages=1000, batching_max_publish_delay_ms=10)
    producer = pulsar_client.create_producer(topic, **kwargs)
    producer.send(PAYLOAD)  # warm: connection, lookup, producer
    result = produce(producer, count)  # raises if receipts stop coming; failures are not counted as sent
    pulsar_client.close()
    return result.sent / result.seconds


def consume_rate(url: str, ca: Path, topic: str, count: int) -> float:
    pulsar_client = client(url, ca)
    consumer = pulsar_client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                       receiver_queue_size=10000)
    consumer.receive(30000)  # warm
    started = time.perf_counter()
    for _ in range(count - 1):
        consumer.acknowledge(consumer.receive(30000))
    elapsed = time.perf_counter() - started
    pulsar_client.close()
    return (count - 1) / elapsed


def throughput(broker: Standalone, ca: Path, count: int, rounds: int) -> dict:
    """Each workload over plain then TLS, `rounds` times alternating, the median of each:
    on a shared machine a single pass compares two different moments, not two transports."""
    workloads = {
        "produce_batched_msg_s": lambda url, tag: produce_rate(url, ca, f"batched-{tag}", count, batched=True),
        "produce_unbatched_msg_s": lambda url, tag: produce_rate(url, ca, f"single-{tag}", count // 4, batched=False),
        "consume_msg_s": lambda url, tag: consume_rate(url, ca, f"batched-{tag}", count),
    }
    samples: dict[str, dict[str, list[float]]] = {"plain": {}, "tls": {}}
    for round_ in range(rounds):
        for name, workload in workloads.items():
            for transport, url in (("plain", broker.url), ("tls", broker.tls_url)):
                samples[transport].setdefault(name, []).append(workload(url, f"{transport}-{round_}"))
    results: dict[str, dict] = {transport: {name: round(statistics.median(values)) for name, values in by_name.items()}
                                for transport, by_name in samples.items()}
    results["tls_over_plain"] = {name: round(results["tls"][name] / results["plain"][name], 3) for name in workloads}
    return results


# ---------------------------------------------------------------- connection set-up
def connect_ms(url: str, ca: Path, rounds: int, **kwargs) -> float:
    """Median ms from a new client to its first producer."""
    samples = []
    for i in range(rounds):
        started = time.perf_counter()
        pulsar_client = client(url, ca, **kwargs)
        pulsar_client.create_producer("connect-bench").close()
        samples.append((time.perf_counter() - started) * 1000)
        pulsar_client.close()
        if i == 0:
            samples.clear()  # the first one also loads the topic
    return statistics.median(samples)


def connection_costs(plain: Standalone, secured: Standalone, secured_rs: Standalone, ca: CertificateAuthority,
                     tokens: dict[str, str], rounds: int) -> dict:
    """`secured` checks HS256 tokens, `secured_rs` RS256 ones."""
    pair = ca.issue("bench-client", "admin")
    cases = {
        "plain, no auth": (plain.url, {}),
        "tls, no auth": (plain.tls_url, {}),
        "tls + client certificate (tls auth)": (secured.tls_url,
                                                {"authentication": pulsar.AuthenticationTLS(str(pair.cert),
                                                                                            str(pair.key))}),
        "token HS256": (secured.url, {"authentication": pulsar.AuthenticationToken(tokens["HS256"])}),
        "token RS256": (secured_rs.url, {"authentication": pulsar.AuthenticationToken(tokens["RS256"])}),
        "basic bcrypt": (secured.url, {"authentication": pulsar.AuthenticationBasic("bcrypt-user", "pw")}),
        "basic apr1": (secured.url, {"authentication": pulsar.AuthenticationBasic("apr1-user", "pw")}),
    }
    medians = {name: connect_ms(url, ca.pem, rounds, **kwargs) for name, (url, kwargs) in cases.items()}
    base = medians["plain, no auth"]
    return {name: {"median_ms": round(ms, 2), "extra_over_plain_ms": round(ms - base, 2)}
            for name, ms in medians.items()}


# ---------------------------------------------------------------- providers alone
def provider_rates(config: ServiceConfiguration, cases: dict[str, Credentials], seconds: float) -> dict[str, int]:
    """Authentications per second of each case, by the broker's own AuthenticationService."""
    service = AuthenticationService(config)
    rates = {}
    for name, credentials in cases.items():
        done = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            service.authenticate(credentials)
            done += 1
        rates[name] = round(done / (time.perf_counter() - started))
    return rates


# ---------------------------------------------------------------- set-up
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer messages and connections")
    args = parser.parse_args()
    count, rounds, seconds = (20000, 8, 0.5) if args.quick else (100000, 25, 2.0)
    passes = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="magnetar-tls-bench-") as tmp:
        root = Path(tmp)
        ca = CertificateAuthority(root)
        server = ca.issue("broker", "broker", server=True)
        tls = [f"tlsCertificateFilePath={server.cert}", f"tlsKeyFilePath={server.key}",
               f"tlsTrustCertsFilePath={ca.pem}", "brokerServicePortTls=0"]
        secret = secrets.token_bytes(32)
        (root / "secret.key").write_bytes(secret)
        private, public = new_key_pair("RS256")
        (root / "public.key").write_bytes(public)
        htpasswd = HtpasswdFile(str(root / "htpasswd"), new=True)
        htpasswd.set_hash("bcrypt-user", bcrypt.using(ident="2y", rounds=5).hash("pw"))  # htpasswd -B's cost
        htpasswd.set_hash("apr1-user", apr_md5_crypt.hash("pw"))
        htpasswd.save()
        from cryptography.hazmat.primitives.serialization import load_der_private_key  # noqa: PLC0415

        tokens = {"HS256": jwt.encode({"sub": "admin"}, secret, algorithm="HS256"),
                  "RS256": jwt.encode({"sub": "admin"}, load_der_private_key(private, None), algorithm="RS256")}
        auth = ["authenticationEnabled=true", "authenticationProviders=token,tls,basic",
                f"basicAuthConf={root / 'htpasswd'}", "authorizationEnabled=true",
                "superUserRoles=admin,bcrypt-user,apr1-user"]
        plain = Standalone(root / "plain", [*tls, "journalSyncData=false"]).start()
        secured_hs = Standalone(root / "secured", [*tls, *auth, f"tokenSecretKey=file://{root / 'secret.key'}"])
        try:
            report = {"machine": f"{platform.machine()}, {platform.python_implementation()} "
                                 f"{platform.python_version()}, shared with other jobs (figures vary run to run)",
                      "messages": count, "payload_bytes": len(PAYLOAD),
                      "throughput_median_of_passes": passes,
                      "throughput": throughput(plain, ca.pem, count, passes)}
            secured_hs.start()
            # RS256 tokens need the public-key broker: measure them on one of their own
            secured_rs = Standalone(root / "secured-rs", [*tls, *auth, f"tokenPublicKey=file://{root / 'public.key'}"])
            secured_rs.start()
            try:
                report["connection_setup"] = connection_costs(plain, secured_hs, secured_rs, ca, tokens, rounds)
            finally:
                secured_rs.stop()
            config = ServiceConfiguration()
            config.apply({"authenticationEnabled": "true", "authenticationProviders": "token,tls,basic",
                          "tokenPublicKey": f"file://{root / 'public.key'}", "basicAuthConf": str(root / "htpasswd"),
                          "brokerServicePortTls": "0", "tlsCertificateFilePath": str(server.cert),
                          "tlsKeyFilePath": str(server.key), "tlsTrustCertsFilePath": str(ca.pem)})
            rates = provider_rates(config, {
                "token RS256": Credentials("token", tokens["RS256"].encode()),
                "basic bcrypt (cost 5)": Credentials("basic", b"bcrypt-user:pw"),
                "basic apr1": Credentials("basic", b"apr1-user:pw"),
                "tls (certificate CN)": Credentials("tls", b"", {"subject": ((("commonName", "admin"),),)}),
            }, seconds)
            config.apply({"tokenPublicKey": "", "tokenSecretKey": f"file://{root / 'secret.key'}"})
            rates |= provider_rates(config, {"token HS256": Credentials("token", tokens["HS256"].encode())}, seconds)
            report["providers_alone"] = {"authentications_per_s": rates}
        finally:
            for broker in (plain, secured_hs):
                if broker.proc is not None:
                    broker.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
