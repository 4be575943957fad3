"""fsutil.locked: the one blocking file lock (the compile lock and the variant choice's lock both use it)."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from deadlines import scaled

from edge_anime.fsutil import locked


def test_a_second_holder_waits_until_the_first_leaves(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    order: list[str] = []
    entered = threading.Event()

    def second() -> None:
        with locked(lock):
            order.append("second")
            entered.set()

    with locked(lock):
        thread = threading.Thread(target=second, daemon=True)
        thread.start()
        assert not entered.wait(0.3)  # each ``open`` is its own lock holder, threads of one process included
        order.append("first")
    thread.join(timeout=30.0)
    assert order == ["first", "second"]


def test_the_lock_file_is_created_and_never_truncated(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with locked(lock):
        assert lock.exists()
    lock.write_text("pid 1\n")
    with locked(lock):
        pass
    assert lock.read_text() == "pid 1\n"


def test_another_process_is_kept_out_while_held(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    probe = ("import fcntl, sys\nfh = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n"
             "    sys.exit(3)\n")
    with locked(lock):
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=scaled(60))
    free = subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=scaled(60))
    assert (held.returncode, free.returncode) == (3, 0)
