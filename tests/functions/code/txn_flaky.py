"""Publishes a side message for each input, then fails the first try of the inputs named in
the user config's `fail` list: the side message of a failed try must go with its transaction."""

from pulsar import Function


class TxnFlaky(Function):
    def __init__(self):
        self.tried = set()

    def process(self, input, context):
        context.publish(context.get_user_config_value("side"), f"side:{input}",
                        properties={"key": context.get_message_key() or ""})
        if input in context.get_user_config_value("fail") and input not in self.tried:
            self.tried.add(input)
            raise RuntimeError(f"first try of {input} fails")
        return f"out:{input}"
