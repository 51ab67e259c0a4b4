"""Takes forever to import."""

import time

time.sleep(3600)


def process(input):
    return input
