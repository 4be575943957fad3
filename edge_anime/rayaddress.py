"""A ``--ray ADDRESS`` as `batch` and `serve` take it: the head's HOST:PORT, and whether anything listens there.

Why a probe before ``ray.init``: against an address with no cluster behind it, ``ray.init`` retries for minutes
with log lines about its GCS that do not say which command-line value was wrong. Each command says the failure
in its own words and exit status; the parsing and the probe are this one piece.
"""
from __future__ import annotations

import socket

DEFAULT_PORT = 6379  # `ray start --head`'s own default
CONNECT_TIMEOUT_S = 5.0  # the head's port must accept a connection within this


def head(address: str) -> tuple[str, int] | None:
    """(host, port) of a head address (the port defaults to Ray's); None for what Ray resolves itself ("local",
    "auto", a ray:// client address). ValueError for a port that is not a number."""
    if address in ("local", "auto") or "://" in address:
        return None
    host, _, port = address.rpartition(":") if ":" in address else (address, ":", str(DEFAULT_PORT))
    if not host:
        raise ValueError(f"no host in {address!r}")
    return host.strip("[]"), int(port)


def unreachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing answers at ``address`` (the OS's words), or None when its port accepts a connection or the
    address is one Ray resolves itself. ValueError as ``head``."""
    found = head(address)
    if found is None:
        return None
    try:
        socket.create_connection(found, timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
