"""The one "did you mean" of broker keys, command-line flags and Spark options."""

from __future__ import annotations

from magnetar.spelling import did_you_mean


def test_the_nearest_names_or_nothing():
    keys = ["maxMessageSize", "maxMessageSizeCheckIntervalInSeconds", "brokerServicePort"]
    assert did_you_mean("maxMesageSize", keys) == "did you mean maxMessageSize?"
    assert did_you_mean("brokerServicePortt", keys, n=1) == "did you mean brokerServicePort?"
    assert did_you_mean("xyz", keys) == ""


def test_names_compared_in_any_case_are_shown_as_given():
    options = ["startingOffsets", "endingOffsets", "topicsPattern"]
    assert did_you_mean("startingoffset", options, n=1, ignore_case=True) == "did you mean startingOffsets?"
    assert did_you_mean("startingoffset", options) in ("", "did you mean startingOffsets?")  # case counts otherwise
    assert did_you_mean("offsets", ["a", "b"], ignore_case=True) == ""
