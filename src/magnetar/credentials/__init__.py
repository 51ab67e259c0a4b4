"""What a client presents to a broker: credentials under the official client's names and
its TLS settings. Below both magnetar.client and the admin client (and the Spark source),
so that none of them loads the others to authenticate.

Layering: beside magnetar.formats (neither imports the other), under magnetar.broker and
magnetar.client; imports only magnetar.wire and magnetar.plugins. Enforced by import-linter
(pyproject.toml).
"""
