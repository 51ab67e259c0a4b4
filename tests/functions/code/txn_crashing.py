"""Acknowledges its input itself (autoAck off), publishes a side message, then, the first time
it sees an input named in the user config's `crash` list, dies with SIGKILL: what it did in
the transaction must come to nothing, and the input must come back."""

import os
import signal

from pulsar import Function


class TxnCrashing(Function):
    def process(self, input, context):
        context.ack(context.get_message_id(), context.get_current_message_topic_name())
        context.publish(context.get_user_config_value("side"), f"side:{input}")
        if input in context.get_user_config_value("crash") and context.incr_counter(f"tries-{input}", 1) == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"out:{input}"
