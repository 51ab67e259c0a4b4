"""The SQL-92 message selector, table by table, against the JMS (Jakarta Messaging 3.1,
section 3.8.1) selector rules: each row is a selector, the message properties it is judged
on, and the three-valued answer (True, False, or None for UNKNOWN)."""

from __future__ import annotations

import itertools

import pytest

from magnetar.broker.entry_filters import FilterContext, FilterEntry, FilterResult
from magnetar.broker.entry_filters.selector import SelectorError, compile_selector, matches
from magnetar.broker.entry_filters.selector_filter import SelectorEntryFilter
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

PROPS = {
    "region": "eu", "n": "5", "price": "12.5", "neg": "-3", "big": "1e3", "word": "five",
    "flag": "true", "off": "FALSE", "name": "a_b%c", "quote": "it's", "empty": "", "lines": "a\nb",
    "my-key.v2": "dashed", "AND": "quoted keyword", 'say "hi"': "quoted",
    "under": "1_000", "inf": "inf", "padded": " 5",
}
T, F, U = True, False, None


@pytest.fixture(autouse=True)
def fresh_compilation():
    """Every test compiles its selectors itself: compile_selector caches them, and a cached
    condition would hide a change to the compiler (mutation runs fork after a first run)."""
    compile_selector.cache_clear()


def judge(selector: str, props: dict[str, str] | None = None) -> bool | None:
    return compile_selector(selector)(PROPS if props is None else props)


def table(*rows: tuple[str, bool | None]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("selector", "expected"), rows, ids=[row[0] for row in rows])


@table(
    # numbers: a property compared with a number literal is read as a number
    ("n = 5", T), ("n = 5.0", T), ("n = 5e0", T), ("n = 4", F), ("n <> 4", T), ("n != 5", F), ("n <> 5", F),
    ("n < 6", T), ("n < 5", F), ("n <= 5", T), ("n <= 4", F), ("n > 4", T), ("n > 5", F), ("n >= 5", T),
    ("n >= 6", F), ("price > 12.4", T), ("price < 12.5", F), ("neg < 0", T), ("neg = -3", T), ("big = 1000", T),
    ("n > -5", T), ("5 = n", T), ("6 > n", T), ("1 < 2", T), ("2 < 1", F),
    # a property that is no number compared with one is unknown, whatever the operator
    ("word = 5", U), ("word <> 5", U), ("word > 5", U), ("empty = 0", U), ("region < 1", U),
    # ... and a number is what a number literal may be written as: not Python's float() spellings
    ("under = 1000", U), ("inf > 0", U), ("padded = 5", U),
    # text, as Python (and Java) order it
    ("region = 'eu'", T), ("region = 'EU'", F), ("region <> 'us'", T), ("region <> 'eu'", F),
    ("region < 'fr'", T), ("region > 'fr'", F), ("quote = 'it''s'", T), ("empty = ''", T), ("n = '5'", T),
    ("n = '5.0'", F), ("'eu' = region", T), ("'a' = 'a'", T), ("'a' <> 'a'", F),
    # booleans: 'true'/'false' in any case read as booleans, anything else is unknown
    ("flag = TRUE", T), ("flag = true", T), ("flag = FALSE", F), ("flag <> FALSE", T), ("off = FALSE", T),
    ("off = TRUE", F), ("TRUE = flag", T), ("region = TRUE", U), ("n <> FALSE", U), ("TRUE = TRUE", T),
    ("TRUE <> FALSE", T), ("flag = 1", U),
    ("missing = TRUE", U), ("NOT missing = FALSE", U), ("TRUE", T), ("FALSE", F), ("(TRUE)", T), ("NOT FALSE", T),
    # two properties: compared as text
    ("region = region", T), ("n = price", F), ("flag <> off", T),
    # names: dots and dashes belong to a name; a quoted name may be a keyword
    ("\"my-key.v2\" = 'dashed'", T), ("my-key.v2 = 'dashed'", T), ("\"AND\" = 'quoted keyword'", T),
    ("\"say \"\"hi\"\"\" = 'quoted'", T),
    # keywords in any case
    ("region = 'eu' and n = 5", T), ("region = 'us' Or n = 5", T), ("not region = 'eu'", F),
)
def test_comparisons(selector, expected):
    assert judge(selector) is expected


