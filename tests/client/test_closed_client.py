"""Calls on what a closed client made: AlreadyClosed from both clients (magnetar.client's facade
once let its closed event loop's RuntimeError through, on asyncio's loop and uvloop alike)."""

from __future__ import annotations

from polling import wait_for


def _outcome(call) -> str:
    try:
        call()
    except Exception as error:
        return type(error).__name__
    return "returned"


def test_a_closed_clients_producers_and_client_answer_already_closed(api, topic) -> None:
    client = api.client()
    producer = client.create_producer(topic)
    producer.send(b"before")
    client.close()
    results: list = []
    producer.send_async(b"async", lambda result, _message_id: results.append(result))
    calls = {"send": lambda: producer.send(b"after"), "flush": producer.flush,
             "create_producer": lambda: client.create_producer(topic),
             "subscribe": lambda: client.subscribe(topic, "late"), "producer close": producer.close}
    assert {name: _outcome(call) for name, call in calls.items()} == dict.fromkeys(calls, "AlreadyClosed")
    assert wait_for(lambda: results), "send_async's callback never ran"
    assert results == [api.module.Result.AlreadyClosed]
