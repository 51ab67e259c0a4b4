"""Pulsar Functions in Python: a worker that stores, deploys and supervises functions, and
the instance runtime each of their processes runs (Pulsar's process runtime).

Layering: above magnetar.broker, magnetar.client and magnetar.web (its REST routes are served
on the admin API's HTTP server and answer Pulsar's JSON errors); beside magnetar.admin,
magnetar.spark and magnetar.kafka, which it never imports; below magnetar.cli, whose
standalone builds the worker and hands the admin server its routes. The instance runtime
(`magnetar.functions.instance`) runs in a child process with the official `pulsar-client`
(the SDK a user's `from pulsar import Function` needs anyway) and imports nothing of the
broker; EFFECTIVELY_ONCE on transactions (`magnetar.functions.txn_instance`) runs it on
magnetar.client, which has them, and imports nothing of the broker either. Enforced by
import-linter (pyproject.toml).
"""
