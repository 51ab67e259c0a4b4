"""The admin REST API: the broker's HTTP server of Pulsar's /admin/v2 paths (`server`, a
module per resource, and `web`, the HTTP/1.1 server they run on) and `AdminClient`, which
drives one from Python as pulsar-admin does.

Layering: above magnetar.broker and magnetar.client (the server reads and changes the broker's
topics, policies and configuration); may import those and everything below them (formats,
credentials, storage, wire, plugins). Never imports magnetar.spark, magnetar.cli or
magnetar.testing, which use it. `client` needs only the standard library, credentials and
wire, so a script loads no broker to administer one. Enforced by import-linter (pyproject.toml).
"""
