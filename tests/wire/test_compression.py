from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Callable

import lz4.block
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.wire.compression import compress, decompress
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
by_codec = pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
DATA = b"the quick brown fox jumps over the lazy dog " * 40
MAX = 1 << 20


def peak_allocation_of_refusal(call: Callable[[], object], refusal: str) -> int:
    """Peak memory of `call`, which must raise the WireError matching `refusal`."""
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match=refusal):
            call()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@by_codec
def test_round_trip(codec: int) -> None:
    packed = compress(codec, DATA)
    assert decompress(codec, packed, len(DATA), max_size=MAX) == DATA
    assert decompress(codec, memoryview(packed), len(DATA), max_size=MAX) == DATA


@by_codec
def test_empty_payload(codec: int) -> None:
    assert decompress(codec, compress(codec, b""), 0, max_size=MAX) == b""


def test_formats_are_the_ones_the_cpp_client_writes() -> None:
    """Spec §3 / trace §4.3: raw LZ4 block, zlib with header, zstd frame, raw snappy."""
    assert compress(pb.LZ4, DATA) == lz4.block.compress(DATA, store_size=False)
    assert compress(pb.ZLIB, DATA)[:2] == b"\x78\x9c"
    assert zlib.decompress(compress(pb.ZLIB, DATA)) == DATA
    assert compress(pb.ZSTD, DATA)[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.frame_content_size(compress(pb.ZSTD, DATA)) == len(DATA)
    assert compress(pb.SNAPPY, DATA)[:2] == bytes([0xE0, 0x0D])  # varint 1760, no stream header


@pytest.mark.parametrize("codec", [5, -1, 99])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(WireError, match="unknown compression"):
        compress(codec, DATA)
    with pytest.raises(WireError, match="unknown compression"):
        decompress(codec, DATA, len(DATA), max_size=MAX)


@by_codec
def test_size_over_max_is_refused_before_allocating(codec: int) -> None:
    packed = compress(codec, DATA)
    with pytest.raises(WireError, match="outside"):
        decompress(codec, packed, len(DATA), max_size=len(DATA) - 1)
    # A size field claiming 4 GB must cost nothing.
    peak = peak_allocation_of_refusal(lambda: decompress(codec, packed, 0xFFFF_FFFF, max_size=5 << 20),
                                      r"uncompressed size 4294967295 is outside 0\.\.5242880")
    assert peak < 1 << 20


@by_codec
@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_uncompressed_size(codec: int, delta: int) -> None:
    with pytest.raises(WireError):
        decompress(codec, compress(codec, DATA), len(DATA) + delta, max_size=MAX)


@by_codec
def test_truncated(codec: int) -> None:
    with pytest.raises(WireError):
        decompress(codec, compress(codec, DATA)[:-3], len(DATA), max_size=MAX)


@pytest.mark.parametrize("codec", [pb.ZLIB, pb.ZSTD], ids=pb.CompressionType.Name)
def test_trailing_bytes_after_stream(codec: int) -> None:
    packed = compress(codec, DATA)
    with pytest.raises(WireError):
        decompress(codec, packed + packed, len(DATA), max_size=MAX)


def test_zstd_header_claiming_more_than_metadata_is_refused_before_decoding() -> None:
    big = compress(pb.ZSTD, bytes(MAX * 4))
    peak = peak_allocation_of_refusal(lambda: decompress(pb.ZSTD, big, 10, max_size=MAX),
                                      f"zstd frame declares {MAX * 4} bytes, metadata says 10")
    assert peak < MAX


def test_zstd_frame_without_content_size_is_bounded() -> None:
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert decompress(pb.ZSTD, unsized, len(DATA), max_size=MAX) == DATA
    with pytest.raises(WireError):
        decompress(pb.ZSTD, unsized, len(DATA) - 1, max_size=MAX)


def test_snappy_varint_must_match_metadata() -> None:
    with pytest.raises(WireError, match="declares"):
        decompress(pb.SNAPPY, b"\xff\xff\xff\xff\x0f", 10, max_size=MAX)


def test_zlib_bomb_stops_at_the_declared_size() -> None:
    bomb = zlib.compress(bytes(64 * MAX))
    peak = peak_allocation_of_refusal(lambda: decompress(pb.ZLIB, bomb, 1000, max_size=MAX),
                                      "zlib stream is truncated or followed by extra bytes")
    assert peak < MAX


@settings(max_examples=200)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=4096))
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data), len(data), max_size=len(data)) == data


@settings(max_examples=500)
@given(
    codec=st.sampled_from(CODECS),
    garbage=st.binary(max_size=512),
    size=st.one_of(st.integers(0, 4096), st.integers(-(2**32), 2**33)),
)
def test_garbage_raises_only_wire_error(codec: int, garbage: bytes, size: int) -> None:
    try:
        out = decompress(codec, garbage, size, max_size=1 << 16)
    except WireError:
        return
    assert len(out) == size
