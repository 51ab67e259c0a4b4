"""End-to-end encryption as Pulsar's clients do it, byte for byte (docs/client.md, Encryption).

A producer encrypts each entry's payload (after compression; each chunk of a chunked message
on its own) with AES-256-GCM under a data key it makes itself and renews every four hours,
and puts that data key, wrapped under each named public key (RSA-OAEP with SHA-1, or
BouncyCastle's ECIES for EC keys, as the Java client), in `MessageMetadata.encryption_keys`,
with the 12-byte nonce in `encryption_param`. A consumer unwraps a data key with a private
key once and keeps it for the entries that follow. The broker never sees a key: keys and
properties stay in clear, so compaction, Key_Shared and entry filters work as before.

`key_reader` and `context` (the API: CryptoKeyReader, EncryptionContext) import nothing
heavy; `message_crypto`, `key_wrap` and `ecies` load `cryptography` and are imported only
by producers and consumers that encrypt or decrypt.
"""
