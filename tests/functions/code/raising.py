"""Raises on messages containing "bad", passes the rest through."""

from pulsar import Function


class Raising(Function):
    def process(self, input, context):
        if "bad" in input:
            raise ValueError(f"cannot take {input}")
        return input
