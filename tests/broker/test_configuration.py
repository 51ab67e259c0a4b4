"""broker.conf as Pulsar writes it: Java properties syntax, Pulsar's keys, PULSAR_PREFIX_ variables."""

from __future__ import annotations

import logging
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from standalone import Standalone, run_standalone

from magnetar.broker.config.loading import (
    LoadedConfiguration,
    displayed_value,
    environment_settings,
    load_configuration,
)
from magnetar.broker.config.properties import PropertiesError, Setting, parse_properties
from magnetar.broker.config.pulsar_keys import PULSAR_BROKER_KEYS, is_pulsar_key
from magnetar.broker.config.rules import NotEmpty, NotNegative, OneOf, Port, Positive
from magnetar.broker.config.service_configuration import ConfigError, ServiceConfiguration, magnetar_keys
from magnetar.broker.service.broker_service import managed_ledger_config
from magnetar.cli import parser

# --- the Java properties syntax ----------------------------------------------------------


def pairs(text: str) -> list[tuple[str, str, str]]:
    return [(s.key, s.value, s.origin) for s in parse_properties(text, "f")]


def test_separators_and_whitespace():
    text = "a=1\nb:2\nc 3\n  d = 4\ne\t:\t5\nf   =6\ng\n"
    assert [(k, v) for k, v, _ in pairs(text)] == [
        ("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5"), ("f", "6"), ("g", ""),
    ]


def test_value_keeps_trailing_whitespace_and_later_separators():
    assert pairs("url = pulsar://h:6650 \n")[0][1] == "pulsar://h:6650 "
    assert pairs("k==v\n")[0][1] == "=v"


def test_comments_of_both_kinds_even_indented():
    assert pairs("# c\n! c\n   # c\n\t! c\nk=v\n") == [("k", "v", "f:5")]


def test_continuation_drops_leading_whitespace_of_the_next_line():
    text = "list=a,\\\n     b,\\\n\tc\nnext=1\n"
    assert pairs(text) == [("list", "a,b,c", "f:1"), ("next", "1", "f:4")]


def test_a_comment_ending_in_backslash_does_not_continue():
    assert pairs("# comment \\\nk=v\n") == [("k", "v", "f:2")]


def test_escapes():
    text = "k1=tab\\there\nk2=a\\nb\\rc\\fd\nk3=back\\\\slash\nk4=\\u00e9\\u0041\n"
    assert [v for _, v, _ in pairs(text)] == ["tab\there", "a\nb\rc\fd", "back\\slash", "éA"]


def test_escaped_separators_belong_to_the_key():
    assert pairs("a\\=b\\:c\\ d=v\n")[0][:2] == ("a=b:c d", "v")


def test_empty_values():
    assert [v for _, v, _ in pairs("a=\nb:\nc\nd =   \n")] == ["", "", "", ""]


def test_repeated_key_is_listed_each_time_and_the_last_wins():
    settings = parse_properties("maxMessageSize=1\nmaxMessageSize=2\n", "f")
    assert [s.value for s in settings] == ["1", "2"]
    config = ServiceConfiguration()
    config.apply({s.key: s.value for s in settings})
    assert config.maxMessageSize == 2


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_line_numbers_count_every_kind_of_line_end(end):
    text = end.join(["# c", "", "a=1\\", "  2", "! c", "b=3", ""])
    assert pairs(text) == [("a", "12", "f:3"), ("b", "3", "f:6")]


def test_bad_unicode_escape_names_its_line():
    with pytest.raises(PropertiesError, match=r"^f:3: "):
        parse_properties("a=1\n\nb=\\u12\n", "f")


# A writer of our own, from the specification of java.util.Properties, so the parser is
# checked against the format rather than against itself.

