"""`edge-anime batch` on this box (no Ray): exactly once, re-runs skip, failures listed, a kill -9 survived.

The real command in a real subprocess where a process is killed; the seeded-random IR and small photos.
The Ray side of the same command is tests/test_batch_ray.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG, EXIT_FAILURES, EXIT_OK
from edge_anime.fsutil import TEMP_PREFIX

STYLE = "randgen"  # the random IR's manifest name


def _finished(folder: Path) -> list[Path]:
    """The outputs renamed into place (pathlib's glob matches the hidden temp files too)."""
    return [p for p in folder.glob(f"*_{STYLE}.jpg") if not p.name.startswith(TEMP_PREFIX)] if folder.exists() else []


def _outputs(folder: Path) -> dict[str, float]:
    """Name (relative) -> mtime of every file under ``folder``, hidden temp files included."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_batch_writes_each_output_once_and_a_rerun_skips_them(
        tmp_path: Path, write_config: Callable[..., Path], make_photo: Callable[..., Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    inbox = tmp_path / "in"
    make_photo("a.jpg", 96, 64, folder=inbox)
    make_photo("b.png", 64, 80, folder=inbox, seed=1)
    make_photo("c.jpg", 80, 80, folder=inbox / "sub", seed=2)
    (inbox / "notes.jpg").write_text("not a picture\n", encoding="utf-8")
    out = tmp_path / "out"
    cfg = write_config()
    args = ["batch", str(inbox), "-r", "-o", str(out), "--config", str(cfg), "-q"]

    assert main(args) == EXIT_FAILURES
    first = capsys.readouterr()
    assert "batch: 3 written, 0 already done, 1 failed, of 4 input(s)" in first.out
    assert "notes.jpg" in first.err
    written = _outputs(out)
    assert set(written) == {f"a_{STYLE}.jpg", f"b_{STYLE}.jpg", f"sub/c_{STYLE}.jpg", "failed.jsonl"}
    [record] = [json.loads(line) for line in (out / "failed.jsonl").read_text().splitlines()]
    assert record["input"] == str((inbox / "notes.jpg").resolve()) and not record["bug"]
    assert "not a JPEG" in record["reason"]

    # A re-run writes no picture again (mtimes unchanged) and tries the failed input once more.
    assert main(args) == EXIT_FAILURES
    again = capsys.readouterr()
    assert "3 of 4 input(s) already done" in again.out
    assert "batch: 0 written, 3 already done, 1 failed" in again.out
    now = _outputs(out)
    assert {k: v for k, v in now.items() if k != "failed.jsonl"} == {
        k: v for k, v in written.items() if k != "failed.jsonl"}

    # Once the bad input is gone, the list of failures goes too: it always says what the last run left.
    (inbox / "notes.jpg").unlink()
    assert main(args) == EXIT_OK
    assert "failed.jsonl" not in _outputs(out)
    assert "batch: 0 written, 3 already done, 0 failed, of 3 input(s)" in capsys.readouterr().out


def test_batch_output_is_stylize_output(tmp_path: Path, write_config: Callable[..., Path],
                                        make_photo: Callable[..., Path]) -> None:
    """One core behind both commands: the same input gives the same bytes."""
    photo = make_photo("p.jpg", 120, 90, folder=tmp_path / "in")
    cfg = write_config()
    assert main(["batch", str(photo), "-o", str(tmp_path / "b"), "--config", str(cfg), "-q"]) == EXIT_OK
    assert main(["stylize", str(photo), "-o", str(tmp_path / "s"), "--config", str(cfg), "-q"]) == EXIT_OK
    name = f"p_{STYLE}.jpg"
    assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "s" / name).read_bytes()


def test_same_names_get_fixed_suffixes_and_leftover_temps_go(
        tmp_path: Path, write_config: Callable[..., Path], make_photo: Callable[..., Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two inputs named x.jpg in two folders: x_S.jpg and x_S-1.jpg, the same on every run (the order given),
    so a re-run finds both done. A temp file an interrupted write of one of this run's outputs left is
    removed; someone else's temp file in the same folder is not."""
    first = make_photo("x.jpg", 64, 64, folder=tmp_path / "one")
    second = make_photo("x.jpg", 72, 64, folder=tmp_path / "two", seed=3)
    out = tmp_path / "out"
    out.mkdir()
    ours = out / f"{TEMP_PREFIX}0123456789ab-x_{STYLE}.jpg"
    theirs = out / f"{TEMP_PREFIX}0123456789ab-other.jpg"
    for temp in (ours, theirs):
        temp.write_bytes(b"half a picture")
    args = ["batch", str(first), str(second), "-o", str(out), "--config", str(write_config()), "-q"]
    assert main(args) == EXIT_OK
    assert set(_outputs(out)) == {f"x_{STYLE}.jpg", f"x_{STYLE}-1.jpg", theirs.name}
    capsys.readouterr()
    assert main(args) == EXIT_OK
    assert "2 of 2 input(s) already done" in capsys.readouterr().out


# slow: ~50 s on a loaded box (24 photos at 256 px, two processes); a batch re-run skipping what is done is
# the fast tier's, in the tests above.
@pytest.mark.slow
def test_batch_killed_with_sigkill_resumes_exactly_once(
        tmp_path: Path, write_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """kill -9 in the middle of a backlog, then the same command again: every input exactly one output,
    no temp file left, and the second run said how many the first had finished."""
    inbox = tmp_path / "in"
    count = 24
    for i in range(count):
        make_photo(f"p{i:02d}.jpg", 256, 192, folder=inbox, seed=i)
    out = tmp_path / "out"
    cfg = write_config({"image": {"max_side": 256}})
    command = [sys.executable, "-m", "edge_anime", "batch", str(inbox), "-o", str(out), "--config", str(cfg), "-q"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + scaled(120)
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_finished(out)) >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(30))
    finally:
        if proc.poll() is None:
            proc.kill()
    finished_before = len(_finished(out))
    assert 3 <= finished_before < count

    again = subprocess.run(command, capture_output=True, text=True, timeout=scaled(300), check=False)
    assert again.returncode == EXIT_OK, again.stderr
    assert f"{finished_before} of {count} input(s) already done" in again.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"p{i:02d}_{STYLE}.jpg" for i in range(count)), names
    assert not any(name.startswith(TEMP_PREFIX) for name in names)


