"""Just enough of an asyncio transport to run a real ServerCnx in this process: what tests
and benchmarks/publish_path_bench.py feed bytes into without a socket. Subclasses say what
becomes of what the connection writes."""

from __future__ import annotations


class StubTransport:
    def __init__(self) -> None:
        self.paused = False
        self.closing = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def writelines(self, data: list[bytes]) -> None:
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
