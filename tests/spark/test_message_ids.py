"""`__messageId` bytes, built column-wise, equal protobuf's serialization of MessageIdData."""

from __future__ import annotations

import random

import numpy as np
import pytest
from seeds import fresh_seed

from magnetar.spark.pulsar_spark_rows import varint_messages
from magnetar.wire.proto import pulsar_api_pb2 as pb


def _number(rnd: random.Random) -> int:
    """Any varint width, edges included (0, 127/128 and 2**63 - 1 are the tricky ones)."""
    return rnd.choice([0, 127, 128, 2**63 - 1, rnd.randrange(2 ** rnd.randrange(1, 64))])


@pytest.mark.parametrize("seed", [1, 2, fresh_seed()])
def test_message_ids_equal_protobufs_serialization(seed: int) -> None:
    rnd = random.Random(seed)
    rows = 3000
    ledger, entry = (np.array([_number(rnd) for _ in range(rows)], np.int64) for _ in range(2))
    partition = np.array([rnd.choice([-1, 0, rnd.randrange(2**31)]) for _ in range(rows)], np.int64)
    batch_index = np.array([rnd.choice([-1, 0, 127, 128, rnd.randrange(2**31)]) for _ in range(rows)], np.int64)
    batch_size = np.array([rnd.choice([0, 1, rnd.randrange(2**31)]) for _ in range(rows)], np.int64)
    got = varint_messages([(1, ledger, None), (2, entry, None), (3, partition, partition >= 0),
                           (4, batch_index, batch_index >= 0), (6, batch_size, batch_size > 0)]).to_pylist()
    for i in range(rows):
        expected = pb.MessageIdData(ledgerId=int(ledger[i]), entryId=int(entry[i]))
        for name, column, present in (("partition", partition, partition[i] >= 0),
                                      ("batch_index", batch_index, batch_index[i] >= 0),
                                      ("batch_size", batch_size, batch_size[i] > 0)):
            if present:
                setattr(expected, name, int(column[i]))
        assert got[i] == expected.SerializeToString(), (seed, i)