@table(
    ("n + 1 = 6", T), ("n - 1 = 4", T), ("n * 2 = 10", T), ("n / 2 = 2.5", T), ("price * 2 = 25", T),
    ("n + 1 * 2 = 7", T), ("(n + 1) * 2 = 12", T), ("n - 2 - 1 = 2", T), ("n / 5 / 1 = 1", T),
    ("-n = -5", T), ("+n = 5", T), ("- -n = 5", T), ("-(n - 6) = 1", T), ("n -1 = 4", T), ("2 * 3 = 6", T),
    ("n * 2 > 9 AND n * 2 < 11", T),
    # NULL and non-numbers propagate as unknown; dividing by zero is unknown too
    ("missing + 1 = 1", U), ("word + 1 = 6", U), ("-missing = 0", U), ("n / 0 = 1", U), ("n / (n - 5) > 0", U),
    ("n BETWEEN 4 + 0.5 AND 5 * 2", T),
)
def test_arithmetic(selector, expected):
    assert judge(selector) is expected


@table(
    ("n BETWEEN 1 AND 5", T), ("n BETWEEN 5 AND 9", T), ("n BETWEEN 6 AND 9", F), ("n BETWEEN 1 AND 4", F),
    ("n BETWEEN 9 AND 1", F), ("n NOT BETWEEN 6 AND 9", T), ("n NOT BETWEEN 1 AND 5", F),
    ("price between 12 and 13", T), ("region BETWEEN 'a' AND 'f'", T), ("region BETWEEN 'f' AND 'z'", F),
    ("missing BETWEEN 1 AND 5", U), ("missing NOT BETWEEN 1 AND 5", U), ("word BETWEEN 1 AND 5", U),
    # BETWEEN is lo <= v AND v <= hi: one false half decides even when the other is unknown
    ("n BETWEEN missing AND 4", F), ("n BETWEEN 6 AND missing", F), ("n NOT BETWEEN missing AND 4", T),
    ("n BETWEEN missing AND 9", U), ("n NOT BETWEEN 1 AND missing", U),
)
def test_between(selector, expected):
    assert judge(selector) is expected


@table(
    ("region IN ('eu', 'us')", T), ("region IN ('us')", F), ("region NOT IN ('us', 'ap')", T),
    ("region NOT IN ('eu')", F), ("region in ('EU')", F), ("quote IN ('it''s')", T), ("empty IN ('')", T),
    # number choices compare numerically, as = does
    ("n IN (5)", T), ("n IN (4, 5.0)", T), ("price IN (12.5)", T), ("big IN (1000)", T), ("n IN (-5, 6)", F),
    ("neg IN (-3)", T), ("n IN ('5', 7)", T), ("word IN (5)", F), ("word NOT IN (5)", T),
    ("missing IN ('eu')", U), ("missing NOT IN ('eu')", U),
)
def test_in(selector, expected):
    assert judge(selector) is expected


