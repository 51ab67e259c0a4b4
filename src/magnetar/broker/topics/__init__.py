"""What every topic is, stored or not: AbstractTopic and AbstractSubscription, producers
(with the in-order answers to their SENDs), consumers, consumer selection, per-topic
limits, counters; persistent/ and nonpersistent/ hold the two kinds.

Layer rule: imports features, policies, config and errors; never transport, monitors or
service. The broker around a topic is a context.BrokerContext the service builds, a
client's connection a cnx.TransportCnx. This package's own modules never import
persistent/ or nonpersistent/.
"""
