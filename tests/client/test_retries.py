"""Errors say whether trying again may cure them (`retriable`), and the retry loop asks them."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import errors
from magnetar.client.aio.retries import retried
from magnetar.wire.proto import pulsar_api_pb2 as pb

#: What the official producer retries until its operation timeout (official-client-trace §10.1).
RETRIED_CODES = {pb.ServiceNotReady, pb.UnknownError, pb.MetadataError, pb.PersistenceError}


@pytest.mark.parametrize("code", pb.ServerError.values(), ids=pb.ServerError.keys())
def test_a_refusal_is_retriable_as_the_official_producer_retries_it(code):
    assert errors.server_error(code, "x").retriable == (code in RETRIED_CODES)


def test_the_client_s_own_failures_retriable_when_a_broker_coming_back_cures_them():
    retriable = {name for name in dir(errors) if isinstance(getattr(errors, name), type)
                 and issubclass(getattr(errors, name), errors.PulsarException)
                 and not issubclass(getattr(errors, name), errors.PulsarServerError)
                 and getattr(errors, name).retriable}
    assert retriable == {"Timeout", "LookupError", "ConnectError", "NotConnected"}


def _attempts(*failures: Exception):
    tries: list[int] = []

    async def attempt() -> str:
        tries.append(1)
        if len(tries) <= len(failures):
            raise failures[len(tries) - 1]
        return "done"

    return attempt, tries


def test_retried_goes_on_past_retriable_failures_and_stops_at_the_first_other():
    attempt, tries = _attempts(errors.ConnectError("down"), errors.server_error(pb.ServiceNotReady, "moving"))
    assert asyncio.run(retried(attempt, 5, "t")) == "done" and len(tries) == 3

    attempt, tries = _attempts(errors.ConnectError("down"), errors.server_error(pb.TopicNotFound, "gone"))
    with pytest.raises(errors.TopicNotFound):
        asyncio.run(retried(attempt, 5, "t"))
    assert len(tries) == 2


def test_retried_gives_up_with_a_timeout_naming_the_last_failure():
    attempt, _ = _attempts(*[errors.NotConnected("lost")] * 100)
    with pytest.raises(errors.Timeout, match="lookup of t: lost"):
        asyncio.run(retried(attempt, 0.25, "lookup of t"))
