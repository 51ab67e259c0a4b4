"""The addresses a broker tells clients to connect to, under Pulsar's keys.

`bindAddress` is where we listen; what LOOKUP answers is another matter. A wildcard
bind (0.0.0.0) is no address a client can dial, so by default the broker advertises
the host name instead. `advertisedListeners` names several addresses
(`internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650`), a client
picks one by its listener name, and `internalListenerName` (default: the first
listed) is the one given to clients that name none.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_SCHEMES = {"pulsar": "broker_service_url", "pulsar+ssl": "broker_service_url_tls"}


class ListenerConfigError(ValueError):
    """advertisedListeners / internalListenerName that no broker could answer with."""


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    name: str
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None


def parse_advertised_listeners(text: str) -> dict[str, AdvertisedListener]:
    """`name:url,name:url,...`; a name may carry one pulsar:// and one pulsar+ssl:// URL."""
    urls: dict[str, dict[str, str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or "/" in name:
            raise ListenerConfigError(f"advertisedListeners: {item!r} has no listener name (expected name:url)")
        parts = urlsplit(url)
        field = _SCHEMES.get(parts.scheme)
        if field is None:
            raise ListenerConfigError(f"advertisedListeners: {url!r} of listener {name!r} is not pulsar:// or "
                                      "pulsar+ssl://")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise ListenerConfigError(f"advertisedListeners: {url!r} of listener {name!r} needs a host and a port")
        fields = urls.setdefault(name, {})
        if field in fields:
            raise ListenerConfigError(f"advertisedListeners: listener {name!r} has more than one {parts.scheme}:// URL")
        fields[field] = url
    return {name: AdvertisedListener(name, **fields) for name, fields in urls.items()}


def internal_listener_name(listeners: dict[str, AdvertisedListener], configured: str) -> str | None:
    """The listener for clients that name none; it must be one of the listeners.

    Without advertisedListeners the name is accepted and names the one listener built
    from advertisedAddress and the ports, as in Pulsar: its standalone.conf ships
    `internalListenerName=internal` with no advertisedListeners.
    """
    if not listeners:
        return None
    if not configured:
        return next(iter(listeners))
    if configured not in listeners:
        raise ListenerConfigError(f"internalListenerName {configured!r} is not one of advertisedListeners "
                                  f"({', '.join(listeners)})")
    return configured


def default_advertised_address(advertised_address: str, bind_address: str) -> str:
    """advertisedAddress if set; else the bind address, unless that is a wildcard, which
    no client can dial: then the host name, as Pulsar advertises."""
    if advertised_address:
        return advertised_address
    if bind_address in _WILDCARDS:
        return socket.gethostname()
    return bind_address


class ListenerNotFoundError(LookupError):
    """A client asked for a listener name this broker does not have."""


class AdvertisedListeners:
    """What LOOKUP answers, per listener name, once the listening port is known."""

    def __init__(self, listeners: dict[str, AdvertisedListener], internal: str | None,
                 default: AdvertisedListener) -> None:
        self._listeners = listeners
        self._default = listeners[internal] if internal is not None else default

    def resolve(self, listener_name: str | None) -> AdvertisedListener:
        if not listener_name:
            return self._default
        listener = self._listeners.get(listener_name)
        if listener is None:
            # Pulsar's words; the C++ client matches on them to keep the connection open.
            raise ListenerNotFoundError(f"the broker do not have {listener_name} listener")
        return listener
