"""Acknowledges its input itself (autoAck off), except the first time it sees an input named
in the user config's `ignore` list: that one it leaves unacknowledged, with no output, for
the broker to send again."""

from pulsar import Function


class TxnIgnoring(Function):
    def __init__(self):
        self.seen = set()

    def process(self, input, context):
        context.publish(context.get_user_config_value("side"), f"side:{input}")
        if input in context.get_user_config_value("ignore") and input not in self.seen:
            self.seen.add(input)
            return None
        context.ack(context.get_message_id(), context.get_current_message_topic_name())
        return f"out:{input}"
