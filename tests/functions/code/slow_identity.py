"""An identity function a little slow, so that a kill lands between outputs and acks."""

import time


def process(input):
    time.sleep(0.005)
    return input
