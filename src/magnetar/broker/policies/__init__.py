"""Tenants and namespaces (resources), the policies in effect for a topic (topic >
namespace > broker default, in topic_policies), and the values of the policies the
monitors and topics apply (retention, backlog quotas).

Layer rule: imports config and errors only; every layer above may use it.
"""
