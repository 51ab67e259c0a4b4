"""The transport layer: a client's connection (ServerCnx), framing and coalesced writes,
the commands it handles (producers' SENDs in connection, consumers' in consumer_commands,
lookups in lookup_commands), the checks a SEND passes before it is stored, connection
limits, advertised listeners and accept errors.

Layer rule: imports topics, features, policies, config and errors; never service (the
broker is seen as transport.seams.Broker) nor monitors.
"""
