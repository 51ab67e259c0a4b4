"""A namespace's topic list as GET_TOPICS_OF_NAMESPACE answers it (Pulsar's TopicList).

- A `topics_pattern` from the client is matched against the topic name without
  its `domain://` scheme and without its `-partition-N` suffix, since the mode
  already chose the domain and clients subscribe to whole partitioned topics.
  The Java client sends the pattern without a scheme; one that has it anyway
  loses it here, so both spellings select the same topics.
- Patterns are a user's input, so they run on RE2 (google-re2), in time linear in the
  name, as Pulsar's broker runs them on RE2J. Pulsar falls back to Java's backtracking
  engine for what RE2 cannot express (back-references, look-around); magnetar does not
  evaluate those at all: like a pattern longer than `subscriptionPatternMaxLength`
  characters (Pulsar's rule) or any pattern with
  `enableBrokerSideSubscriptionPatternEvaluation=false`, they get the whole list,
  marked unfiltered, and the client filters it, as Pulsar's clients do. No user's
  pattern ever runs a backtracking engine in the broker.
- `topics_hash` is Pulsar's: CRC32C over the sorted names joined by ",", printed
  the way Guava prints a 32-bit hash (its four bytes, least significant first,
  as hex). A client that sends back the hash it holds learns "unchanged" and
  gets no names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from magnetar.wire.checksum import crc32c
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration

log = logging.getLogger(__name__)
_SCHEME = "://"


class TopicsPattern(Protocol):
    def fullmatch(self, text: str) -> object: ...


def compile_pattern(pattern: str) -> TopicsPattern | None:
    """The client's pattern without its scheme, compiled by RE2; None when RE2 cannot
    compile it (bad syntax, back-references, look-around, too large a program)."""
    import re2  # noqa: PLC0415 (only a broker that is sent patterns needs it)

    if _SCHEME in pattern:
        pattern = pattern.split(_SCHEME, 1)[1]
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is not the broker's error to print
    options.never_capture = True
    try:
        return re2.compile(pattern, options)  # type: ignore[no-any-return]
    except re2.error:
        return None


def broker_side_pattern(pattern: str, config: ServiceConfiguration) -> TopicsPattern | None:
    """What the broker filters a GET_TOPICS_OF_NAMESPACE by; None (no pattern, or one it
    does not evaluate): it answers the whole list, unfiltered (see the module docstring)."""
    if not pattern or not config.enableBrokerSideSubscriptionPatternEvaluation:
        return None
    if len(pattern) > config.subscriptionPatternMaxLength:
        log.info("topics pattern of %d characters, longer than subscriptionPatternMaxLength (%d), not evaluated",
                 len(pattern), config.subscriptionPatternMaxLength)
        return None
    return compile_pattern(pattern)


def filter_topics(names: Iterable[str], regex: TopicsPattern) -> list[str]:
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
    digest = crc32c(",".join(sorted(names)).encode())
    return digest.to_bytes(4, "little").hex()
