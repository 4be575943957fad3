"""``runtime.isolated``: a function run in a fresh interpreter, its result and log lines brought back, every
way it can fail named, and no child left behind when the parent is killed. Real child processes throughout;
the targets are standard-library functions, so the child imports nothing of the tests."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.runtime import isolated

DEADLINE_S = scaled(30.0)


def test_the_result_comes_back_from_another_process() -> None:
    assert isolated.call(os.getpid, timeout=DEADLINE_S) != os.getpid()
    assert isolated.call(sorted, [3, 1, 2], timeout=DEADLINE_S) == [1, 2, 3]


def test_log_lines_arrive_as_if_logged_here(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        isolated.call(logging.warning, "screened %d of %d", 3, 9, timeout=DEADLINE_S)
    [record] = [r for r in caplog.records if r.getMessage() == "screened 3 of 9"]
    assert record.levelno == logging.WARNING and record.process != os.getpid()


def test_lines_below_the_level_that_shows_here_are_not_sent(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        isolated.call(logging.info, "too quiet to show", timeout=DEADLINE_S)
    assert "too quiet" not in caplog.text


def test_an_exception_in_the_child_is_named() -> None:
    with pytest.raises(isolated.IsolatedError, match=r"int in a child process: ValueError: invalid literal"):
        isolated.call(int, "twelve", timeout=DEADLINE_S)


def test_a_crash_in_the_child_is_named() -> None:
    with pytest.raises(isolated.IsolatedError, match=r"died of signal 6"):
        isolated.call(os.abort, timeout=DEADLINE_S)


def test_a_child_that_hangs_is_killed_at_its_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(isolated.IsolatedError, match=r"sleep in a child process: killed after 1 s"):
        isolated.call(time.sleep, 60, timeout=1.0)
    assert time.monotonic() - started < scaled(15)


def test_a_parent_killed_with_sigkill_takes_its_child_along(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from edge_anime.runtime import isolated
        print("calling", flush=True)
        isolated.call(time.sleep, 120, timeout=300)
    """), encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "calling"
        children: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while not children and time.monotonic() < deadline:
            children = _children(parent.pid)
            time.sleep(0.05)  # a poll with a deadline: the child's start is another process's business
        assert children, "the child process never started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in children), "the child outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(x) for x in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    """Running and not a zombie (a dead child of init is reaped at once, but a zombie still has a /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
