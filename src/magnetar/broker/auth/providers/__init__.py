"""The built-in authentication providers: tokens, TLS client certificates, basic (htpasswd)."""
