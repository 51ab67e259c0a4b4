"""Child process of test_accept_errors: a server on the broker's event loop that runs out of
file descriptors while clients wait, then gets them back.

Prints its port, holds every free descriptor for HOLD_SECONDS, releases them, and prints a
JSON line: accept failures the loop reported, log lines, connections accepted afterwards.
"""

import asyncio
import json
import os
import resource
import sys

from magnetar.broker.transport.accept_errors import AcceptErrorReporter, BrokerEventLoop

HOLD_SECONDS = 3.0


def hold_every_descriptor() -> list[int]:
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return held


async def main() -> None:
    loop = asyncio.get_running_loop()
    reporter = AcceptErrorReporter.install(loop)
    accepted = 0

    class Counting(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            nonlocal accepted
            accepted += 1

    server = await loop.create_server(Counting, "127.0.0.1", 0)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    held = hold_every_descriptor()
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(HOLD_SECONDS)
    failures = reporter.reported + reporter.suppressed
    for fd in held:
        os.close(fd)
    await asyncio.sleep(1.5)  # the retry after the last failure
    print(json.dumps({"failures": failures, "reported": reporter.reported, "accepted": accepted}), flush=True)


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=BrokerEventLoop) as runner:
        runner.run(main())
    sys.exit(0)
