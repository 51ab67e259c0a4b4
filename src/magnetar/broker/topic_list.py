"""A namespace's topic list as GET_TOPICS_OF_NAMESPACE answers it (Pulsar's TopicList).

- A `topics_pattern` from the client is matched against the topic name without
  its `domain://` scheme and without its `-partition-N` suffix, since the mode
  already chose the domain and clients subscribe to whole partitioned topics.
  The Java client sends the pattern without a scheme; one that has it anyway
  loses it here, so both spellings select the same topics.
- `topics_hash` is Pulsar's: CRC32C over the sorted names joined by ",", printed
  the way Guava prints a 32-bit hash (its four bytes, least significant first,
  as hex). A client that sends back the hash it holds learns "unchanged" and
  gets no names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import crc32c

from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

_SCHEME = "://"


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The client's pattern without its scheme; None when it is not a valid regex, and then
    the list goes back unfiltered (the official clients filter it again themselves)."""
    if _SCHEME in pattern:
        pattern = pattern.split(_SCHEME, 1)[1]
    try:
        return re.compile(pattern)
    except re.error:
        return None


def filter_topics(names: Iterable[str], regex: re.Pattern[str]) -> list[str]:
    selected = []
    for name in names:
        try:
            base = TopicName.parse(name).partitioned_topic_name
        except InvalidTopicNameError:
            continue
        if regex.fullmatch(f"{base.tenant}/{base.namespace}/{base.local_name}"):
            selected.append(name)
    return selected


def topics_hash(names: Iterable[str]) -> str:
    digest = crc32c.crc32c(",".join(sorted(names)).encode())
    return digest.to_bytes(4, "little").hex()
