"""Payload compression exactly as the official C++ client frames it (wire-protocol.md §3).

Every decoder is told the uncompressed size up front (``MessageMetadata.uncompressed_size``)
and checks it against the caller's ``max_size`` before any output buffer exists: a size
field is attacker-controlled, and honouring it blindly would let one frame claim 4 GB.
The formats carry no length of their own (LZ4 block) or one we cross-check against the
metadata (zstd frame header, snappy varint) before decompressing.

Each codec's library is imported when a payload first needs it: the broker never opens
a payload on its publish and dispatch paths, and the three libraries cost a broker that
never compacts 2.4 MB of memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from functools import cache
from typing import TypeAlias

from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

Buffer: TypeAlias = bytes | bytearray | memoryview

ZSTD_LEVEL = 3
"""The C++ client calls ``ZSTD_compress(..., 3)``; same level, same frame."""


class CodecCounters:
    """Process-wide count of payload decompressions: lets a test (and the broker's debug
    stats) prove that a path which should read metadata only never opened a payload."""

    decompressions: int = 0


counters = CodecCounters()


def _lz4_compress(data: Buffer) -> bytes:
    import lz4.block  # noqa: PLC0415 (see the module's docstring)

    # LZ4_compress_default, no size prefix: the size travels in the metadata instead.
    return lz4.block.compress(data, mode="default", store_size=False)


def _lz4_decompress(data: Buffer, size: int) -> bytes:
    import lz4.block  # noqa: PLC0415 (see the module's docstring)

    return lz4.block.decompress(data, uncompressed_size=size)


def _zlib_decompress(data: Buffer, size: int) -> bytes:
    inflater = zlib.decompressobj()
    # max_length bounds the output, so a zlib bomb stops at size + 1 bytes.
    out = inflater.decompress(data, size + 1)
    if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise WireError("zlib stream is truncated or followed by extra bytes")
    return out


def _zstd_compress(data: Buffer) -> bytes:
    import zstandard  # noqa: PLC0415 (see the module's docstring)

    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)


def _zstd_decompress(data: Buffer, size: int) -> bytes:
    import zstandard  # noqa: PLC0415 (see the module's docstring)

    # A frame header may declare its own content size, and zstandard would allocate
    # that much regardless of max_output_size, so compare it with ours first.
    declared = zstandard.frame_content_size(data)
    if declared not in (-1, size):
        raise WireError(f"zstd frame declares {declared} bytes, metadata says {size}")
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=size, allow_extra_data=False)


def _snappy_compress(data: Buffer) -> bytes:
    import cramjam  # noqa: PLC0415 (see the module's docstring)

    return bytes(cramjam.snappy.compress_raw(data))


def _snappy_decompress(data: Buffer, size: int) -> bytes:
    import cramjam  # noqa: PLC0415 (see the module's docstring)

    # Raw snappy starts with a varint length that the library would allocate for.
    declared = cramjam.snappy.decompress_raw_len(data)
    if declared != size:
        raise WireError(f"snappy block declares {declared} bytes, metadata says {size}")
    return bytes(cramjam.snappy.decompress_raw(data))


_COMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    pb.NONE: bytes,
    pb.LZ4: _lz4_compress,
    pb.ZLIB: zlib.compress,
    pb.ZSTD: _zstd_compress,
    pb.SNAPPY: _snappy_compress,
}

_DECOMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    pb.NONE: lambda data, _size: bytes(data),
    pb.LZ4: _lz4_decompress,
    pb.ZLIB: _zlib_decompress,
    pb.ZSTD: _zstd_decompress,
    pb.SNAPPY: _snappy_decompress,
}

@cache
def _codec_errors() -> tuple[type[Exception], ...]:
    """Everything the libraries raise on corrupt input; anything else is a bug of ours.

    Asked only once a decoder has raised, so the libraries are imported on that path.
    """
    import cramjam  # noqa: PLC0415 (see the module's docstring)
    import lz4.block  # noqa: PLC0415
    import zstandard  # noqa: PLC0415

    return zlib.error, zstandard.ZstdError, cramjam.DecompressionError, lz4.block.LZ4BlockError, ValueError


def _codec_name(codec: int) -> str:
    return pb.CompressionType.Name(codec) if codec in _COMPRESSORS else str(codec)


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a whole (batch) payload the way the C++ producer does before sending it."""
    try:
        return _COMPRESSORS[codec](data)
    except KeyError:
        raise WireError(f"unknown compression type {codec}") from None


def decompress(codec: int, data: Buffer, uncompressed_size: int, *, max_size: int) -> bytes:
    """Undo ``compress``; ``uncompressed_size`` is trusted only after the ``max_size`` check.

    The output must be exactly ``uncompressed_size`` bytes: the C++ consumer decompresses
    into a buffer of that size and treats any other length as corruption.
    """
    decoder = _DECOMPRESSORS.get(codec)
    if decoder is None:
        raise WireError(f"unknown compression type {codec}")
    if not 0 <= uncompressed_size <= max_size:
        raise WireError(f"uncompressed size {uncompressed_size} is outside 0..{max_size}")
    if codec != pb.NONE:
        counters.decompressions += 1
    try:
        out = decoder(data, uncompressed_size)
    except WireError:
        raise
    except Exception as exc:
        if not isinstance(exc, _codec_errors()):
            raise
        raise WireError(f"corrupt {_codec_name(codec)} payload: {exc}") from exc
    if len(out) != uncompressed_size:
        name = _codec_name(codec)
        raise WireError(f"{name} payload decompressed to {len(out)} bytes, metadata says {uncompressed_size}")
    return out
