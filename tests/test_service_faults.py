"""The service against faults of its own box and of hostile names: a real process, a real tmpfs, real signals.

Issue 13: a full state filesystem killed the service (exit 1/134, 70 at every restart) and a long one filed
good photos in failed/; early signals killed it; a damaged status file crashed `edge-anime status`; a
crafted name forged log lines. Each test here failed on the main of that time.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deadlines import scaled
from test_service import (
    START_DEADLINE_S,
    STOP_DEADLINE_S,
    WORK_DEADLINE_S,
    Service,
    _free_port,
    assert_decodes,
    claims_left,
    hidden,
    make_sources,
    start,
    visible,
    wait_until,
)
from test_watch_core import fill

from edge_anime.cli import main
from edge_anime.core import naming


@pytest.fixture
def state_fs(tmpfs: Path) -> Iterator[Path]:
    """watch.root on a 2 MiB tmpfs; whatever a test left there is removed before the unmount."""
    yield tmpfs
    for entry in tmpfs.iterdir():
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()


def metric(port: int, name: str) -> float | None:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@pytest.mark.slow
def test_full_state_disk_idle_then_busy_keeps_the_service_up_and_loses_nothing(
        config: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path,
        services: list[Service], state_fs: Path) -> None:
    port = _free_port()
    cfg = config({"watch": {"root": str(state_fs / "watch"),
                            "retry": {"initial_seconds": 0.2, "max_seconds": 0.5, "max_attempts": 2}},
                  "service": {"metrics": {"enabled": True, "port": port}}})
    svc = start(services, cfg, tmp_path / "service.log")
    inbox, outbox = svc.root / "inbox", svc.root / "outbox"
    # Idle and full: the status file cannot be written; the service used to exit 1 here.
    filler = fill(state_fs)
    wait_until(lambda: metric(port, "edge_anime_intake_paused") == 1.0, timeout_s=WORK_DEADLINE_S,
               what="intake paused (metrics)", proc=svc.proc, log=svc.log)
    assert "intake paused: disk full" in svc.log.read_text()
    # Busy and full: free the disk, let intake resume, fill it again while photos are being worked on.
    filler.unlink()
    wait_until(lambda: metric(port, "edge_anime_intake_paused") == 0.0, timeout_s=WORK_DEADLINE_S,
               what="intake resumed by itself", proc=svc.proc, log=svc.log)
    sources = make_sources(make_photo, tmp_path / "src", 30)
    for src in sources:
        shutil.copyfile(src, inbox / src.name)
    wait_until(lambda: visible(svc.root / "done"), timeout_s=WORK_DEADLINE_S, what="the batch under way",
               proc=svc.proc, log=svc.log)
    filler = fill(state_fs)
    wait_until(lambda: (metric(port, "edge_anime_intake_pauses_total") or 0) >= 2, timeout_s=WORK_DEADLINE_S,
               what="intake paused again while busy", proc=svc.proc, log=svc.log)
    assert len(visible(svc.root / "done")) < 30, "the batch finished before the disk filled: nothing tested"
    time.sleep(scaled(2.0))  # two max_attempts' worth of 0.5 s backoffs (as the box runs): nothing condemned
    assert svc.proc.poll() is None and visible(svc.root / "failed") == []
    filler.unlink()
    wait_until(lambda: len(visible(svc.root / "done")) == 30, timeout_s=WORK_DEADLINE_S,
               what="all 30 inputs done after the disk was freed", proc=svc.proc, log=svc.log)
    wait_until(lambda: (svc.status() or {}).get("state") == "ready", timeout_s=WORK_DEADLINE_S,
               what="the status file back to ready", proc=svc.proc, log=svc.log)
    assert metric(port, "edge_anime_intake_paused") == 0.0 and "intake resumed" in svc.log.read_text()
    assert len(visible(outbox)) == 30 and visible(svc.root / "failed") == [] and visible(inbox) == []
    for path in visible(outbox):
        assert_decodes(path)
    assert hidden(outbox) == [] and claims_left(svc.root / "work") == []
    assert svc.stop() == 0


@pytest.mark.slow
def test_restart_on_a_full_disk_comes_up_paused_and_resumes_by_itself(
        config: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path,
        services: list[Service], state_fs: Path) -> None:
    cfg = config({"watch": {"root": str(state_fs / "watch")}})
    first = start(services, cfg, tmp_path / "first.log")
    make_sources(make_photo, first.root / "inbox", 2)   # written into the inbox before the disk fills
    wait_until(lambda: len(visible(first.root / "done")) == 2, timeout_s=WORK_DEADLINE_S, what="2 done",
               proc=first.proc, log=first.log)
    filler = fill(state_fs)
    assert first.stop() == 0                              # stopping on a full disk is still a clean stop
    again = Service(cfg, tmp_path / "again.log")          # used to exit 70 (the pid in .lock, unguarded)
    services.append(again)
    wait_until(lambda: "ready: worker" in again.log.read_text(), timeout_s=START_DEADLINE_S,
               what="ready on a full disk", proc=again.proc, log=again.log)
    wait_until(lambda: "intake paused" in again.log.read_text(), timeout_s=WORK_DEADLINE_S,
               what="intake paused", proc=again.proc, log=again.log)
    filler.unlink()
    wait_until(lambda: (again.status() or {}).get("state") == "ready", timeout_s=WORK_DEADLINE_S,
               what="resumed by itself", proc=again.proc, log=again.log)
    shutil.copyfile(min(visible(first.root / "done")), again.root / "inbox" / "late.jpg")
    wait_until(lambda: (again.root / "done" / "late.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="a file after the resume", proc=again.proc, log=again.log)
    assert again.stop() == 0


# --- names -----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_names_near_name_max_and_a_log_forging_name(
        config: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path,
        services: list[Service]) -> None:
    svc = start(services, config(), tmp_path / "service.log")
    inbox = svc.root / "inbox"
    src = tmp_path / "src"
    good = make_photo("good.jpg", 64, 64, folder=src)
    lengths = (218, 230, 246, 255)
    for n in lengths:
        shutil.copyfile(good, inbox / ("L" * (n - 4) + ".jpg"))
        (inbox / ("B" * (n - 4) + ".jpg")).write_text("not a picture")
    forged = 'evil\n2030-01-01 00:00:00,000 INFO done "forged.jpg" 64x64 -> "x.jpg".jpg'
    (inbox / forged).write_text("not a picture either")
    wait_until(lambda: len(visible(svc.root / "done")) == len(lengths)
               and len(visible(svc.root / "failed")) == 2 * (len(lengths) + 1),
               timeout_s=WORK_DEADLINE_S, what="every long name done or failed with its report",
               proc=svc.proc, log=svc.log)
    outputs = visible(svc.root / "outbox")
    assert len(outputs) == len(lengths)
    assert all(p.suffix == ".jpg" and naming.name_bytes(p.name) <= naming.OUTPUT_MAX_BYTES for p in outputs)
    failed = visible(svc.root / "failed")
    reports = [p for p in failed if p.name.endswith(".error.json")]
    assert len(reports) == len(lengths) + 1
    for report in reports:
        assert Path(str(report).removesuffix(".error.json")).exists()
    # The status file is a snapshot rewritten each second (runner.STATUS_INTERVAL_SECONDS), so it lags the folders:
    # measured, done/ held 4 while it still said 1 done, 3 failed. The bad names fail at decode, before the good
    # ones are stylized, so the first snapshot with every failure can predate the last commits to done/: waiting
    # for the failed count alone and then reading processed read "2 of 4" under load (issue 42 item 15). Both
    # counts are waited for in one snapshot; counts that never match still fail here, at the deadline.
    wanted = {"processed": len(lengths), "failed": len(reports)}
    wait_until(lambda: {k: (svc.status() or {}).get("counts", {}).get(k) for k in wanted} == wanted,
               timeout_s=30, what=f"the status file's counts to match done/ and failed/: {wanted}",
               proc=svc.proc, log=svc.log)
    assert svc.stop() == 0
    text = svc.log.read_text()
    assert not any(line.startswith("2030-01-01") for line in text.splitlines())   # no forged line
    assert 'evil\\n2030-01-01' in text


# --- signals and the status command -----------------------------------------------------------------------

def _signals_safe(pid: int) -> bool:
    """The process has run ``hold()`` (SIGTERM and SIGHUP blocked) or installed its handlers (caught): the
    earliest moment the service promises to survive them (service/signals.py); before that it is the
    interpreter's own start, where the kernel's default action applies to any program."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
    except FileNotFoundError:
        return False
    wanted = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    return any(int(fields[key], 16) & wanted == wanted for key in ("SigBlk", "SigCgt"))


