"""Kafka's wire protocol as values: sans-IO, like magnetar.wire.

Frames (a 4-byte size then a request), request and response headers (v0-v2, flexible
versions with tagged fields), the message layouts of the APIs the handler implements
(generated from Kafka's JSON message definitions by the `kio` library) and record
batches v2 (validation, offsets, conversion to and from Pulsar batches).

May import: kio, magnetar.formats, magnetar.wire, the standard library. Never asyncio,
sockets or anything of magnetar above formats (an import-linter contract checks it).
"""
