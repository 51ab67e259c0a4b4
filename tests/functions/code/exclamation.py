"""The SDK's first example: append an exclamation mark."""

from pulsar import Function


class ExclamationFunction(Function):
    def process(self, input, context):
        return input + "!"
