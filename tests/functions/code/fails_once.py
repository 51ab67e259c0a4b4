"""Raises the first time it sees a message ending in "-7" (counted in its state)."""

from pulsar import Function


class FailsOnce(Function):
    def process(self, input, context):
        if input.endswith("-7") and context.incr_counter(f"tries-{input}", 1) == 1:
            raise RuntimeError(f"first try of {input} fails")
        return input
