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


def _define(result: Result, base: type[PulsarException], *, retriable: bool = False) -> type[PulsarException]:
    """The exception class the official client names after `result`."""
    name = result.name
    cls = type(name, (base,), {"result": result, "retriable": retriable,
                               "__doc__": f"The official client's `{name}`."})
    cls.__module__ = __name__
    return cls


# The client's own failures; retriable: a broker that could not be reached or did not answer.
InvalidConfiguration = _define(Result.InvalidConfiguration, PulsarException)
Timeout = _define(Result.Timeout, PulsarException, retriable=True)
LookupError = _define(Result.LookupError, PulsarException, retriable=True)
ConnectError = _define(Result.ConnectError, PulsarException, retriable=True)
ReadError = _define(Result.ReadError, PulsarException)
NotConnected = _define(Result.NotConnected, PulsarException, retriable=True)
AlreadyClosed = _define(Result.AlreadyClosed, PulsarException)
InvalidMessage = _define(Result.InvalidMessage, PulsarException)
InvalidUrl = _define(Result.InvalidUrl, PulsarException)
OperationNotSupported = _define(Result.OperationNotSupported, PulsarException)
ProducerQueueIsFull = _define(Result.ProducerQueueIsFull, PulsarException)
MessageTooBig = _define(Result.MessageTooBig, PulsarException)
CumulativeAcknowledgementNotAllowedError = _define(Result.CumulativeAcknowledgementNotAllowedError, PulsarException)
Interrupted = _define(Result.Interrupted, PulsarException)
CryptoError = _define(Result.CryptoError, PulsarException)

# What brokers report, by ServerError; retriable: what the official producer retries until its
# operation timeout (ServiceNotReady, UnknownError, MetadataError, PersistenceError).
UnknownError = _define(Result.UnknownError, PulsarServerError, retriable=True)
BrokerMetadataError = _define(Result.BrokerMetadataError, PulsarServerError, retriable=True)
BrokerPersistenceError = _define(Result.BrokerPersistenceError, PulsarServerError, retriable=True)
AuthenticationError = _define(Result.AuthenticationError, PulsarServerError)
AuthorizationError = _define(Result.AuthorizationError, PulsarServerError)
ConsumerBusy = _define(Result.ConsumerBusy, PulsarServerError)
ServiceUnitNotReady = _define(Result.ServiceUnitNotReady, PulsarServerError, retriable=True)
ProducerBlockedQuotaExceededError = _define(Result.ProducerBlockedQuotaExceededError, PulsarServerError)
ProducerBlockedQuotaExceededException = _define(Result.ProducerBlockedQuotaExceededException, PulsarServerError)
ChecksumError = _define(Result.ChecksumError, PulsarServerError)
UnsupportedVersionError = _define(Result.UnsupportedVersionError, PulsarServerError)
TopicNotFound = _define(Result.TopicNotFound, PulsarServerError)
SubscriptionNotFound = _define(Result.SubscriptionNotFound, PulsarServerError)
ConsumerNotFound = _define(Result.ConsumerNotFound, PulsarServerError)
TooManyLookupRequestException = _define(Result.TooManyLookupRequestException, PulsarServerError)
TopicTerminated = _define(Result.TopicTerminated, PulsarServerError)
ProducerBusy = _define(Result.ProducerBusy, PulsarServerError)
InvalidTopicName = _define(Result.InvalidTopicName, PulsarServerError)
IncompatibleSchema = _define(Result.IncompatibleSchema, PulsarServerError)
ConsumerAssignError = _define(Result.ConsumerAssignError, PulsarServerError)
TransactionCoordinatorNotFoundError = _define(Result.TransactionCoordinatorNotFoundError, PulsarServerError)
InvalidTxnStatusError = _define(Result.InvalidTxnStatusError, PulsarServerError)
NotAllowedError = _define(Result.NotAllowedError, PulsarServerError)
TransactionConflict = _define(Result.TransactionConflict, PulsarServerError)
TransactionNotFound = _define(Result.TransactionNotFound, PulsarServerError)
ProducerFenced = _define(Result.ProducerFenced, PulsarServerError)

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
