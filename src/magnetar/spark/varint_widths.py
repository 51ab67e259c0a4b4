"""The width of varints, column-wise: what both of the source's and sink's numpy varint
writers (Avro's zig-zag values in `value_encoding`, MessageIdData's fields in
`pulsar_spark_rows`) need first, so that they can place every row's bytes at once."""

from __future__ import annotations

import numpy as np

_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def varint_widths(values: np.ndarray) -> np.ndarray:
    """Bytes of each unsigned 64-bit value's varint: one per started group of seven bits (1 to 10)."""
    return 1 + (values[:, None] >= _LIMITS[None, :]).sum(axis=1)