def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or i == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif not char.isprintable() or ord(char) > 0x7E:
            out.extend(f"\\u{unit:04x}" for unit in _utf16(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
entries = st.lists(
    st.tuples(
        st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12),  # key
        texts,  # value
        st.sampled_from(["=", ":", " ", " = ", "\t: ", "  "]),  # separator
        st.integers(0, 2),  # comment and blank lines before the entry
        st.integers(0, 30),  # where the value is continued on the next line (if inside it)
        st.sampled_from(["", " ", "\t ", "\f"]),  # leading whitespace of lines
    ),
    max_size=8,
)


@given(entries, st.sampled_from(["\n", "\r\n", "\r"]))
@example([("0", "0 ", "=", 0, 1, "")], "\n")  # a space begins the continuation line
def test_parser_reads_what_the_specification_writes(items, end):
    lines: list[str] = []
    expected = []
    for key, value, separator, noise, split, indent in items:
        for n in range(noise):  # a blank (or whitespace-only) line, then a comment ending in a backslash
            lines.append(f"{indent}{'#!'[len(key) % 2]} noise = not a key \\" if n else indent)
        written = _escape(value, key=False)
        pieces = _split_between_escapes(written, split)
        expected.append((key, value, f"f:{len(lines) + 1}"))
        first = f"{indent}{_escape(key, key=True)}{separator}{pieces[0]}"
        lines.extend([first + "\\", indent + pieces[1]] if len(pieces) == 2 else [first])
    assert pairs(end.join(lines) + end) == expected


def _split_between_escapes(written: str, at: int) -> list[str]:
    """Cut escaped text in two at a character boundary (never inside an escape). A space
    that would begin the continuation line is escaped, as a writer must: the format drops
    whitespace at the start of every line, continuation lines included."""
    tokens = re.findall(r"\\u[0-9a-f]{4}|\\.|.", written, flags=re.DOTALL)
    if not 0 < at < len(tokens):
        return [written]
    if tokens[at] == " ":
        tokens[at] = "\\ "
    return ["".join(tokens[:at]), "".join(tokens[at:])]


# --- the keys ------------------------------------------------------------------------------


def test_the_key_set_is_pulsars_whole_broker_and_standalone_conf():
    assert len(PULSAR_BROKER_KEYS) > 500
    # one from each part of the files: general, dispatch, TLS, BookKeeper client,
    # load balancer, standalone's embedded bookie, commented-out keys, deprecated keys
    for key in ("metadataStoreUrl", "dispatcherMaxReadSizeBytes", "tlsTrustStorePassword",
                "bookkeeperClientTimeoutInSeconds", "loadBalancerAvgShedderLowThreshold",
                "nettyMaxFrameSizeBytes", "dbStorage_rocksDB_blockSize", "advertisedListeners",
                "bookkeeperClientExposeStatsToPrometheus", "zookeeperServers"):
        assert key in PULSAR_BROKER_KEYS
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key) for key in PULSAR_BROKER_KEYS)


def test_keys_passed_through_to_pulsars_embedded_clients_are_pulsars():
    assert is_pulsar_key("bookkeeper_useV2WireProtocol")
    assert is_pulsar_key("brokerClient_operationTimeoutMs")
    assert not is_pulsar_key("bookkeeperTypo")


# --- loading ---------------------------------------------------------------------------------


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_precedence_file_environment_c_flags(tmp_path):
    conf = write(tmp_path / "broker.conf", "maxMessageSize=1000", "keepAliveIntervalSeconds=5",
                 "defaultNumPartitions=2", "brokerServicePort=7000")
    loaded = load_configuration(
        conf, ["defaultNumPartitions=3", "brokerServicePort=7001"],
        environ={"PULSAR_PREFIX_maxMessageSize": "2000", "PULSAR_PREFIX_defaultNumPartitions": "4", "HOME": "/x"},
        flags=[Setting("brokerServicePort", "0", "--port")],
    )
    config = loaded.config
    assert (config.keepAliveIntervalSeconds, config.maxMessageSize) == (5, 2000)  # file < environment
    assert config.defaultNumPartitions == 3  # environment < -c
    assert config.brokerServicePort == 0  # -c < flag
    assert loaded.settings["keepAliveIntervalSeconds"].origin == f"{conf}:2"
    assert loaded.settings["maxMessageSize"].origin == "environment (PULSAR_PREFIX_maxMessageSize)"
    assert loaded.settings["brokerServicePort"].origin == "--port"


