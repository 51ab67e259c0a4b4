"""Pulsar Functions in Python: a worker that stores, deploys and supervises functions, and
the instance runtime each of their processes runs (Pulsar's process runtime).

Layering: above magnetar.admin (its REST routes use admin's JSON errors) and so above broker
and client; beside magnetar.spark, which it never imports; below magnetar.cli, whose
standalone builds the worker and hands the admin server its routes. The instance runtime
(`magnetar.functions.instance`) runs in a child process with the official `pulsar-client`
(the SDK a user's `from pulsar import Function` needs anyway) and imports nothing of the
broker. Enforced by import-linter (pyproject.toml).
"""
