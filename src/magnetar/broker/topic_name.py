"""Topic names as Pulsar spells them, short forms included.

The official client always sends the full `persistent://tenant/ns/topic`
form, but users (and our CLI and admin API) write `my-topic` or
`tenant/ns/topic`; both expand exactly as Pulsar expands them.
"""

from __future__ import annotations

from dataclasses import dataclass

PARTITION_SUFFIX = "-partition-"


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
                    f"invalid short topic name {name!r}: use 'topic' or 'tenant/namespace/topic'"
                )
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise InvalidTopicNameError(f"invalid topic domain {domain!r} in {name!r}")
        parts = rest.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicNameError(f"invalid topic name {name!r}: expected {domain}://tenant/namespace/topic")
        return cls(domain, parts[0], parts[1], parts[2])

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
