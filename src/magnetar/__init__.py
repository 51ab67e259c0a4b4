"""magnetar: a Pulsar-protocol message broker in Python, with a Spark data pipeline."""

__version__ = "0.1.0"
