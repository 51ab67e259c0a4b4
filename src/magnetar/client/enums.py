"""The official client's enums, with its member names and values.

`pulsar.CompressionType.ZLib` and friends are pybind11 enums; these are IntEnums with the
same names and numbers, so code that switches its import keeps working, and values of the
official enums (which convert with `int()`) are accepted wherever these are.
"""

from __future__ import annotations

from enum import IntEnum


class CompressionType(IntEnum):
    """Payload codecs; the numbers are MessageMetadata.compression's."""

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


class ConsumerType(IntEnum):
    """Subscription types; the numbers are CommandSubscribe.SubType's."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class InitialPosition(IntEnum):
    Latest = 0
    Earliest = 1


class BatchingType(IntEnum):
    """Default: one batch in send order. KeyBased: one batch per key, for Key_Shared consumers."""

    Default = 0
    KeyBased = 1


class PartitionsRoutingMode(IntEnum):
    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class ProducerAccessMode(IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class KeySharedMode(IntEnum):
    AutoSplit = 0
    Sticky = 1


class RegexSubscriptionMode(IntEnum):
    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class ConsumerCryptoFailureAction(IntEnum):
    """What a consumer does with a message it cannot decrypt (no key reader, or no key opens it)."""

    FAIL = 0
    """Leave it unacknowledged and undelivered (the unacked-message timeout brings it back)."""
    DISCARD = 1
    """Acknowledge it away (validation error DecryptionError), undelivered."""
    CONSUME = 2
    """Deliver it as stored (still compressed, a batch as one message) with its encryption context."""


class Result(IntEnum):
    """What `send_async` callbacks receive, as `pulsar.Result`."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45
