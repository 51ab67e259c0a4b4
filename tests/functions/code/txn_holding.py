"""Publishes each input to the user config's `side` topic, then holds its transaction open a
moment (`hold_s` seconds) so the test can look at it."""

import time

from pulsar import Function


class TxnHolding(Function):
    def process(self, input, context):
        context.publish(context.get_user_config_value("side"), input)
        time.sleep(context.get_user_config_value("hold_s"))
        return input
