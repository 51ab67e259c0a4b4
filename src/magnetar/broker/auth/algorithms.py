"""The token signature algorithms, by name: a module of its own so that the CLI can offer
them without loading PyJWT and cryptography."""

HMAC_ALGORITHMS = {"HS256": 32, "HS384": 48, "HS512": 64}
"""Secret-key algorithms and the key size `create-secret-key` makes for each (bytes)."""
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
