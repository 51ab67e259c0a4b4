"""Kafka record batches decompress to a bound: never past it, whatever the codec and framing."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.formats import kafka_compression as codecs
from magnetar.formats.payload import CorruptPayloadError

CODECS = [codecs.CODEC_GZIP, codecs.CODEC_SNAPPY, codecs.CODEC_LZ4, codecs.CODEC_ZSTD]


def _xerial(data: bytes, block: int) -> bytes:
    """The snappy framing Kafka's Java client writes: magic, two versions, then sized blocks."""
    out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for start in range(0, len(data), block):
        compressed = bytes(cramjam.snappy.compress_raw(data[start : start + block]))
        out += [struct.pack(">i", len(compressed)), compressed]
    return b"".join(out)


#: Ways a producer may frame the same records: one gzip member or two, one lz4 or zstd frame or
#: two, raw snappy or xerial blocks.
FRAMINGS = {
    "gzip": (codecs.CODEC_GZIP, gzip.compress),
    "gzip, two members": (codecs.CODEC_GZIP, lambda d: gzip.compress(d[:7]) + gzip.compress(d[7:])),
    "snappy": (codecs.CODEC_SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    "snappy, xerial": (codecs.CODEC_SNAPPY, lambda d: _xerial(d, 1000)),
    "lz4": (codecs.CODEC_LZ4, lz4.frame.compress),
    "lz4, two frames": (codecs.CODEC_LZ4, lambda d: lz4.frame.compress(d[:7]) + lz4.frame.compress(d[7:])),
    "zstd": (codecs.CODEC_ZSTD, zstandard.ZstdCompressor().compress),
    "zstd, two frames": (codecs.CODEC_ZSTD, lambda d: zstandard.ZstdCompressor().compress(d[:7])
                         + zstandard.ZstdCompressor().compress(d[7:])),
}


@settings(max_examples=40, deadline=None)
@given(framing=st.sampled_from(sorted(FRAMINGS)), data=st.binary(min_size=8, max_size=5000),
       slack=st.integers(-3, 3))
def test_records_decompress_whole_up_to_the_bound_and_are_refused_past_it(framing, data, slack) -> None:
    codec, pack = FRAMINGS[framing]
    bound = max(0, len(data) + slack)
    if len(data) <= bound:
        assert codecs.decompress(codec, pack(data), bound) == data
    else:
        with pytest.raises(codecs.RecordsTooLarge):
            codecs.decompress(codec, pack(data), bound)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_of_zeros_is_refused_without_being_expanded(codec) -> None:
    """100 MB of zeros (kilobytes compressed, but for snappy) against a 1 MB bound: refused,
    and the memory it took stays near the bound, not near 100 MB."""
    bomb = codecs.compress(codec, bytes(100 * 1024 * 1024))
    tracemalloc.start()
    try:
        with pytest.raises(codecs.RecordsTooLarge, match="more than 1048576 bytes"):
            codecs.decompress(codec, bomb, 1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024 + len(bomb), f"{peak / 2**20:.0f} MiB held while refusing"


def test_a_raw_snappy_block_stating_a_huge_length_is_refused_before_it_is_decompressed(monkeypatch) -> None:
    def never(_data):
        raise AssertionError("decompressed although its stated length is over the bound")

    monkeypatch.setattr(cramjam.snappy, "decompress_raw", never)
    stated = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\0" * 16  # a varint of 1 GiB
    with pytest.raises(codecs.RecordsTooLarge):
        codecs.decompress(codecs.CODEC_SNAPPY, stated, 1024)


@pytest.mark.parametrize("codec", [codecs.CODEC_GZIP, codecs.CODEC_LZ4])
def test_a_truncated_stream_is_an_error_not_records(codec) -> None:
    whole = codecs.compress(codec, b"records " * 100)
    with pytest.raises((EOFError, CorruptPayloadError, RuntimeError, zlib.error)):
        codecs.decompress(codec, whole[: len(whole) // 2], 1 << 20)


def test_uncompressed_records_are_taken_as_they_are() -> None:
    assert codecs.decompress(codecs.CODEC_NONE, b"plain", 1 << 20) == b"plain"
