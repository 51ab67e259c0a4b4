"""What a user who gets the command line wrong sees: one line naming what was wrong (the
verb's usage when the shape of the line was wrong), exit code 2 for a usage error and 1 for a
refusal, and never a Python traceback unless they asked with --log-level DEBUG. Also the
lines the broker leaves for an operator when it refuses or changes something."""

from __future__ import annotations

import contextlib
import io
import re
import signal
import subprocess
import sys
import uuid

import pulsar
import pytest
from admin_http import get_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polling import wait_for
from standalone import run_standalone

from magnetar import cli
from magnetar.cli.parsing import CommandParser

MALFORMED_TOPICS = ["persistent:/public/default/t", "public/default", "a/b/c/d/e"]
DEAD_PULSAR = "pulsar://127.0.0.1:1"
DEAD_ADMIN = "http://127.0.0.1:1"


def magnetar(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def assert_one_line_usage_error(result: subprocess.CompletedProcess[str], *wanted: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for text in wanted:
        assert text in result.stderr, result.stderr


@pytest.mark.parametrize("topic", MALFORMED_TOPICS)
def test_a_malformed_topic_is_one_line_naming_the_accepted_forms(topic):
    forms = "my-topic, tenant/namespace/my-topic or persistent://tenant/namespace/my-topic"
    for command in (["client", "--url", DEAD_PULSAR, "produce", topic, "-m", "x"],
                    ["client", "--url", DEAD_PULSAR, "consume", topic, "-s", "sub"],
                    ["perf", "produce", topic, "-u", DEAD_PULSAR, "-time", "1"],
                    ["perf", "consume", topic, "-u", DEAD_PULSAR, "-time", "1"],
                    ["admin", "--admin-url", DEAD_ADMIN, "topics", "stats", topic],
                    ["compact", topic, "--admin-url", DEAD_ADMIN]):
        assert_one_line_usage_error(magnetar(*command), f"{topic!r} is not a topic name", forms)


def test_an_unknown_flag_after_a_verb_prints_that_verbs_usage():
    result = magnetar("client", "--url", DEAD_PULSAR, "produce", "t", "-m", "x", "--bogus")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: magnetar client produce ")
    assert "magnetar client produce: error: unrecognized arguments: --bogus" in result.stderr


def test_a_misspelt_flag_is_named_beside_the_missing_one_it_was_meant_to_be():
    result = magnetar("admin", "--admin-url", DEAD_ADMIN, "topics", "create-partitioned-topic", "t", "--partitons", "4")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: magnetar admin topics create-partitioned-topic ")
    assert "--partitons (did you mean --partitions?)" in result.stderr
    assert "required: -p/--partitions" in result.stderr


@pytest.mark.parametrize("command", [["perf", "produce", "t", "-u", DEAD_PULSAR, "-tim", "1"],
                                     ["perf", "produce", "t", "-u", DEAD_PULSAR, "--test-dur", "1"],
                                     ["admin", "--admin", DEAD_ADMIN, "tenants", "list"]])
def test_flags_are_never_matched_by_a_prefix(command):
    result = magnetar(*command)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unrecognized arguments" in result.stderr and "did you mean" in result.stderr


def test_one_letter_flags_take_attached_values_and_group_and_no_prefix_stands_for_a_flag(capsys):
    parser = CommandParser(prog="t")
    parser.add_argument("-time")
    parser.add_argument("-p", type=int)
    parser.add_argument("-d", action="store_true")
    parser.add_argument("-b", action="store_true")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("-sk")
    parsed = parser.parse_args(["-p4", "-db", "-time=3", "-sk", "k"])
    assert (parsed.p, parsed.d, parsed.b, parsed.time, parsed.sk) == (4, True, True, "3", "k")
    for line, flag in ((["-tim", "3"], "-tim (did you mean -time?)"), (["-s", "k"], "-s (did you mean -sk?)")):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(line)
        assert exit_.value.code == 2
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_a_refusal_names_its_error_once_and_exits_1(broker):
    result = magnetar("client", "--url", broker.url, "produce", "persistent://nowhere/ns/t", "-m", "x")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "magnetar client produce: TopicNotFound: Namespace nowhere/ns does not exist"
    assert wait_for(lambda: "lookup of persistent://nowhere/ns/t refused: TopicNotFound" in broker.log())


def test_debug_shows_the_traceback(broker):
    result = magnetar("client", "--url", broker.url, "produce", "persistent://nowhere/ns/t", "-m", "x",
                      "--log-level", "DEBUG")
    assert result.returncode == 1 and "Traceback" in result.stderr


def test_a_second_standalone_on_a_data_dir_is_told_to_use_its_own(broker):
    result = run_standalone("--data-dir", str(broker.data_dir))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--data-dir" in result.stderr and "read_only" not in result.stderr


@pytest.mark.parametrize("exists", [True, False])
def test_consuming_an_empty_topic_says_it_is_waiting(broker, tmp_path, exists):
    """On a topic that does not exist the subscription creates it: consume says it waits on a
    new topic (a typo in the name would wait forever), not merely for messages."""
    topic = f"empty-{uuid.uuid4().hex[:8]}"
    if exists:
        assert magnetar("admin", "--admin-url", broker.admin_url, "topics", "create", topic).returncode == 0
    errors = tmp_path / "stderr"
    with open(errors, "w") as sink:
        consumer = subprocess.Popen([sys.executable, "-m", "magnetar", "client", "--url", broker.url, "consume", topic,
                                     "-s", "sub"], stdout=subprocess.PIPE, stderr=sink, text=True)
    said = (f"waiting for messages on {topic} (subscription sub), Ctrl-C to stop" if exists else
            f"{topic} did not exist: subscribing created it, a new topic, empty; waiting for its first message")
    try:
        assert wait_for(lambda: "waiting for" in errors.read_text(), timeout=30), errors.read_text()
        assert said in errors.read_text()
    finally:
        consumer.send_signal(signal.SIGINT)
        out, _ = consumer.communicate(timeout=30)
    assert consumer.returncode == 130 and "0 messages consumed" in out
    assert "Traceback" not in errors.read_text()
    assert errors.read_text().count("waiting for") == 1


def test_an_interrupted_produce_says_what_was_sent_and_stored(broker, tmp_path):
    topic = f"interrupted-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url)
    try:
        consumer = client.subscribe(topic, "count")  # keeps what the producer stores as backlog
        producer = subprocess.Popen([sys.executable, "-m", "magnetar", "client", "--url", broker.url, "produce",
                                     topic, "-m", "x", "-n", "2000000"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        try:
            consumer.receive(30_000)  # it is sending
        finally:
            producer.send_signal(signal.SIGINT)
            out, err = producer.communicate(timeout=60)
    finally:
        client.close()
    assert producer.returncode == 130, err
    said = re.search(r"interrupted: (\d+) messages sent, (\d+) acknowledged by the broker", out)
    assert said is not None, out + err
    sent, acknowledged = int(said.group(1)), int(said.group(2))
    assert 1 <= acknowledged <= sent < 2_000_000
    stats = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats")
    assert stats["msgInCounter"] >= acknowledged  # each one acknowledged was stored


def test_log_level_help_shows_its_default():
    assert "(default INFO)" in " ".join(magnetar("standalone", "--help").stdout.split())
    assert "(default WARNING)" in " ".join(magnetar("client", "produce", "--help").stdout.split())


def test_admin_calls_that_change_or_fail_leave_an_info_line(broker):
    assert magnetar("admin", "--admin-url", broker.admin_url, "namespaces", "set-retention", "public/default",
                    "-t", "1h", "-s", "10M").returncode == 0
    assert magnetar("admin", "--admin-url", broker.admin_url, "tenants", "get", "nowhere").returncode == 1
    assert magnetar("admin", "--admin-url", broker.admin_url, "tenants", "list").returncode == 0
    assert wait_for(lambda: "INFO magnetar.admin: GET /admin/v2/tenants/nowhere from 127.0.0.1: 404 Tenant does not"
                    in broker.log())
    log = broker.log()
    assert "INFO magnetar.admin: POST /admin/v2/namespaces/public/default/retention from 127.0.0.1: 204" in log
    assert "GET /admin/v2/tenants from" not in log  # a read that succeeded: DEBUG only


# -- no traceback, whatever the line: every verb, with its own flags, bad values and junk
def _verbs() -> list[tuple[list[str], list[str]]]:
    """(the words naming a verb, its flags) for every verb but the ones that start something
    long-lived: `standalone` (a broker) and `compact --spark` (a Spark session)."""
    found = []

    def walk(parser: object, words: list[str]) -> None:
        sub = parser._subparsers  # type: ignore[attr-defined]
        if sub is None:
            flags = [f for f in parser._option_string_actions if f not in ("--spark", "--log-level")]  # type: ignore[attr-defined]
            found.append((words, flags))
            return
        for name, child in sub._group_actions[0].choices.items():
            if name != "standalone":
                walk(child, [*words, name])

    walk(cli.parser(), [])
    return found


VERBS = _verbs()
VALUES = [*MALFORMED_TOPICS, "my-topic", "public/default", "persistent://public/default/t", "-1", "0", "3", "x", "",
          "10m", "1:2", "Shared", "Earliest", "k=v", "=", "--bogus", "-tim", "--partitons", DEAD_PULSAR, DEAD_ADMIN,
          "kafka://x:1", '{"a": 1}', "persistent://nowhere/ns/t", "non-persistent://public/default/t"]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    words, flags = draw(st.sampled_from(VERBS))
    tokens = st.one_of(st.sampled_from(flags or ["--bogus"]), st.sampled_from(VALUES), st.text(max_size=12))
    return [*words, *draw(st.lists(tokens, max_size=6))]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=command_lines())
def test_no_command_line_ends_in_a_traceback(line, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # `tokens create-key-pair` may write its files
    monkeypatch.setenv("MAGNETAR_SERVICE_URL", DEAD_PULSAR)
    monkeypatch.setenv("MAGNETAR_ADMIN_URL", DEAD_ADMIN)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            code = cli.main(line)
        except SystemExit as exit_:  # argparse: --help, or a usage error
            code = exit_.code
    assert code in (0, 1, 2), (line, errors.getvalue())
    assert "Traceback" not in errors.getvalue(), line
