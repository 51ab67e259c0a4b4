"""Topic names, table by table: the short forms expand as Pulsar expands them, and every
name Pulsar would refuse is refused with a message saying why."""

from __future__ import annotations

import pytest

from magnetar.wire.topic_name import InvalidTopicNameError, TopicName, check_entity_name


@pytest.mark.parametrize(("name", "expected"), [
    ("t", ("persistent", "public", "default", "t")),
    ("my-topic.v2", ("persistent", "public", "default", "my-topic.v2")),
    ("acme/ns/t", ("persistent", "acme", "ns", "t")),
    ("persistent://acme/ns/t", ("persistent", "acme", "ns", "t")),
    ("non-persistent://acme/ns/t", ("non-persistent", "acme", "ns", "t")),
    ("persistent://a_b-c=d:e.f/ns/t", ("persistent", "a_b-c=d:e.f", "ns", "t")),
    ("persistent://acme/ns/with space and ünïcode", ("persistent", "acme", "ns", "with space and ünïcode")),
    ("persistent://acme/ns/..t", ("persistent", "acme", "ns", "..t")),
    ("persistent://" + "t" * 255 + "/ns/" + "x" * 512, ("persistent", "t" * 255, "ns", "x" * 512)),
])
def test_names_expand_and_parse(name, expected):
    parsed = TopicName.parse(name)
    assert (parsed.domain, parsed.tenant, parsed.namespace, parsed.local_name) == expected
    assert str(parsed) == f"{expected[0]}://{expected[1]}/{expected[2]}/{expected[3]}"
    assert TopicName.parse(str(parsed)) == parsed
    assert TopicName.from_storage_name(parsed.storage_name) == parsed
    assert parsed.storage_name == f"{expected[1]}/{expected[2]}/{expected[0]}/{expected[3]}"
    assert parsed.namespace_name == f"{expected[1]}/{expected[2]}"
    assert parsed.persistent is (expected[0] == "persistent")


@pytest.mark.parametrize(("name", "reason"), [
    ("a/b", "invalid short topic name 'a/b': use 'topic' or 'tenant/namespace/topic'"),
    ("a/b/c/d", "invalid short topic name 'a/b/c/d'"),
    ("", "invalid topic name 'persistent://public/default/': expected persistent://tenant/namespace/topic"),
    ("http://acme/ns/t", "invalid topic domain 'http' in 'http://acme/ns/t'"),
    ("://acme/ns/t", "invalid topic domain ''"),
    ("persistent://acme/ns", "invalid topic name 'persistent://acme/ns': expected persistent://tenant/namespace/topic"),
    ("persistent://acme//t", "expected persistent://tenant/namespace/topic"),
    ("persistent:///ns/t", "expected persistent://tenant/namespace/topic"),
    ("persistent://acme/ns/", "expected persistent://tenant/namespace/topic"),
    ("persistent://ac me/ns/t", "invalid tenant name 'ac me': use letters, digits and _ - = : ."),
    ("persistent://acme/n$s/t", "invalid namespace name 'n$s'"),
    ("persistent://./ns/t", "invalid tenant name '.'"),
    ("persistent://acme/../t", "invalid namespace name '..'"),
    ("persistent://acmé/ns/t", "invalid tenant name 'acmé'"),
    ("persistent://acme/ns/a/b", "invalid topic name 'a/b': no '/', '.' or '..'"),
    ("persistent://acme/ns/.", "invalid topic name '.'"),
    ("persistent://acme/ns/..", "invalid topic name '..'"),
    ("persistent://acme/ns/a\nb", "invalid topic name 'a\\nb'"),
    ("persistent://acme/ns/a\x00b", "it holds U+0000"),
    ("persistent://" + "t" * 256 + "/ns/x", "tenant name of 256 characters exceeds 255"),
    ("persistent://acme/" + "n" * 256 + "/x", "namespace name of 256 characters exceeds 255"),
    ("persistent://acme/ns/" + "x" * 513, "topic name of 513 characters exceeds 512"),
    ("persistent://acme/ns/" + "x" * 200 + "/", "invalid topic name '" + "x" * 100 + "...': no '/'"),
])
def test_bad_names_are_refused_saying_why(name, reason):
    with pytest.raises(InvalidTopicNameError) as refused:
        TopicName.parse(name)
    assert reason in str(refused.value)


def test_entity_names_alone():
    check_entity_name("tenant", "a" * 255)
    with pytest.raises(InvalidTopicNameError, match="invalid cluster name ''"):
        check_entity_name("cluster", "")


@pytest.mark.parametrize(("local_name", "index", "base"), [
    ("t-partition-0", 0, "t"),
    ("t-partition-12", 12, "t"),
    ("a-partition-1-partition-3", 3, "a-partition-1"),
    ("t", -1, "t"),
    ("t-partition-", -1, "t-partition-"),
    ("t-partition-x", -1, "t-partition-x"),
    ("t-partition--1", -1, "t-partition--1"),
    ("-partition-2", -1, "-partition-2"),
])
def test_partitions(local_name, index, base):
    name = TopicName("persistent", "acme", "ns", local_name)
    assert name.partition_index == index
    assert name.partitioned_topic_name == TopicName("persistent", "acme", "ns", base)


def test_a_partition_of_a_name():
    name = TopicName.parse("acme/ns/t")
    assert str(name.partition(7)) == "persistent://acme/ns/t-partition-7"
    assert name.partition(7).partition_index == 7
    assert name.partition(7).partitioned_topic_name == name
