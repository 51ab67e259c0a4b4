from __future__ import annotations

import pytest
from certs import CertificateAuthority
from security_helpers import TokenSigner


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> tuple[CertificateAuthority, CertificateAuthority]:
    """The trusted CA, and a rogue one nobody trusts."""
    directory = tmp_path_factory.mktemp("pki")
    return CertificateAuthority(directory), CertificateAuthority(directory, "rogue-ca")


@pytest.fixture(scope="module")
def signer(tmp_path_factory) -> TokenSigner:
    """Keys and tokens for one module's broker."""
    return TokenSigner(tmp_path_factory.mktemp("keys"))
