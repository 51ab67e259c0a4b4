"""Functions that fail the worker's way: hang, exit, serdes."""

import sys
import time

from pulsar import Function


class Hang(Function):
    def process(self, input, context):
        if input == "hang":
            time.sleep(3600)
        return input


class Exits(Function):
    def process(self, input, context):
        if input == "exit":
            sys.exit(7)
        return input


class Pickled(Function):
    """Takes and returns Python objects through PickleSerDe."""

    def process(self, input, context):
        return {"got": input, "n": len(input["items"])}


def echo(input):
    return input
