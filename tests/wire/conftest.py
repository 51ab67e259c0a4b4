"""Fixtures shared by the wire tests: the official-client recorder and its vectors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wire_recorder import Recorder, load_vectors, record, running_recorder


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A fresh stub broker on a free loopback port for one test."""
    with running_recorder() as stub:
        yield stub


@pytest.fixture(scope="session")
def live_vectors() -> dict[str, list[bytes]]:
    """SEND frames recorded now from the installed pulsar-client (once per session)."""
    with running_recorder() as stub:
        return record(stub)


@pytest.fixture(params=["checked_in", "live"])
def vectors(request: pytest.FixtureRequest) -> dict[str, list[bytes]]:
    """Both the bytes in tests/wire/vectors/ and a fresh recording, held to the same tests."""
    if request.param == "checked_in":
        return load_vectors()
    return request.getfixturevalue("live_vectors")
