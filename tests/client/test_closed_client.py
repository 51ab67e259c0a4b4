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
    producer.send_async(b"async", lambda result, message_id: results.append((result, _id_parts(message_id))))
    calls = {"send": lambda: producer.send(b"after"), "flush": producer.flush,
             "create_producer": lambda: client.create_producer(topic),
             "subscribe": lambda: client.subscribe(topic, "late"), "producer close": producer.close}
    assert {name: _outcome(call) for name, call in calls.items()} == dict.fromkeys(calls, "AlreadyClosed")
    assert wait_for(lambda: results), "send_async's callback never ran"
    assert results == [(api.module.Result.AlreadyClosed, (-1, -1, -1, -1))]


def _id_parts(message_id) -> tuple[int, int, int, int]:
    return message_id.partition(), message_id.ledger_id(), message_id.entry_id(), message_id.batch_index()


def test_a_closed_producer_refuses_a_flush_and_names_no_message_in_its_callback(api, topic) -> None:
    """The official client raises AlreadyClosed from flush() on a closed producer (a quiet
    return would read as "everything was delivered") and calls a refused send_async back with
    the id of no message, (-1,-1,-1,-1), never None: a callback reading its parts must not fail."""
    client = api.client()
    try:
        producer = client.create_producer(topic)
        producer.close()
        assert _outcome(producer.flush) == "AlreadyClosed"
        answers: list = []
        producer.send_async(b"late", lambda result, message_id: answers.append((result, _id_parts(message_id))))
        assert wait_for(lambda: answers), "send_async's callback never ran"
        assert answers == [(api.module.Result.AlreadyClosed, (-1, -1, -1, -1))]
    finally:
        client.close()
