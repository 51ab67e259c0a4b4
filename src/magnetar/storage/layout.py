"""Where storage keeps things: directory names in the data dir and keys in the metadata store.

All storage keys live under "storage/" so the broker can keep its own records in the same
metadata store without colliding.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

NEXT_LEDGER_ID_KEY = "storage/next-ledger-id"
NAMES_PREFIX = "storage/managed-ledgers/"
_MAX_DIR_NAME = 200


def escape(name: str) -> str:
    """A form of `name` with no '/' (keys stay a clean hierarchy) and no leading dots."""
    return quote(name, safe="").replace(".", "%2E")


def name_key(name: str) -> str:
    """Its presence says the managed ledger exists; listing the prefix lists names only."""
    return NAMES_PREFIX + escape(name)


def name_from_key(key: str) -> str:
    return unquote(key.removeprefix(NAMES_PREFIX))


def ml_prefix(name: str) -> str:
    """Every key of the managed ledger except its name key."""
    return f"storage/ml/{escape(name)}/"


def ledgers_prefix(name: str) -> str:
    return ml_prefix(name) + "ledgers/"


def ledger_key(name: str, ledger_id: int) -> str:
    # Zero-padded so that key order is ledger order.
    return f"{ledgers_prefix(name)}{ledger_id:020d}"


def cursors_prefix(name: str) -> str:
    return ml_prefix(name) + "cursors/"


def cursor_key(name: str, cursor: str) -> str:
    return cursors_prefix(name) + escape(cursor)


def cursor_name_from_key(name: str, key: str) -> str:
    return unquote(key.removeprefix(cursors_prefix(name)))


def properties_key(name: str) -> str:
    return ml_prefix(name) + "properties"


def directory_name(name: str) -> str:
    """A file name for the managed ledger's directory, readable when the name is short.

    Long names are cut and suffixed with a hash to stay under file-system name limits.
    """
    escaped = escape(name)
    if len(escaped) <= _MAX_DIR_NAME:
        return escaped
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{escaped[: _MAX_DIR_NAME - 17]}~{digest}"
