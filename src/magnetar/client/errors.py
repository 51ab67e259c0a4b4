"""Exceptions named as the official client names them, mapped from the broker's ServerError.

`pulsar.Timeout`, `pulsar.TopicNotFound`, ... are what Python users already catch; the
classes here carry the same names so `except Timeout` reads the same after switching the
import. Every exception knows its `Result` (what a `send_async` callback receives instead
of an exception), and a refusal from the broker also keeps the ServerError `code`.
"""

from __future__ import annotations

from magnetar.client.enums import Result
from magnetar.wire.frames import command_body
from magnetar.wire.proto import pulsar_api_pb2 as pb


class PulsarException(Exception):
    """Anything that went wrong in the client or that the broker refused."""

    result: Result = Result.UnknownError
    code: int | None = None
    """The broker's ServerError when the broker refused the request."""
    retriable: bool = False
    """Whether trying again (after a new lookup, with backoff) may succeed: a broker coming back
    or taking the topic over would cure it. The retry loop (aio.retries) asks the error."""


class PulsarServerError(PulsarException):
    """Errors a broker reports (they may also be raised locally for the same cause)."""

    def __init__(self, message: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def _define(name: str, result: Result, base: type[PulsarException], *, retriable: bool = False
            ) -> type[PulsarException]:
    cls = type(name, (base,), {"result": result, "retriable": retriable,
                               "__doc__": f"The official client's `{name}`."})
    cls.__module__ = __name__
    return cls


# The client's own failures; retriable: a broker that could not be reached or did not answer.
InvalidConfiguration = _define("InvalidConfiguration", Result.InvalidConfiguration, PulsarException)
Timeout = _define("Timeout", Result.Timeout, PulsarException, retriable=True)
LookupError = _define("LookupError", Result.LookupError, PulsarException, retriable=True)
ConnectError = _define("ConnectError", Result.ConnectError, PulsarException, retriable=True)
ReadError = _define("ReadError", Result.ReadError, PulsarException)
NotConnected = _define("NotConnected", Result.NotConnected, PulsarException, retriable=True)
AlreadyClosed = _define("AlreadyClosed", Result.AlreadyClosed, PulsarException)
InvalidMessage = _define("InvalidMessage", Result.InvalidMessage, PulsarException)
InvalidUrl = _define("InvalidUrl", Result.InvalidUrl, PulsarException)
OperationNotSupported = _define("OperationNotSupported", Result.OperationNotSupported, PulsarException)
ProducerQueueIsFull = _define("ProducerQueueIsFull", Result.ProducerQueueIsFull, PulsarException)
MessageTooBig = _define("MessageTooBig", Result.MessageTooBig, PulsarException)
CumulativeAcknowledgementNotAllowedError = _define(
    "CumulativeAcknowledgementNotAllowedError", Result.CumulativeAcknowledgementNotAllowedError, PulsarException
)
Interrupted = _define("Interrupted", Result.Interrupted, PulsarException)
CryptoError = _define("CryptoError", Result.CryptoError, PulsarException)

# What brokers report, by ServerError; retriable: what the official producer retries until its
# operation timeout (ServiceNotReady, UnknownError, MetadataError, PersistenceError).
UnknownError = _define("UnknownError", Result.UnknownError, PulsarServerError, retriable=True)
BrokerMetadataError = _define("BrokerMetadataError", Result.BrokerMetadataError, PulsarServerError, retriable=True)
BrokerPersistenceError = _define("BrokerPersistenceError", Result.BrokerPersistenceError, PulsarServerError,
                                 retriable=True)
AuthenticationError = _define("AuthenticationError", Result.AuthenticationError, PulsarServerError)
AuthorizationError = _define("AuthorizationError", Result.AuthorizationError, PulsarServerError)
ConsumerBusy = _define("ConsumerBusy", Result.ConsumerBusy, PulsarServerError)
ServiceUnitNotReady = _define("ServiceUnitNotReady", Result.ServiceUnitNotReady, PulsarServerError, retriable=True)
ProducerBlockedQuotaExceededError = _define(
    "ProducerBlockedQuotaExceededError", Result.ProducerBlockedQuotaExceededError, PulsarServerError
)
ProducerBlockedQuotaExceededException = _define(
    "ProducerBlockedQuotaExceededException", Result.ProducerBlockedQuotaExceededException, PulsarServerError
)
ChecksumError = _define("ChecksumError", Result.ChecksumError, PulsarServerError)
UnsupportedVersionError = _define("UnsupportedVersionError", Result.UnsupportedVersionError, PulsarServerError)
TopicNotFound = _define("TopicNotFound", Result.TopicNotFound, PulsarServerError)
SubscriptionNotFound = _define("SubscriptionNotFound", Result.SubscriptionNotFound, PulsarServerError)
ConsumerNotFound = _define("ConsumerNotFound", Result.ConsumerNotFound, PulsarServerError)
TooManyLookupRequestException = _define(
    "TooManyLookupRequestException", Result.TooManyLookupRequestException, PulsarServerError
)
TopicTerminated = _define("TopicTerminated", Result.TopicTerminated, PulsarServerError)
ProducerBusy = _define("ProducerBusy", Result.ProducerBusy, PulsarServerError)
InvalidTopicName = _define("InvalidTopicName", Result.InvalidTopicName, PulsarServerError)
IncompatibleSchema = _define("IncompatibleSchema", Result.IncompatibleSchema, PulsarServerError)
ConsumerAssignError = _define("ConsumerAssignError", Result.ConsumerAssignError, PulsarServerError)
TransactionCoordinatorNotFoundError = _define(
    "TransactionCoordinatorNotFoundError", Result.TransactionCoordinatorNotFoundError, PulsarServerError
)
InvalidTxnStatusError = _define("InvalidTxnStatusError", Result.InvalidTxnStatusError, PulsarServerError)
NotAllowedError = _define("NotAllowedError", Result.NotAllowedError, PulsarServerError)
TransactionConflict = _define("TransactionConflict", Result.TransactionConflict, PulsarServerError)
TransactionNotFound = _define("TransactionNotFound", Result.TransactionNotFound, PulsarServerError)
ProducerFenced = _define("ProducerFenced", Result.ProducerFenced, PulsarServerError)

_BY_SERVER_ERROR: dict[int, type[PulsarException]] = {
    pb.UnknownError: UnknownError,
    pb.MetadataError: BrokerMetadataError,
    pb.PersistenceError: BrokerPersistenceError,
    pb.AuthenticationError: AuthenticationError,
    pb.AuthorizationError: AuthorizationError,
    pb.ConsumerBusy: ConsumerBusy,
    pb.ServiceNotReady: ServiceUnitNotReady,
    pb.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    pb.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    pb.ChecksumError: ChecksumError,
    pb.UnsupportedVersionError: UnsupportedVersionError,
    pb.TopicNotFound: TopicNotFound,
    pb.SubscriptionNotFound: SubscriptionNotFound,
    pb.ConsumerNotFound: ConsumerNotFound,
    pb.TooManyRequests: TooManyLookupRequestException,
    pb.TopicTerminatedError: TopicTerminated,
    pb.ProducerBusy: ProducerBusy,
    pb.InvalidTopicName: InvalidTopicName,
    pb.IncompatibleSchema: IncompatibleSchema,
    pb.ConsumerAssignError: ConsumerAssignError,
    pb.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    pb.InvalidTxnStatus: InvalidTxnStatusError,
    pb.NotAllowedError: NotAllowedError,
    pb.TransactionConflict: TransactionConflict,
    pb.TransactionNotFound: TransactionNotFound,
    pb.ProducerFenced: ProducerFenced,
}

def server_error(code: int, message: str) -> PulsarException:
    """The exception for a ServerError the broker sent; its message starts with the code's name."""
    cls = _BY_SERVER_ERROR.get(code, UnknownError)
    name = pb.ServerError.Name(code) if code in pb.ServerError.values() else str(code)
    exc = cls(f"{name}: {message}")
    exc.code = code
    return exc


def refusal_of(cmd: pb.BaseCommand) -> PulsarException | None:
    """The error a response carries, whichever of Pulsar's shapes it uses (None: success)."""
    body = command_body(cmd)
    if cmd.type == pb.BaseCommand.ERROR:
        return server_error(body.error, body.message)
    if body is None:
        return None
    for code_field, message_field in (("error", "message"), ("error_code", "error_message")):
        if code_field in body.DESCRIPTOR.fields_by_name and body.HasField(code_field):
            return server_error(getattr(body, code_field), getattr(body, message_field))
    response = getattr(body, "response", None)
    if cmd.type in (pb.BaseCommand.LOOKUP_RESPONSE, pb.BaseCommand.PARTITIONED_METADATA_RESPONSE) and (
        not body.HasField("response") or response == body.Failed
    ):
        return LookupError(f"{pb.BaseCommand.Type.Name(cmd.type)} failed without an error code")
    return None


def exception_for(result: Result, message: str = "") -> PulsarException:
    """An exception of the class named like `result` (for callbacks turned into futures)."""
    cls = globals().get(result.name)
    if not (isinstance(cls, type) and issubclass(cls, PulsarException)):
        cls = UnknownError
    return cls(message or result.name)
