"""Kafka clients on magnetar: a protocol handler serving Kafka's wire protocol onto the broker's topics.

Layer: above magnetar.broker (it reaches topics and storage only through the narrow
`magnetar.broker.protocol_handlers` seam the broker hands it), below cli and testing.
The broker never imports this package: it loads the handler through the entry-point group
`magnetar.protocol_handlers` (name `kafka`) when `messagingProtocols` names it, as Pulsar
loads a protocol handler's NAR.

- protocol/: the sans-IO codec (framing, headers, message layouts through kio, record
  batches); it imports no asyncio and nothing above formats and wire.
"""
