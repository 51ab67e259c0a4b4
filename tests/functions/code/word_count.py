"""The SDK's stateful example: count each word of each sentence in the function's state."""

from pulsar import Function


class WordCountFunction(Function):
    def process(self, item, context):
        for word in item.split():
            context.incr_counter(word, 1)
