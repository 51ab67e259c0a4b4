"""Code that does not import."""

import no_such_module_anywhere  # noqa: F401


def process(input):
    return input
