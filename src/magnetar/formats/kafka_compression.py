"""The codecs of Kafka record batches, decompressing to a bound.

A batch's size limit (maxMessageSize) is on its compressed bytes, so a small batch of a
hostile producer can hold gigabytes of zeros: every decompression here stops one byte past
`max_size` and refuses the batch (RecordsTooLarge), never holding more than that in memory.
Codecs as Kafka writes them: gzip members, raw snappy or the xerial framing of Kafka's Java
client, lz4 frames, zstd frames.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable
from typing import Any

from magnetar.formats.payload import CorruptPayloadError

KAFKA_FORMAT = "kafka"
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4",
               CODEC_ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_BLOCK = 1 << 20


class RecordsTooLarge(CorruptPayloadError):
    """A batch whose records decompress past the bound (Kafka's MESSAGE_TOO_LARGE)."""


def decompress(codec: int, data: bytes, max_size: int) -> bytes:
    """The records `data` holds compressed with `codec`, at most `max_size` bytes of them."""
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        out = _gzip(data, max_size)
    elif codec == CODEC_SNAPPY:
        out = _snappy(data, max_size)
    elif codec == CODEC_LZ4:
        out = _lz4(data, max_size)
    elif codec == CODEC_ZSTD:
        out = _zstd(data, max_size)
    else:
        raise CorruptPayloadError(KAFKA_FORMAT, f"unknown compression codec {codec}")
    if len(out) > max_size:
        raise _too_large(codec, max_size)
    return out


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return gzip.compress(data)
    if codec == CODEC_SNAPPY:
        import cramjam  # noqa: PLC0415

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        import lz4.frame  # noqa: PLC0415

        return lz4.frame.compress(data)
    if codec == CODEC_ZSTD:
        import zstandard  # noqa: PLC0415

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown Kafka compression codec {codec}")


def _too_large(codec: int, max_size: int) -> RecordsTooLarge:
    return RecordsTooLarge(KAFKA_FORMAT, f"{CODEC_NAMES[codec]} records decompress to more than {max_size} bytes "
                                         "(maxMessageSize)")


def _gzip(data: bytes, max_size: int) -> bytes:
    return _frame_by_frame(data, max_size, lambda: zlib.decompressobj(wbits=31), "a gzip member")


def _frame_by_frame(data: bytes, max_size: int, start: Callable[[], Any], what: str) -> bytes:
    """Frames one after another (gzip members, lz4 frames), as their codecs' own readers take
    them, each asked for no more than what is left of the bound plus one byte: a frame that
    gives less has given everything it holds."""
    out = bytearray()
    rest = data
    while rest:
        frame = start()
        out += frame.decompress(rest, max_size + 1 - len(out))
        if len(out) > max_size:
            break
        if not frame.eof:
            raise EOFError(f"{what} ends before its end mark")
        rest = frame.unused_data
    return bytes(out)


def _snappy(data: bytes, max_size: int) -> bytes:
    """Raw snappy states its decompressed length up front (a varint): checked before decompressing."""
    import cramjam  # noqa: PLC0415

    if data[:8] != _XERIAL_MAGIC:
        if _snappy_length(data) > max_size:
            raise _too_large(CODEC_SNAPPY, max_size)
        return bytes(cramjam.snappy.decompress_raw(data))
    out, total, offset = [], 0, _XERIAL_HEADER
    while offset < len(data):
        (size,) = struct.unpack_from(">i", data, offset)
        block = data[offset + 4 : offset + 4 + size]
        total += _snappy_length(block)
        if total > max_size:
            raise _too_large(CODEC_SNAPPY, max_size)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        offset += 4 + size
    return b"".join(out)


def _snappy_length(block: bytes) -> int:
    length = shift = 0
    for index in range(min(len(block), 5)):
        byte = block[index]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    raise ValueError("a snappy block without its length")


def _lz4(data: bytes, max_size: int) -> bytes:
    import lz4.frame  # noqa: PLC0415

    return _frame_by_frame(data, max_size, lz4.frame.LZ4FrameDecompressor, "an lz4 frame")


def _zstd(data: bytes, max_size: int) -> bytes:
    import zstandard  # noqa: PLC0415

    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    out = bytearray()
    while len(out) <= max_size:
        chunk = reader.read(min(_BLOCK, max_size + 1 - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)