@table(
    ("region LIKE 'eu'", T), ("region LIKE 'e%'", T), ("region LIKE '%u'", T), ("region LIKE '%'", T),
    ("region LIKE 'e_'", T), ("region LIKE '_'", F), ("region LIKE '___'", F), ("region LIKE 'E%'", F),
    ("region NOT LIKE 'u%'", T), ("region NOT LIKE 'e%'", F), ("empty LIKE '%'", T), ("empty LIKE '_'", F),
    ("lines LIKE 'a_b'", T), ("lines LIKE 'a%'", T), ("quote LIKE 'it''_'", T),
    # regex characters are literal
    ("name LIKE 'a.b%'", F), ("price LIKE '12.5'", T), ("price LIKE '12_5'", T), ("region LIKE '[e]u'", F),
    # ESCAPE makes % and _ (and itself) literal (no backslash in these ids: mutmut reruns tests
    # by node id, and pytest finds one with a backslash only in a fresh process)
    ("name LIKE 'a#_b#%c' ESCAPE '#'", T), ("name LIKE 'a!_b!%c' ESCAPE '!'", T), ("n LIKE '!5' ESCAPE '!'", T),
    ("region LIKE 'e!_' ESCAPE '!'", F), ("name LIKE 'a_b%' ESCAPE '!'", T), ("name LIKE '%!%%' ESCAPE '!'", T),
    ("region LIKE '%!%%' ESCAPE '!'", F), ("quote LIKE 'it!''s' ESCAPE '!'", T),
    ("missing LIKE '%'", U), ("missing NOT LIKE '%'", U),
)
def test_like(selector, expected):
    assert judge(selector) is expected


@table(
    ("missing IS NULL", T), ("missing IS NOT NULL", F), ("region IS NULL", F), ("region IS NOT NULL", T),
    ("empty IS NULL", F), ("NOT (missing IS NULL)", F), ("missing is null", T),
)
def test_is_null(selector, expected):
    assert judge(selector) is expected


TRUTH = {T: "n = 5", F: "n = 4", U: "missing = 5"}
#: SQL's (Kleene's) three-valued logic: order F < U < T; AND is the least, OR the greatest.
RANK = {F: 0, U: 1, T: 2}
BY_RANK = {rank: value for value, rank in RANK.items()}


@pytest.mark.parametrize(("a", "b"), list(itertools.product([T, F, U], repeat=2)))
def test_three_valued_and_or(a, b):
    assert judge(f"{TRUTH[a]} AND {TRUTH[b]}") is BY_RANK[min(RANK[a], RANK[b])]
    assert judge(f"{TRUTH[a]} OR {TRUTH[b]}") is BY_RANK[max(RANK[a], RANK[b])]


@pytest.mark.parametrize("a", [T, F, U])
def test_three_valued_not(a):
    assert judge(f"NOT {TRUTH[a]}") is {T: F, F: T, U: U}[a]
    assert judge(f"NOT NOT {TRUTH[a]}") is a


@table(
    # precedence: NOT binds tighter than AND, AND tighter than OR; parentheses override
    ("n = 4 AND n = 5 OR n = 5", T), ("n = 5 OR n = 5 AND n = 4", T), ("(n = 5 OR n = 5) AND n = 4", F),
    ("NOT n = 4 AND n = 5", T), ("NOT (n = 4 OR n = 5)", F), ("n = 4 OR n = 4 OR n = 5", T),
    ("n = 5 AND n = 5 AND n = 4", F), ("((n = 5))", T),
    # unknown inside larger conditions, as the JMS rules spell out
    ("missing = 1 AND n = 4", F), ("missing = 1 OR n = 5", T), ("NOT (missing = 1) OR n = 4", U),
    ("missing = 1 OR missing = 2", U), ("NOT (missing = 1 AND n = 4)", T),
)
def test_logic(selector, expected):
    assert judge(selector) is expected


def test_a_message_is_selected_only_when_the_condition_is_true():
    assert matches("n = 5", PROPS) is True
    assert matches("n = 4", PROPS) is False
    assert matches("missing = 5", PROPS) is False
    assert matches("NOT (missing = 5)", PROPS) is False
    assert matches("missing IS NULL", {}) is True


