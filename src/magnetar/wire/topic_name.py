"""Topic names as Pulsar spells them, short forms included.

The official client always sends the full `persistent://tenant/ns/topic`
form, but users (and our CLI and admin API) write `my-topic` or
`tenant/ns/topic`; both expand exactly as Pulsar expands them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

PARTITION_SUFFIX = "-partition-"
#: Pulsar's rule for tenant and namespace names (NamedEntity): letters, digits, _ - = : .
_NAMED_ENTITY = re.compile(r"[-=:.\w]+", re.ASCII)
#: Pulsar sets no length limit; ours keep names printable in logs, keys and metrics. For the
#: same reason a topic's local name holds nothing that does not show as itself (`_hidden`);
#: Pulsar accepts those, and everything visible is accepted as Pulsar accepts it.
MAX_ENTITY_NAME_LENGTH = 255
MAX_LOCAL_NAME_LENGTH = 512
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class InvalidTopicNameError(ValueError):
    """A topic name Pulsar would refuse (answered with ServerError.InvalidTopicName)."""


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                name = f"persistent://public/default/{name}"
            elif len(parts) == 3:
                name = f"persistent://{name}"
            else:
                raise InvalidTopicNameError(
                    f"invalid short topic name {_shown(name)}: use 'topic' or 'tenant/namespace/topic'"
                )
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise InvalidTopicNameError(f"invalid topic domain {_shown(domain)} in {_shown(name)}")
        parts = rest.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicNameError(f"invalid topic name {_shown(name)}: expected {domain}://tenant/namespace/topic")
        tenant, namespace, local_name = parts
        check_entity_name("tenant", tenant)
        check_entity_name("namespace", namespace)
        _check_local_name(local_name)
        return cls(domain, tenant, namespace, local_name)

    @classmethod
    def from_storage_name(cls, storage_name: str) -> TopicName:
        """Inverse of `storage_name`."""
        tenant, namespace, domain, local_name = storage_name.split("/", 3)
        return cls(domain, tenant, namespace, local_name)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partition_index(self) -> int:
        """The partition this name denotes, -1 for a whole or non-partitioned topic."""
        base, sep, number = self.local_name.rpartition(PARTITION_SUFFIX)
        if sep and base and number.isdigit():
            return int(number)
        return -1

    @property
    def partitioned_topic_name(self) -> TopicName:
        """The name without its `-partition-N` suffix."""
        if self.partition_index < 0:
            return self
        base = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    @property
    def storage_name(self) -> str:
        """The managed-ledger name, laid out like Pulsar's `tenant/ns/persistent/topic`."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.local_name}"


def check_entity_name(kind: str, name: str) -> None:
    """Tenant and namespace names as Pulsar allows them, minus '.' and '..'."""
    if len(name) > MAX_ENTITY_NAME_LENGTH:
        raise InvalidTopicNameError(f"{kind} name of {len(name)} characters exceeds {MAX_ENTITY_NAME_LENGTH}")
    if not _NAMED_ENTITY.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicNameError(f"invalid {kind} name {_shown(name)}: use letters, digits and _ - = : .")


def _check_local_name(name: str) -> None:
    if len(name) > MAX_LOCAL_NAME_LENGTH:
        raise InvalidTopicNameError(f"topic name of {len(name)} characters exceeds {MAX_LOCAL_NAME_LENGTH}")
    if "/" in name or name in (".", ".."):
        raise InvalidTopicNameError(f"invalid topic name {_shown(name)}: no '/', '.' or '..'")
    hidden = next((c for c in name if _hidden(c)), None)
    if hidden is not None:
        raise InvalidTopicNameError(
            f"invalid topic name {_shown(name)}: it holds U+{ord(hidden):04X} ({unicodedata.name(hidden, 'unnamed')}); "
            f"control, invisible and direction-changing characters would make one name look like another")


def _hidden(char: str) -> bool:
    """A character that does not show as itself: controls, format characters (bidi overrides
    like U+202E, zero-width spaces, joiners, BOM), line and paragraph separators, surrogates,
    and spaces other than ' ' (a no-break space looks like one)."""
    category = unicodedata.category(char)
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " ")


def _shown(name: str) -> str:
    """A name quoted for an error message, cut so that a huge one cannot flood a log."""
    return repr(name if len(name) <= 100 else name[:100] + "...")