# The moments of a start, each marked by what the process shows: its signals held (the imports, the huge-pages
# re-exec, the config load), the engine's first line (compiling or compiled), its intake starting, ready. Fixed delays
# after the launch (0.15-1.2 s) stood for these on an idle box and fell before the first of them on a loaded one.
START_MOMENTS = {"held": None, "engine": "engine: ", "watching": "watching ", "ready": "ready: worker"}


@pytest.mark.parametrize("moment", list(START_MOMENTS))
def test_sigterm_at_any_moment_after_launch_exits_0(
        config: Callable[..., Path], tmp_path: Path, moment: str) -> None:
    log = tmp_path / "service.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "run", "--config", str(config())],
                                stdout=subprocess.DEVNULL, stderr=sink)
    try:
        line = START_MOMENTS[moment]
        wait_until(lambda: _signals_safe(proc.pid) if line is None else line in log.read_text(errors="replace"),
                   timeout_s=START_DEADLINE_S, what=f"the start's moment {moment!r}", proc=proc, log=log)
        proc.send_signal(signal.SIGHUP)                      # an early reload must not kill it either
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=START_DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text(errors="replace")[-2000:]


@pytest.mark.parametrize("damage", [{"pid": "x"}, {"pid": None}, {"pid": -1}, {"updated": "x", "counts": []}])
def test_status_command_survives_a_damaged_status_file(
        config: Callable[..., Path], tmp_path: Path, damage: dict[str, Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    """In-process through ``cli.main``, the entry point's own code (its top-level handler turns a crash into
    exit 70 and a traceback on stderr): the command reads a file, no process of its own is the point."""
    cfg = config()
    status_file = tmp_path / "watch" / "status.json"
    status_file.parent.mkdir(parents=True)
    data: dict[str, Any] = {"state": "ready", "host": os.uname().nodename, "pid": os.getpid(),
                            "updated": time.time(), "started": time.time(), "counts": {"processed": 1}}
    data.update(damage)
    if damage.get("pid", 0) is None:
        del data["pid"]
    status_file.write_text(json.dumps(data))
    # Every damage leaves the writer alive by the file's own rule (status_file.is_alive): a pid that is not a
    # positive integer falls back to the fresh "updated", and a damaged "updated" is not looked at while the
    # pid (this process) exists. So the answer is "running" (0), with the damaged fields shown as they are.
    assert main(["status", "--config", str(cfg)]) == 0
    text = capsys.readouterr()
    assert "state:     ready" in text.out and "Traceback" not in text.err, text.out + text.err
    assert main(["status", "--config", str(cfg), "--json"]) == 0
    as_json = capsys.readouterr()
    assert json.loads(as_json.out) == {**data, "alive": True} and "Traceback" not in as_json.err


def test_stop_is_quiet_and_a_short_drain_is_said_in_its_unit(
        config: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    svc = start(services, config({"service": {"drain_timeout_seconds": 0.2}}), tmp_path / "service.log")
    assert svc.stop(timeout_s=STOP_DEADLINE_S) == 0
    text = svc.log.read_text()
    assert "draining for up to 0.2 s" in text
    assert "queue_events" not in text and "Traceback" not in text
