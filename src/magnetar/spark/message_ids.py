"""pulsar-spark's offsets: a message id per topic, and a time per topic, so its jobs' options carry over.

pulsar-spark writes `startingOffsets`/`endingOffsets` as JSON mapping each topic (a
partition's own name for a partitioned topic) to the bytes of a serialized MessageIdData, what
Java's `MessageId.toByteArray()` and the Python client's `MessageId.serialize()` give: a JSON
array of (signed) byte values. A base64 string of the same bytes is taken too, which is easier
to carry from Python. `MessageId.earliest` and `MessageId.latest` mean what they say.

This source's offsets are PIP-70 indexes, so a message id is looked up in its topic when the
query is planned: the entry at the id (or the first after it, when that one is gone) gives the
index. As in pulsar-spark, a starting id is inclusive (a user-given id is read) and an ending
id ends the read after the whole entry holding it.

`startingTime`/`endingTime` take pulsar-spark's JSON `{"topic": ms}` beside a single number.
"""

from __future__ import annotations

import base64
import binascii
import json

from magnetar.spark.offsets import EARLIEST_INDEX, LATEST_INDEX, OffsetSpec, TimeSpec
from magnetar.spark.option_errors import fail, topic_name_option
from magnetar.wire.message_id import EARLIEST, LATEST, MessageId


def is_message_id_json(parsed: dict[str, object]) -> bool:
    """Whether offsets JSON is pulsar-spark's (topic -> bytes) rather than this source's
    (topic -> {partition: index})."""
    return bool(parsed) and all(isinstance(v, (list, str)) for v in parsed.values())


def message_id_offsets(name: str, parsed: dict[str, object], allow_earliest: bool) -> OffsetSpec:
    """pulsar-spark's JSON of serialized message ids; a bad one is refused naming the option."""
    indexes: dict[tuple[str, int], int] = {}
    ids: dict[tuple[str, int], MessageId] = {}
    for topic, raw in parsed.items():
        message_id = _message_id(name, topic, raw)
        parsed_topic = topic_name_option(topic, name)
        if parsed_topic.partition_index >= 0:
            key = (str(parsed_topic.partitioned_topic_name), parsed_topic.partition_index)
        else:
            key = (str(parsed_topic), max(message_id.partition, -1))
        if message_id.position[:2] == EARLIEST.position[:2]:
            if not allow_earliest:
                fail(f"option {name!r}: {topic} cannot end at MessageId.earliest")
            indexes[key] = EARLIEST_INDEX
        elif message_id.position[:2] == LATEST.position[:2]:
            indexes[key] = LATEST_INDEX
        else:
            ids[key] = message_id
    return OffsetSpec(per_partition=indexes, message_ids=ids)


def _message_id(name: str, topic: str, raw: object) -> MessageId:
    try:
        if isinstance(raw, str):
            data = base64.b64decode(raw, validate=True)
        else:
            if not all(isinstance(b, int) and not isinstance(b, bool) and -128 <= b <= 255 for b in raw):  # type: ignore[union-attr]
                raise ValueError("not a list of byte values")
            data = bytes(b & 0xFF for b in raw)  # type: ignore[union-attr]
        return MessageId.deserialize(data)
    except (ValueError, binascii.Error) as exc:
        fail(f"option {name!r}: the message id of {topic} is not a serialized MessageIdData (a JSON array of "
             f"its bytes, as pulsar-spark writes it, or their base64): {exc}")


def time_spec(name: str, raw: str | None) -> TimeSpec:
    """A time in ms, or pulsar-spark's JSON `{"topic": ms}` (a partition's name for one partition)."""
    if raw is None:
        return TimeSpec()
    text = str(raw).strip()
    if not text.startswith("{"):
        try:
            every = int(text)
        except ValueError:
            fail(f"option {name!r} must be a time in ms or JSON {{\"topic\": ms}}, got {raw!r}")
        if every < 0:
            fail(f"option {name!r} must be >= 0, got {every}")
        return TimeSpec(every=every)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in parsed.values()):
        fail(f"option {name!r} must be a time in ms or JSON {{\"topic\": ms}} (ms >= 0), got {raw!r}")
    per_topic = []
    for topic, when in parsed.items():
        parsed_topic = topic_name_option(topic, name)
        if parsed_topic.partition_index >= 0:
            per_topic.append((str(parsed_topic.partitioned_topic_name), parsed_topic.partition_index, when))
        else:
            per_topic.append((str(parsed_topic), -1, when))
    return TimeSpec(per_topic=tuple(per_topic))
