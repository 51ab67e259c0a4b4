"""Remote clusters that misbehave: one that takes the replicator's producer and then never
reads (the local broker holds a bounded amount for it, keeps serving its own clients, and the
cursor keeps the backlog), one that answers with receipts for what it was not sent."""

from __future__ import annotations

import contextlib
import random
import socket
import threading

from polling import wait_for
from procfs import rss_kb
from standalone import Standalone

from magnetar.admin_client import AdminClient
from magnetar.wire.frames import FrameDecoder, encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
ENTRY = 200 * 1024
ENTRIES = 400  # 80 MB for a remote that reads none of it


class SilentRemote:
    """Answers CONNECT, LOOKUP and PRODUCER like a broker, then stops reading its sockets
    (`lying`: reads on, and answers every SEND with a receipt for the next sequence id)."""

    def __init__(self, *, lying: bool = False, mute: bool = False) -> None:
        self.lying = lying
        self.mute = mute
        """Reads on and answers no PRODUCER: a remote slow to make the producer."""
        self.sends = 0
        self.commands: list[int] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"pulsar://127.0.0.1:{self.server.getsockname()[1]}"
        self.producing = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            self.sockets.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the broker hung up, or the test closed us
            self._converse(sock)

    def _converse(self, sock: socket.socket) -> None:
        decoder = FrameDecoder(64 << 20)
        while self.lying or self.mute or not self.producing.is_set():
            data = sock.recv(65536)
            if not data:
                return
            for frame in decoder.feed(data):
                self.commands.append(frame.command.type)
                answer = self._answer(frame.command)
                if answer is not None:
                    sock.sendall(encode_command(answer))
        # from here on nothing is read: the replicator's SENDs pile up in front of this socket

    def _answer(self, cmd: pb.BaseCommand) -> pb.BaseCommand | None:
        if cmd.type == T.CONNECT:
            return T(type=T.CONNECTED, connected=pb.CommandConnected(server_version="silent", protocol_version=20))
        if cmd.type == T.LOOKUP:
            return T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(
                request_id=cmd.lookupTopic.request_id, brokerServiceUrl=self.url,
                response=pb.CommandLookupTopicResponse.Connect, authoritative=True))
        if cmd.type == T.SEND:
            self.sends += 1
            return T(type=T.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
                producer_id=cmd.send.producer_id, sequence_id=cmd.send.sequence_id + 1,
                message_id=pb.MessageIdData(ledgerId=1, entryId=self.sends)))
        if cmd.type == T.PRODUCER:
            self.producing.set()
            if self.mute:
                return None
            return T(type=T.PRODUCER_SUCCESS, producer_success=pb.CommandProducerSuccess(
                request_id=cmd.producer.request_id, producer_name=cmd.producer.producer_name))
        return None

    def close(self) -> None:
        self.server.close()
        for sock in self.sockets:
            sock.close()


def replicate_to(east, name: str, remote: SilentRemote) -> tuple[AdminClient, str]:
    """public/default on `east` replicating to `remote` as cluster `name`; a fresh topic's name."""
    admin = AdminClient(east.admin_url)
    admin.create_cluster(name, {"brokerServiceUrl": remote.url})
    admin.update_tenant("public", [], ["east", name])
    admin.set_replication_clusters("public/default", ["east", name])
    return admin, f"persistent://public/default/{name}-{random.randrange(1 << 30)}"


def test_a_remote_that_never_reads_costs_a_bounded_amount_of_memory(tmp_path, client_factory):
    # glibc's threshold for mmap fixed, so freed large buffers leave the process and RSS
    # measures what is held, not what the allocator kept for later
    east = Standalone(tmp_path / "east", ["clusterName=east", "managedLedgerCacheSizeMB=4"],
                      env={"MALLOC_MMAP_THRESHOLD_": "131072"}).start()
    remote = SilentRemote()
    try:
        admin, topic = replicate_to(east, "silent", remote)
        client = client_factory(east.url)
        consumer = client.subscribe(topic, "local")
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        assert remote.producing.wait(15), "the replicator never created its producer"
        before = rss_kb(east.proc.pid)
        payload = random.randbytes(ENTRY)
        for _ in range(ENTRIES):
            producer.send_async(payload, None)
        producer.flush()
        for _ in range(ENTRIES):  # the broker still serves its own clients
            consumer.acknowledge(consumer.receive(10_000))
        grown_mb = (rss_kb(east.proc.pid) - before) / 1024
        stats = admin.stats(topic)["replication"]["silent"]
        assert stats["replicationBacklog"] == ENTRIES
        # 80 MB went to a remote that read nothing: the replicator sent 16 MB of it (and the
        # kernel's socket buffers took some), the cursor holds the rest on disk
        assert grown_mb < 50, f"the broker grew {grown_mb:.0f} MB"
    finally:
        remote.close()
        east.stop()


def test_receipts_for_what_was_not_sent_delete_nothing(broker_factory, client_factory):
    east = broker_factory("clusterName=east")
    remote = SilentRemote(lying=True)
    try:
        admin, topic = replicate_to(east, "liar", remote)
        producer = client_factory(east.url).create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(b"m%d" % i)
        assert wait_for(lambda: remote.sends >= 40), "the replicator did not send again after the bad receipts"
        assert admin.stats(topic)["replication"]["liar"]["replicationBacklog"] == 20
    finally:
        remote.close()


def test_a_replicator_stopped_while_its_producer_is_being_made_closes_it_there(broker_factory, client_factory):
    """Else the remote keeps a producer of the replicator's name, and the next replicator to
    that cluster is refused with ProducerBusy for as long as the connection lives."""
    east = broker_factory("clusterName=east")
    remote = SilentRemote(mute=True)
    try:
        admin, topic = replicate_to(east, "slow", remote)
        client_factory(east.url).create_producer(topic).send(b"m")
        assert remote.producing.wait(15)
        admin.set_replication_clusters("public/default", ["east"])
        assert wait_for(lambda: T.CLOSE_PRODUCER in remote.commands), remote.commands
    finally:
        remote.close()
