"""The admin REST API: the broker's resources under Pulsar's /admin/v2 paths, a module per
resource, the routes' authorization (`operations`, `security`), /metrics (`metrics`), and
`server`, which wires them, with their middlewares, onto magnetar.web's HTTP server.

The HTTP server itself is magnetar.web (the functions worker serves on it too), the REST
client magnetar.admin_client (`client` and `functions_client` here are its deprecated
paths), Prometheus' text format magnetar.prometheus.

Layering: above magnetar.broker (the resources read and change the broker's topics,
policies and configuration) and magnetar.web; may import those and everything below them.
Beside magnetar.functions, magnetar.spark and magnetar.kafka, which it never imports (the
standalone hands it the functions worker's routes); below magnetar.cli and magnetar.testing.
Enforced by import-linter (pyproject.toml).
"""
