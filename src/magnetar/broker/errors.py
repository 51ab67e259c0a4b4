"""Failures the broker reports to a client as a Pulsar ServerError."""

from __future__ import annotations

from magnetar.wire.proto import pulsar_api_pb2 as pb


class BrokerServiceError(Exception):
    """Carries the ServerError code the client maps to its own exception type."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{pb.ServerError.Name(self.code)}: {self.message}"


class InvalidPartitionCountError(BrokerServiceError):
    """A partition count outside what the broker allows (412 on the admin API, as in Pulsar)."""

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)
