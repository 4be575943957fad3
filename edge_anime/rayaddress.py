"""A ``--ray ADDRESS`` as `batch` and `serve` take it: the head's HOST:PORT, and whether anything listens there.

Why a probe before ``ray.init``: against an address with no cluster behind it, ``ray.init`` retries for minutes
with log lines about its GCS that do not say which command-line value was wrong. Each command says the failure
in its own words and exit status; the parsing and the probe are this one piece.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Any

RAY_INSTALL_HINT = "pip install 'edge-anime[ray]'"  # what `batch --ray` and `serve --ray` say without Ray
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


def init_kwargs(address: str) -> dict[str, Any]:
    """``ray.init``'s arguments for ``--ray ADDRESS``. "local" is Ray's own "start a new cluster here": never
    None, which joins ``RAY_ADDRESS`` or the last cluster ``ray start`` ran on this box (issue 42: "local" sent
    work to other nodes, where local paths fail). A cluster started here is this box's alone (``_loopback_only``)
    and has no dashboard."""
    if address == "local":
        _loopback_only()
        return {"address": "local", "include_dashboard": False}
    return {"address": address}


def _loopback_only() -> None:
    """Make the cluster ``ray.init(address="local")`` starts listen on 127.0.0.1 only. Its node address is
    otherwise the box's LAN address (Ray turns ``_node_ip_address="127.0.0.1"`` back into it), and the
    Prometheus endpoints of its agent, dashboard and autoscaler then took 0.0.0.0 without auth (issue 42).
    Ray has one switch for a single-machine, loopback-only cluster: the one it sets itself on macOS and
    Windows, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``. It is read at import by every process Ray starts (they
    inherit this environment), and by the driver's already imported constants at ``ray.init``."""
    os.environ[_SINGLE_BOX_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        setattr(constants, "ENABLE_RAY_CLUSTER", False)  # noqa: B010 - a module attribute mypy cannot see


_SINGLE_BOX_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
