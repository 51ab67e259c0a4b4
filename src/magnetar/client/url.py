"""Service URLs: `pulsar://host[:port][,host2[:port]...]` and `pulsar+ssl://...`.

Parsed once into the addresses to try, so the connection never looks at URL text. TLS URLs
parse (the scheme is kept) so that TLS can slot into the connection later without
reshaping callers; connecting to one raises until then.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from magnetar.client.errors import InvalidUrl

DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651}


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    url: str
    tls: bool
    hosts: tuple[tuple[str, int], ...]

    @property
    def first(self) -> tuple[str, int]:
        return self.hosts[0]


def parse_service_url(url: str) -> ServiceUrl:
    parts = urlsplit(url.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        raise InvalidUrl(f"{url!r} is not a Pulsar service URL (expected pulsar://host:port)")
    hosts = []
    for item in parts.netloc.split(","):
        host, sep, port = item.rpartition(":") if ":" in item.lstrip("[").split("]")[-1] else (item, "", "")
        if not sep:
            host, port = item, str(DEFAULT_PORTS[parts.scheme])
        if not port.isdigit():
            raise InvalidUrl(f"{url!r}: bad port {port!r}")
        hosts.append((host.strip("[]"), int(port)))
    return ServiceUrl(url.strip().rstrip("/"), parts.scheme == "pulsar+ssl", tuple(hosts))
