"""The one exception family the wire codec raises.

Everything that decodes untrusted bytes raises `WireError` (or a subclass), so a
caller at the I/O edge needs a single `except` to turn bad input into a protocol
error for that connection alone. Subclasses exist only where a caller must react
differently: a checksum mismatch is answered with ServerError.ChecksumError and
keeps the connection, an oversized frame is refused before it is buffered.
"""

from __future__ import annotations


class WireError(ValueError):
    """Bytes that are not valid Pulsar protocol data."""


class ChecksumError(WireError):
    """The CRC32C stored in an entry does not match its metadata and payload."""


class FrameTooLargeError(WireError):
    """A frame announces more bytes than the configured maximum frame size."""