def test_unknown_keys_of_c_are_all_refused_at_once_with_the_nearest_keys(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_configuration(None, ["maxMesageSize=1", "noSuchKey=2", "metadataStoreUrl=zk:1"])
    message = str(caught.value)
    assert message.startswith("2 problems:")
    assert "-c: unknown configuration key 'maxMesageSize'" in message and "did you mean maxMessageSize?" in message
    assert "-c: unknown configuration key 'noSuchKey'" in message
    assert "metadataStoreUrl" not in message


def test_unknown_keys_of_the_file_and_environment_are_set_aside_with_their_origin(tmp_path):
    conf = write(tmp_path / "broker.conf", "# Pulsar's", "metadataStoreUrl=zk:1", "maxMesageSize=1",
                 "noSuchKey=2", "zookeeperServers=", "alsoNot: 3", "maxMessageSize=10")
    loaded = load_configuration(conf, environ={"PULSAR_PREFIX_fromEnv": "1"})
    assert [(s.key, s.origin) for s in loaded.unknown] == [
        ("maxMesageSize", f"{conf}:3"), ("noSuchKey", f"{conf}:4"), ("alsoNot", f"{conf}:6"),
        ("fromEnv", "environment (PULSAR_PREFIX_fromEnv)")]
    assert loaded.ignored == ["metadataStoreUrl", "zookeeperServers"]
    assert loaded.config.maxMessageSize == 10
    assert "maxMesageSize" not in loaded.settings


def test_summary_warns_of_each_unknown_key_with_its_line_and_the_nearest_keys(tmp_path, caplog):
    conf = write(tmp_path / "broker.conf", "maxMesageSize=1", "metadataStoreUrl=zk:1")
    with caplog.at_level(logging.INFO, logger="magnetar.config"):
        load_configuration(conf).log_summary()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{conf}:1: unknown configuration key 'maxMesageSize' (a key of neither magnetar nor any "
                        "Pulsar release); did you mean maxMessageSize?; ignored",
                        "1 Pulsar keys that magnetar does not implement are ignored: metadataStoreUrl"]


def test_pulsar_keys_magnetar_lacks_are_ignored_and_listed_once_sorted(tmp_path):
    conf = write(tmp_path / "broker.conf", "zookeeperServers=", "metadataStoreUrl=a", "metadataStoreUrl=b",
                 "bookkeeper_tcpKeepIdle=300", "maxMessageSize=10")
    loaded = load_configuration(conf)
    assert loaded.ignored == ["bookkeeper_tcpKeepIdle", "metadataStoreUrl", "zookeeperServers"]
    assert loaded.config.maxMessageSize == 10


def test_empty_values_keep_the_default_as_in_pulsar(tmp_path):
    conf = write(tmp_path / "broker.conf", "managedLedgerCacheSizeMB=", "maxMessagePublishBufferSizeInMB=",
                 "brokerEntryMetadataInterceptors=", "advertisedAddress=", "delayedDeliveryEnabled=")
    assert load_configuration(conf).config == ServiceConfiguration()


def test_bad_values_are_all_named_with_their_origin(tmp_path):
    conf = write(tmp_path / "broker.conf", "maxMessageSize=big", "delayedDeliveryEnabled=yes")
    with pytest.raises(ConfigError) as caught:
        load_configuration(conf)
    assert f"{conf}:1: bad value 'big' for maxMessageSize" in str(caught.value)
    assert f"{conf}:2: bad value 'yes' for delayedDeliveryEnabled" in str(caught.value)


def test_a_value_refused_by_validation_says_where_it_was_set(tmp_path):
    conf = write(tmp_path / "broker.conf", "", "maxMessageSize=0")
    with pytest.raises(ConfigError, match=rf"maxMessageSize must be positive.*set at {re.escape(str(conf))}:2"):
        load_configuration(conf)


def test_a_bad_c_argument_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="expected key=value"):
        load_configuration(None, ["maxMessageSize"])
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_configuration(tmp_path / "nope.conf")


def test_environment_reads_only_the_pulsar_prefix():
    settings = environment_settings({"PULSAR_PREFIX_a": "1", "PULSAR_MEM": "-Xmx1g", "a": "2"})
    assert settings == [Setting("a", "1", "environment (PULSAR_PREFIX_a)")]


def test_summary_logs_one_warning_and_the_non_default_keys(caplog):
    loaded = load_configuration(None, ["maxMessageSize=10"], environ={"PULSAR_PREFIX_metadataStoreUrl": "x",
                                                                      "PULSAR_PREFIX_tlsKeyStorePassword": "pw"})
    with caplog.at_level(logging.INFO, logger="magnetar.config"):
        loaded.log_summary()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "2 Pulsar keys that magnetar does not implement are ignored: metadataStoreUrl, tlsKeyStorePassword"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["configuration (keys not at their defaults): maxMessageSize=10 [-c]"]
    assert "pw" not in caplog.text


def test_summary_of_an_untouched_configuration(caplog):
    with caplog.at_level(logging.INFO, logger="magnetar.config"):
        LoadedConfiguration(ServiceConfiguration(), {}, []).log_summary()
    assert [r.getMessage() for r in caplog.records] == ["configuration: every key at its default"]


@pytest.mark.parametrize("key", ["tlsKeyStorePassword", "tokenSecretKey", "brokerClientAuthenticationParameters",
                                 "superUserToken", "awsCredentials"])
def test_secret_values_are_masked(key):
    assert displayed_value(key, "hunter2") == "****"


def test_other_values_are_shown_as_written():
    assert displayed_value("brokerEntryMetadataInterceptors", ["a", "b"]) == "a,b"
    assert displayed_value("journalSyncData", False) == "false"
    assert displayed_value("subscriptionKeySharedUseConsistentHashing", True) == "true"


