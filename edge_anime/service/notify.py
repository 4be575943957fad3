"""systemd's notify protocol: one datagram of ``KEY=value`` lines to the socket named in $NOTIFY_SOCKET.

Written here rather than taken from PyPI's ``sdnotify``: the protocol is one ``sendto`` on an AF_UNIX
datagram socket, and that package (last release 2017) hides every send error, which would make a
misconfigured unit look healthy. Abstract sockets (a leading '@') are supported as systemd uses them.
"""
from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("edge_anime.service")


class Notifier:
    """Sends notifications when run under systemd (Type=notify); does nothing otherwise."""

    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self._sock: socket.socket | None = None
        if self.address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        # WATCHDOG_PID, when set, names the process the watchdog is meant for (not a child we started).
        self.watchdog_interval_s = (int(usec) / 1e6 / 2) if usec.isdigit() and (not pid or pid == str(os.getpid())) \
            else None

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: str | int) -> bool:
        """``send(READY=1, STATUS="...")``; False when not under systemd or the send failed (logged once)."""
        if self._sock is None:
            return False
        message = "\n".join(f"{k}={v}" for k, v in fields.items()).encode("utf-8", "replace")
        try:
            self._sock.sendto(message, self.address)
        except OSError as exc:
            log.warning("sd_notify to %r failed: %s; notifications disabled", self.address, exc)
            self.close()
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
