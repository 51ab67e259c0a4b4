"""Credentials the broker issues to its own children: a function instance (and a `trigger`)
acts as the role that deployed the function, whatever authentication the broker's clients
use (token, TLS, basic), and no secret of the broker ever reaches the instance.

Pulsar's process runtime hands an instance the submitter's own token
(ClearTextFunctionTokenAuthProvider, token authentication only) and its Kubernetes runtime a
secret or service-account token; here the worker asks this registry for a random credential
mapped to the role, for as long as the instance's process lives. It is presented as a token
(the official client's AuthenticationToken, `Authorization: Bearer` over HTTP) whose text
starts with PREFIX, which no JWT can (':' is not in base64url), so it is told apart without
a configured token provider. Kept in memory only: a broker restart voids every one, so an
instance that outlived its broker cannot come back.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

PREFIX = b"magnetar-issued:"
METHOD = "token"


@dataclass(frozen=True, slots=True)
class Grant:
    role: str
    holder: str
    """Who holds it (`tenant/ns/name:instance`), for logs."""


class UnknownCredential(Exception):
    """Looks issued, is not (any longer)."""


class IssuedCredentials:
    def __init__(self) -> None:
        self._grants: dict[bytes, Grant] = {}

    def issue(self, role: str, holder: str) -> str:
        """A new credential acting as `role`; only its digest is kept."""
        secret = PREFIX + secrets.token_urlsafe(32).encode()
        self._grants[_digest(secret)] = Grant(role, holder)
        return secret.decode()

    def revoke(self, credential: str) -> None:
        self._grants.pop(_digest(credential.encode()), None)

    def __len__(self) -> int:
        return len(self._grants)

    def role(self, method: str, data: bytes) -> str | None:
        """The role of an issued credential; None when these are not one (they go to the
        configured providers); UnknownCredential for one revoked or never issued."""
        if method != METHOD or not data.startswith(PREFIX):
            return None
        grant = self._grants.get(_digest(data))
        if grant is None:
            raise UnknownCredential("a function instance credential that is revoked or was never issued "
                                    "(an instance that outlived its worker?)")
        return grant.role


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()
