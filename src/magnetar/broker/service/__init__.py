"""The top of the broker: BrokerService (broker_service) builds storage, policies, the
features, the topics' context, the monitors and the listening sockets, and owns the topic
registry and start/stop; config_checks holds the configuration checks that need features;
collector tunes the garbage collector once the broker is up.

Layer rule: nothing else in magnetar.broker imports this package. What lower layers need
of the service they name through their own seams (topics.context.BrokerContext,
transport.seams.Broker, monitors.registry.TopicRegistry), which BrokerService provides.
"""
