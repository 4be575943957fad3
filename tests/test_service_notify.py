"""sd_notify and journald detection in-process, on real sockets and real file descriptors."""
from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

import pytest

from edge_anime.logs import JsonFormatter, under_journald
from edge_anime.service.notify import Notifier


def test_notifier_sends_datagrams_to_a_path_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "n.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        monkeypatch.setenv("WATCHDOG_USEC", "2000000")
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        notifier = Notifier(str(path))
        assert notifier.enabled and notifier.watchdog_interval_s == pytest.approx(1.0)
        assert notifier.send(READY=1, STATUS="ready: 0 done")
        assert sock.recv(1024) == b"READY=1\nSTATUS=ready: 0 done"


def test_notifier_supports_abstract_sockets_and_is_silent_without_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"edge-anime-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        assert Notifier("@" + name).send(STOPPING=1)
        assert sock.recv(1024) == b"STOPPING=1"
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    quiet = Notifier()
    assert not quiet.enabled and quiet.send(READY=1) is False


def test_watchdog_pid_of_another_process_disables_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert Notifier("").watchdog_interval_s is None


def test_journald_is_detected_only_when_stderr_is_the_journal_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    st = os.fstat(sys.stderr.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert under_journald()
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")  # stderr redirected elsewhere
    assert not under_journald()


def test_json_lines_carry_the_per_image_fields() -> None:
    record = logging.LogRecord("edge_anime.service", logging.INFO, __file__, 1, "done %s", ("a.jpg",), None)
    record.fields = {"file": "a.jpg", "result": "done", "timings_s": {"infer": 0.02}}
    line = JsonFormatter(timestamps=False).format(record)
    assert line.startswith("{") and '"file": "a.jpg"' in line and '"ts"' not in line and '"msg": "done a.jpg"' in line
