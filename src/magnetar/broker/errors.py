"""Failures the broker reports: a Pulsar ServerError to clients, an HTTP status to admins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    import asyncio


class BrokerServiceError(Exception):
    """Carries the ServerError code the client maps to its own exception type.

    `http_status` is what Pulsar's admin API answers for the same failure, where the
    code alone does not say it (None: the admin API derives it from the code).
    """

    http_status: int | None = None

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{pb.ServerError.Name(self.code)}: {self.message}"


class InvalidPartitionCountError(BrokerServiceError):
    """A partition count outside what the broker allows."""

    http_status = 412

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)


class ResourceNotFoundError(BrokerServiceError):
    """A tenant, namespace or cluster that does not exist."""

    http_status = 404

    def __init__(self, message: str) -> None:
        super().__init__(pb.TopicNotFound, message)


class ResourceConflictError(BrokerServiceError):
    """Creating what exists, or deleting what still has contents."""

    http_status = 409

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)


class ResourceForbiddenError(BrokerServiceError):
    """A request naming what its scope may not use (a cluster a tenant is not allowed): 403, as in Pulsar."""

    http_status = 403

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)


class InvalidResourceError(BrokerServiceError):
    """A name or a body the admin API refuses (Precondition Failed, as in Pulsar)."""

    http_status = 412

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)


class TopicLoading(Exception):
    """The topic's managed ledger opens off the event loop (service/ledger_openings.py):
    handle the command again once `done` completes."""

    def __init__(self, done: asyncio.Future[object]) -> None:
        super().__init__("the topic is loading")
        self.done = done