def test_log_level_is_case_insensitive():
    assert parser().parse_args(["standalone", "--log-level", "debug"]).log_level == "DEBUG"


# --- real standalone processes ----------------------------------------------------------------

# What Pulsar's own standalone.conf says for keys magnetar implements (where it differs from
# magnetar's default or is empty), so the file below reads like a real one.
PULSAR_STANDALONE_VALUES = {
    "bindAddress": "127.0.0.1",  # 0.0.0.0 in Pulsar's; loopback keeps the test off the network
    "internalListenerName": "internal",
    "advertisedAddress": "",
    "managedLedgerCacheSizeMB": "",
    "maxMessagePublishBufferSizeInMB": "",
    "maxNumPartitionsPerPartitionedTopic": "0",
    "isDelayedDeliveryDeliverAtTimeStrict": "false",
    "journalSyncData": "false",
    "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
}


def pulsar_shaped_conf(path: Path) -> Path:
    """Every Pulsar key once, in the syntax variants Pulsar's files and their users write."""
    defaults = ServiceConfiguration()
    lines = ["#", "# Licensed to the Apache Software Foundation (ASF) ...", "#", "",
             "### --- General broker settings --- ###", ""]
    styles = ["{k}={v}", "{k}: {v}", "{k} {v}", "{k} = {v}", "! {k} is documented here\n{k}={v}", "#{k}=\n{k}={v}"]
    for n, key in enumerate(sorted(PULSAR_BROKER_KEYS | magnetar_keys())):
        value = PULSAR_STANDALONE_VALUES.get(key, _text(getattr(defaults, key, "")))
        if key not in magnetar_keys() and n % 7 == 0:
            value = "first,\\\n    second"  # a continued value
        lines += ["", f"# {key}", styles[n % len(styles)].format(k=key, v=value).rstrip()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _text(value: object) -> str:
    if value is None:  # an optional port that is off by default
        return ""
    if isinstance(value, list):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_a_pulsar_standalone_conf_starts_with_one_warning(tmp_path):
    conf = pulsar_shaped_conf(tmp_path / "standalone.conf")
    broker = Standalone(tmp_path / "data", args=["--config", str(conf)]).start()
    try:
        log = broker.log()
    finally:
        assert broker.stop() == 0
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, warnings
    ignored = sorted(PULSAR_BROKER_KEYS - magnetar_keys())
    assert warnings[0].endswith(f"{len(ignored)} Pulsar keys that magnetar does not implement are ignored: "
                                + ", ".join(ignored))
    assert "journalSyncData=false [" in log and "brokerServicePort=0 [--port]" in log


def test_unknown_keys_in_a_file_are_warned_about_and_the_broker_starts(tmp_path):
    conf = write(tmp_path / "broker.conf", "metadataStoreUrl=zk:1", "maxMesageSize=1", "# typo below",
                 "brokerServicePorts=6650", "webServicePort=8080")
    broker = Standalone(tmp_path / "data", args=["--config", str(conf)]).start()
    assert broker.stop() == 0
    log = broker.log()
    assert f"{conf}:2: unknown configuration key 'maxMesageSize'" in log
    assert f"{conf}:4: unknown configuration key 'brokerServicePorts'" in log
    assert "did you mean brokerServicePort" in log


def test_an_unknown_key_on_the_command_line_stops_the_start(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path / "data"), "-c", "brokerDeduplicationEnable=true")
    assert result.returncode == 2
    assert ("-c: unknown configuration key 'brokerDeduplicationEnable' (a key of neither magnetar nor any "
            "Pulsar release); did you mean brokerDeduplicationEnabled") in result.stderr


def test_pulsar_prefix_environment_beats_the_file(tmp_path):
    conf = write(tmp_path / "broker.conf", "maxMessageSize=1000", "keepAliveIntervalSeconds=7")
    broker = Standalone(tmp_path / "data", args=["--config", str(conf)],
                        env={"PULSAR_PREFIX_maxMessageSize": "2000"}).start()
    broker.stop()
    assert "maxMessageSize=2000 [environment (PULSAR_PREFIX_maxMessageSize)]" in broker.log()
    assert f"keepAliveIntervalSeconds=7 [{conf}:2]" in broker.log()


def test_c_beats_the_environment(tmp_path):
    broker = Standalone(tmp_path / "data", ["maxMessageSize=3000"],
                        env={"PULSAR_PREFIX_maxMessageSize": "big"}).start()
    broker.stop()
    assert "maxMessageSize=3000 [-c]" in broker.log()


