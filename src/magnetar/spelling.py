"""The nearest known names to a mistyped one, for refusals that say "did you mean ...?".

One wording and one measure (difflib's ratio, its default cut-off) for every place a user
names something from a fixed set: broker configuration keys, command-line flags, the Spark
source's and sink's options. A module of its own at the bottom of the layers, so each of
them uses it without importing the others.
"""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(word: str, known: Iterable[str], n: int = 2, *, ignore_case: bool = False) -> str:
    """"did you mean X?" (or "X or Y?") naming the known names nearest `word`, "" when none is
    near. With `ignore_case` the names are compared lower-cased and shown as given: Spark
    hands a data source its options lower-cased, and the docs spell them in camelCase."""
    import difflib  # noqa: PLC0415 (only a mistake needs it, not every start-up)

    names = list(known)
    if ignore_case:
        spelt = {name.lower(): name for name in names}
        close = [spelt[match] for match in difflib.get_close_matches(word.lower(), list(spelt), n=n)]
    else:
        close = difflib.get_close_matches(word, names, n=n)
    return f"did you mean {' or '.join(close)}?" if close else ""
