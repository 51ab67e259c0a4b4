"""Token authentication (Pulsar's AuthenticationProviderToken): a JWT signed with
tokenSecretKey (HS256/384/512) or with the private half of tokenPublicKey
(tokenPublicAlg, RS256 by default, or ES256...), naming its role under tokenAuthClaim
("sub" by default). Expiry is honoured (with tokenAllowedClockSkewSeconds of leeway),
and the principal carries it, so connections can be asked for a fresh token in time.
With tokenAudienceClaim set, the token must list tokenAudience under that claim.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import jwt

from magnetar.broker.auth.authentication import AuthenticationError, Credentials, Principal
from magnetar.broker.auth.tokens import (
    ASYMMETRIC_ALGORITHMS,
    HMAC_ALGORITHMS,
    KeyMaterialError,
    load_public_key,
    read_key_material,
    secret_key,
)

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration

#: Longer tokens are refused before any decoding: no real token comes near, and a
#: client should not make the broker base64-decode megabytes per connection.
MAX_TOKEN_BYTES = 64 * 1024


class TokenAuthenticationProvider:
    auth_method_name = "token"

    def __init__(self, config: ServiceConfiguration) -> None:
        self._key, self._algorithms = _verification_key(config)
        self._key_setting = "tokenSecretKey" if config.tokenSecretKey else "tokenPublicKey"
        self._claim = config.tokenAuthClaim or "sub"
        self._audience_claim = config.tokenAudienceClaim
        self._audience = config.tokenAudience
        self._leeway = config.tokenAllowedClockSkewSeconds
        if self._audience_claim and not self._audience:
            raise ValueError("tokenAudienceClaim is set but tokenAudience is empty")

    def authenticate(self, credentials: Credentials) -> Principal:
        token = credentials.data
        if not token:
            raise AuthenticationError("no token was presented")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationError(f"the token is {len(token)} bytes, over the {MAX_TOKEN_BYTES} accepted")
        try:
            claims = jwt.decode(token, self._key, algorithms=self._algorithms, leeway=self._leeway,
                                options={"verify_aud": False})
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(self._refusal(exc, token)) from None
        self._check_audience(claims)
        role = claims.get(self._claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"the token has no {self._claim!r} claim naming a role")
        expiry = claims.get("exp")
        return Principal(role, self.auth_method_name, float(expiry) if isinstance(expiry, int | float) else None)

    def _refusal(self, error: jwt.InvalidTokenError, token: bytes) -> str:
        """What is wrong with the token, in words a client may read: PyJWT's messages ("The
        specified alg value is not allowed") say little, and none of the token's own content
        is repeated but its algorithm's name and its times."""
        if isinstance(error, jwt.ExpiredSignatureError | jwt.ImmatureSignatureError):  # signature checked first
            claims = jwt.decode(token, options={"verify_signature": False})
            if isinstance(error, jwt.ExpiredSignatureError):
                return f"the token has expired ({_instant(claims.get('exp'))})"
            return f"the token is not valid yet (valid from {_instant(claims.get('nbf'))})"
        accepted = f"this broker's {self._key_setting} ({', '.join(self._algorithms)})"
        if isinstance(error, jwt.InvalidAlgorithmError):
            algorithm = str(jwt.get_unverified_header(token).get("alg"))[:16]
            return f"invalid token: it is signed with {algorithm!r}, not with {accepted}: another key signed it"
        if isinstance(error, jwt.InvalidSignatureError):
            return f"invalid token: its signature does not verify with {accepted}: another key signed it"
        if isinstance(error, jwt.DecodeError):
            return "invalid token: not a JWT (header.payload.signature, each part base64url)"
        return f"invalid token ({type(error).__name__})"

    def _check_audience(self, claims: dict[str, Any]) -> None:
        if not self._audience_claim:
            return
        audiences = claims.get(self._audience_claim)
        listed = [audiences] if isinstance(audiences, str) else audiences if isinstance(audiences, list) else []
        if self._audience not in listed:
            raise AuthenticationError(f"the token's {self._audience_claim!r} claim does not name this broker's "
                                      "audience (tokenAudience)")


def _instant(epoch: object) -> str:
    """A JWT time claim as UTC, for a refusal."""
    if not isinstance(epoch, int | float):
        return "no time"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _verification_key(config: ServiceConfiguration) -> tuple[Any, list[str]]:
    """The key tokens are checked with, and the algorithms it accepts; ValueError names the key."""
    if config.tokenSecretKey and config.tokenPublicKey:
        raise ValueError("set tokenSecretKey or tokenPublicKey, not both")
    try:
        if config.tokenSecretKey:
            return secret_key(read_key_material(config.tokenSecretKey)), list(HMAC_ALGORITHMS)
        if config.tokenPublicKey:
            if config.tokenPublicAlg not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"tokenPublicAlg must be one of {', '.join(ASYMMETRIC_ALGORITHMS)}, "
                                 f"not {config.tokenPublicAlg!r}")
            return load_public_key(read_key_material(config.tokenPublicKey)), [config.tokenPublicAlg]
    except KeyMaterialError as exc:
        name = "tokenSecretKey" if config.tokenSecretKey else "tokenPublicKey"
        raise ValueError(f"{name}: {exc}") from None
    raise ValueError("the token provider needs tokenSecretKey or tokenPublicKey")