def test_a_bad_value_from_the_environment_is_named(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path), env={"PULSAR_PREFIX_maxMessageSize": "big"})
    assert result.returncode == 2
    assert "environment (PULSAR_PREFIX_maxMessageSize): bad value 'big' for maxMessageSize" in result.stderr


def test_bad_log_level_is_refused_naming_the_flag(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path), "--log-level", "LOUD")
    assert result.returncode == 2
    assert "--log-level" in result.stderr and "'LOUD' is not a log level" in result.stderr


def test_every_magnetar_key_is_a_field():
    assert magnetar_keys() == {item.name for item in fields(ServiceConfiguration)}


def test_group_commit_wait_comes_from_journalMaxGroupWaitMSec():
    assert managed_ledger_config(ServiceConfiguration()).group_commit_max_delay_seconds == 0.001
    loaded = load_configuration(None, ["journalMaxGroupWaitMSec=0"]).config
    assert managed_ledger_config(loaded).group_commit_max_delay_seconds == 0
    with pytest.raises(ConfigError, match="journalMaxGroupWaitMSec must be 0 or positive, not -1"):
        load_configuration(None, ["journalMaxGroupWaitMSec=-1"])


# --- the rules on the fields (config.rules) ------------------------------------------------

RULED = [item for item in fields(ServiceConfiguration) if item.metadata.get("rule") is not None]
#: (refused, taken) at each rule's edge
EDGES = {Positive: ([0, -1], [1]), NotNegative: ([-1], [0]), Port: ([-1, 65536], [0, 65535]),
         OneOf: (["bogus"], []), NotEmpty: (["", " "], ["x"])}


def _problem(**values) -> str | None:
    try:
        ServiceConfiguration(**values).validate()
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("item", RULED, ids=[item.name for item in RULED])
def test_every_rule_refuses_past_its_edge_naming_the_key_and_takes_the_edge(item):
    rule = item.metadata["rule"]
    assert item.metadata["doc"], f"{item.name} has no doc line"
    refused, taken = EDGES[type(rule)]
    taken = taken or list(rule.choices)
    for value in refused:
        problem = _problem(**{item.name: value})
        assert problem is not None and problem.startswith(f"{item.name} must be "), (item.name, value, problem)
    for value in taken:
        assert _problem(**{item.name: value}) is None, (item.name, value)
    assert _problem(**{item.name: item.default}) is None


@pytest.mark.parametrize(("key", "value", "words"), [
    ("maxMessageSize", 0, "maxMessageSize must be positive, not 0"),
    ("tlsHandshakeTimeoutSeconds", -0.5, "tlsHandshakeTimeoutSeconds must be positive, not -0.5"),
    ("brokerMaxConnections", -1, "brokerMaxConnections must be 0 (no limit) or positive, not -1"),
    ("brokerServiceCompactionThresholdInBytes", -2,
     "brokerServiceCompactionThresholdInBytes must be 0 (never) or positive, not -2"),
    ("connectionMaxIdleMs", -1, "connectionMaxIdleMs must be 0 or positive, not -1"),
    ("entryFormat", "avro", "entryFormat must be 'pulsar' or 'kafka', not 'avro'"),
    ("backlogQuotaDefaultRetentionPolicy", "drop", "backlogQuotaDefaultRetentionPolicy must be one of "
     "producer_request_hold, producer_exception, consumer_backlog_eviction, not 'drop'"),
    ("schemaCompatibilityStrategy", "sideways", "schemaCompatibilityStrategy must be one of UNDEFINED, "),
    ("webServicePort", 70000, "webServicePort must be a port number (0-65535) or empty (off), not 70000"),
    ("messageExpiryCheckIntervalInMinutes", 0, "messageExpiryCheckIntervalInMinutes must be positive, not 0"),
])
def test_refusals_say_what_the_key_takes(key, value, words):
    assert (_problem(**{key: value}) or "").startswith(words)


def test_what_rules_leave_to_two_keys_together_and_what_they_allow():
    assert _problem(schemaCompatibilityStrategy="backward") is None  # any case
    assert _problem(tlsHandshakeTimeoutSeconds=0.01) is None  # positive, not at least 1
    assert _problem(webServicePort=None) is None
    assert _problem(brokerServicePort=None, brokerServicePortTls=6651) is None
    assert _problem(brokerServicePort=None) == ("brokerServicePort and brokerServicePortTls are both empty: clients "
                                                "could not connect")
    assert _problem(defaultNumPartitions=8, maxNumPartitionsPerPartitionedTopic=4) == (
        "defaultNumPartitions (8) exceeds maxNumPartitionsPerPartitionedTopic (4)")
