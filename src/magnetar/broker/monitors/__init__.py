"""What acts on the loaded topics from outside any client's request: the periodic checks
(message expiry, retention, backlog quotas, inactive topics and subscriptions, compaction
thresholds, on monitors.periodic's timers) and the revalidation of open producers and
consumers when permissions change. Each applies a rule that lives below it (topics,
policies, compaction); only when it runs is decided here.

Layer rule: imports topics, features, policies, config and errors; never service (the
broker is seen as monitors.registry.TopicRegistry) nor transport.
"""