def test_unreachable_ray_head_is_named_at_once(tmp_path: Path, write_config: Callable[..., Path],
                                               make_photo: Callable[..., Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong --ray address fails in seconds naming it (ray.init alone retries for minutes), before any
    output folder is made."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    photo = make_photo("a.jpg", folder=tmp_path / "in")
    out = tmp_path / "out"
    started = time.monotonic()
    status = main(["batch", str(photo), "-o", str(out), "--config", str(write_config()), "--ray", f"127.0.0.1:{port}"])
    assert status == EXIT_CONFIG
    assert f"--ray 127.0.0.1:{port}: cannot reach the Ray head there" in capsys.readouterr().err
    assert time.monotonic() - started < 30 and not out.exists()


def test_an_actor_runs_the_engine_within_its_reserved_cpus(write_config: Callable[..., Path]) -> None:
    """Ray's CPU reservation is bookkeeping: an actor of 1 CPU on a 2-core box gets 1 inference thread (else two
    such actors run four streams on two cores); an actor holding the whole box, or a config that set the
    threads itself, keeps what the config says."""
    from edge_anime.batch.on_ray import within_reservation
    from edge_anime.config import load_config

    config = load_config(write_config())
    assert within_reservation(config, 1, host_cpus=2).device.inference_num_threads == 1
    assert within_reservation(config, 2, host_cpus=2) is config
    pinned = load_config(write_config({"device": {"inference_num_threads": 2}}, name="pinned.yaml"))
    assert within_reservation(pinned, 1, host_cpus=2) is pinned
