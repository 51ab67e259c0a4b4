"""Basic authentication (Pulsar's AuthenticationProviderBasic): `user:password` checked
against an htpasswd file given by basicAuthConf (a path, file:// or data: URL, or base64
of the file). Entries may be bcrypt, apr1 (MD5) or crypt, as `htpasswd` writes them;
passlib checks them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from passlib.apache import HtpasswdFile

from magnetar.broker.auth.authentication import AuthenticationError, Credentials, Principal
from magnetar.broker.auth.tokens import KeyMaterialError, read_key_material

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration


class BasicAuthenticationProvider:
    auth_method_name = "basic"
    slow = True  # bcrypt is milliseconds by design: checked off the event loop

    def __init__(self, config: ServiceConfiguration) -> None:
        if not config.basicAuthConf:
            raise ValueError("the basic provider needs basicAuthConf (an htpasswd file)")
        try:
            content = read_key_material(config.basicAuthConf)
            self._users = HtpasswdFile.from_string(content)
        except (KeyMaterialError, ValueError) as exc:
            raise ValueError(f"basicAuthConf: {exc}") from None

    def authenticate(self, credentials: Credentials) -> Principal:
        user, sep, password = credentials.data.decode(errors="replace").partition(":")
        if not sep or not user:
            raise AuthenticationError("basic credentials must be user:password")
        try:
            valid = self._users.check_password(user, password)
        except ValueError:  # an entry in a hash format passlib cannot check
            valid = False
        if not valid:
            raise AuthenticationError(f"unknown user {user[:64]!r} or wrong password")
        return Principal(user, self.auth_method_name)
