"""Pulsar's byte formats as values: frames, commands, stored entries, batches, message ids.

At the bottom of magnetar's layers, and sans-IO: it never imports asyncio, sockets, threads
or any other magnetar package (not even magnetar.plugins, the one layer listed below it),
so the broker, both clients, the Spark source and storage's readers share one codec, and
every part of it is tested with bytes alone. Imports stay at the modules
(`magnetar.wire.frames`, ...): importing this package loads nothing. Enforced by
import-linter (pyproject.toml). See docs/wire.md.
"""