@pytest.mark.parametrize(("selector", "message"), [
    ("region = = 'eu'", "does not parse at line 1, column 10"),
    ("", "does not parse at line 1, column 1"),
    ("region", "does not parse at line 1, column 1"),
    ("n + 1", "does not parse at line 1, column 5"),
    ("region = 'eu", "does not parse at line 1, column 10"),
    ("region = 'eu' AND", "does not parse at line 1, column 15"),
    ("n =\n 0x10", "does not parse at line 2, column 3"),
    ("region IN ()", "does not parse at line 1, column 12"),
    ("region IN (other)", "does not parse at line 1, column 12"),
    ("region LIKE other", "does not parse at line 1, column 13"),
    ("5 IS NULL", "does not parse at line 1, column 3"),
    ("n BETWEEN 1", "does not parse"),
    ("(n = 5", "does not parse"),
    ("and = 1", "'and' at line 1, column 1 is a keyword, not a property name"),
    ("n = 1 AND null = 2", "'null' at line 1, column 11 is a keyword"),
    ("'a' < 1", "'<' at line 1, column 5 compares a number with a string"),
    ("n + 1 = 'x'", "compares a number with a string"),
    ("TRUE = 1", "compares a boolean with a number"),
    ("TRUE = 'true'", "compares a boolean with a string"),
    ("n BETWEEN 'a' AND 5", "BETWEEN compares a number with a string"),
    ("flag < TRUE", "'<' at line 1, column 6 orders booleans"),
    ("'a' + 1 = 2", "'+' at line 1, column 5 needs numbers, not a string"),
    ("-'a' = 1", "needs numbers, not a string"),
    ("n + 'a' = 1", "'+' at line 1, column 3 needs numbers, not a string"),
    ("region LIKE 'e%' ESCAPE ''", "must be one character"),
    ("region LIKE 'e%' ESCAPE '!!'", "ESCAPE ''!!'' at line 1, column 25 must be one character"),
    ("region LIKE 'e!' ESCAPE '!'", "ends with its escape character"),
])
def test_bad_selectors_say_what_and_where(selector, message):
    with pytest.raises(SelectorError) as raised:
        compile_selector(selector)
    assert message in str(raised.value)


def entry(properties: dict[str, str]) -> FilterEntry:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0,
                                  properties=[pb.KeyValue(key=k, value=v) for k, v in properties.items()])
    return FilterEntry(Position(1, 0), metadata, b"")


def context(subscription_selector: str | None = None, consumer_selector: str | None = None) -> FilterContext:
    return FilterContext("persistent://public/default/t", "sub",
                         {"selector": subscription_selector} if subscription_selector else {},
                         "consumer", {"selector": consumer_selector} if consumer_selector else {})


@pytest.mark.parametrize(("properties", "expected"), [
    ({"region": "eu"}, FilterResult.ACCEPT),
    ({"region": "us"}, FilterResult.REJECT),
    ({}, FilterResult.REJECT),  # unknown is no
    ({"region": "EU"}, FilterResult.REJECT),
])
def test_the_filter_accepts_only_what_the_selector_selects(properties, expected):
    assert SelectorEntryFilter().filter_entry(entry(properties), context("region = 'eu'")) is expected


def test_the_subscription_selector_wins_over_the_consumers_and_none_accepts_all():
    selector_filter = SelectorEntryFilter()
    both = context("region = 'eu'", "region = 'us'")
    assert selector_filter.filter_entry(entry({"region": "eu"}), both) is FilterResult.ACCEPT
    assert selector_filter.filter_entry(entry({"region": "us"}), both) is FilterResult.REJECT
    consumer_only = context(consumer_selector="region = 'us'")
    assert selector_filter.filter_entry(entry({"region": "us"}), consumer_only) is FilterResult.ACCEPT
    assert selector_filter.filter_entry(entry({"region": "eu"}), consumer_only) is FilterResult.REJECT
    assert selector_filter.filter_entry(entry({}), context()) is FilterResult.ACCEPT


def test_a_bad_selector_fails_the_subscription_check_with_its_position():
    with pytest.raises(ValueError, match="does not parse at line 1, column 10"):
        SelectorEntryFilter().check_subscription(context(consumer_selector="region = = 'eu'"))
    SelectorEntryFilter().check_subscription(context("region = 'eu'"))
    SelectorEntryFilter().check_subscription(context())
