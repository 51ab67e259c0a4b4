"""A plain module-level function, no SDK class."""


def process(input):
    return f"plain:{input}"


def shout(input):
    return f"shout:{input}"


class UpperSerDe:
    """A custom serde class of the function's own code."""

    def serialize(self, value):
        return str(value).upper().encode()

    def deserialize(self, data):
        return data.decode()
