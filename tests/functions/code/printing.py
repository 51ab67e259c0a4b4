"""Prints a line for each message: with --log-topic, the lines are its log."""

from pulsar import Function


class Printing(Function):
    def process(self, input, context):
        print(f"got {input}")
