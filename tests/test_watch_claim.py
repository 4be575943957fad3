"""Folders, claims, reservations and take-over of a dead worker's claims: real files, real processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edge_anime.config import WatchSection
from edge_anime.core.naming import suffixed
from edge_anime.errors import ConfigError
from edge_anime.fsutil import TEMP_PREFIX
from edge_anime.watch import claim as claim_module
from edge_anime.watch.claim import (
    WorkerDir,
    adopt_orphans,
    load_claim,
    release_name,
    remove_stale_temps,
    reserve_name,
    save_record,
    sweep_names,
)
from edge_anime.watch.folders import (
    Folders,
    move_noreplace,
    prepare_folders,
    rename_noreplace,
)


def _folders(root: Path, **over: Path) -> Folders:
    return Folders.from_config(WatchSection(root=root, **over))


def test_prepare_creates_missing_folders(tmp_path: Path) -> None:
    folders = _folders(tmp_path / "w")
    prepare_folders(folders)
    assert all(path.is_dir() for _, path in folders.items())


@pytest.mark.parametrize("key,sub", [("outbox", "inbox"), ("done", "inbox/done"), ("inbox", "work")])
def test_overlapping_folders_are_refused(tmp_path: Path, key: str, sub: str) -> None:
    with pytest.raises(ConfigError, match=r"watch\.\w+ .* overlap"):
        prepare_folders(_folders(tmp_path, **{key: tmp_path / sub}))


def test_unusable_folder_is_refused_with_its_key(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"watch\.failed: cannot create"):
        prepare_folders(_folders(tmp_path / "w", failed=blocker / "failed"))


def test_rename_noreplace_never_overwrites(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("A")
    b.write_text("B")
    with pytest.raises(FileExistsError):
        rename_noreplace(a, b)
    assert b.read_text() == "B" and a.read_text() == "A"
    target = move_noreplace(a, tmp_path, "b")
    assert target.name == "b-1" and target.read_text() == "A" and not a.exists()
    assert suffixed("x_toon.jpg", 2) == "x_toon-2.jpg" and suffixed(".jpg", 1) == ".jpg-1"


def test_claim_is_exclusive_and_keeps_odd_names(tmp_path: Path) -> None:
    folders = _folders(tmp_path)
    prepare_folders(folders)
    name = "spa ce\nnew-line ünï.jpg"
    (folders.inbox / name).write_bytes(b"data")
    one, two = WorkerDir(folders.work, "one"), WorkerDir(folders.work, "two")
    one.acquire()
    two.acquire()
    claim = one.claim(name, folders.inbox)
    assert claim is not None and claim.path.read_bytes() == b"data"
    assert two.claim(name, folders.inbox) is None  # already renamed away
    assert list(os.scandir(two.path)) and not any(e.is_dir() for e in os.scandir(two.path))
    save_record(claim)
    again = load_claim(claim.folder)
    assert again is not None and again.rel == name and again.path == claim.path


def test_same_worker_id_twice_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the wait for a lock an adopter holds briefly, 2 s, shortened: the holder here keeps it until it is killed
    monkeypatch.setattr(claim_module, "LOCK_RETRY_SECONDS", 0.2)
    holder = _lock_in_child(tmp_path, "box2")
    try:
        with pytest.raises(ConfigError, match="in use by another running worker"):
            WorkerDir(tmp_path, "box2").acquire()
    finally:
        holder.kill()
        holder.wait()


def _lock_in_child(work: Path, worker_id: str) -> subprocess.Popen[str]:
    """A real process that takes a worker folder and claims one file, then waits to be killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from edge_anime.watch.claim import WorkerDir, save_record
        w = WorkerDir(Path({str(work)!r}), {worker_id!r}); w.acquire()
        inbox = Path({str(work)!r}).parent / "inbox"
        for p in sorted(inbox.iterdir()) if inbox.is_dir() else []:
            c = w.claim(p.name, inbox)
            if c is not None:
                save_record(c)
        print("locked", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_only_dead_workers_claims_are_adopted(tmp_path: Path) -> None:
    folders = _folders(tmp_path)
    prepare_folders(folders)
    (folders.inbox / "a.jpg").write_bytes(b"a")
    alive = _lock_in_child(folders.work, "alive")
    (folders.inbox / "b.jpg").write_bytes(b"b")
    doomed = _lock_in_child(folders.work, "doomed")
    me = WorkerDir(folders.work, "me")
    me.acquire()
    try:
        assert adopt_orphans(me) == []  # both alive: nothing taken
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        adopted = adopt_orphans(me)
        assert len(adopted) == 1
        claim = load_claim(adopted[0])
        assert claim is not None and claim.rel == "b.jpg" and claim.path.read_bytes() == b"b"
        assert not (folders.work / "doomed").exists()
        assert (folders.work / "alive").is_dir()
        assert sorted(c.rel for c in me.claims()) == ["b.jpg"]
    finally:
        alive.kill()
        alive.wait()


def test_reservation_is_exclusive_and_released_only_by_owner(tmp_path: Path) -> None:
    assert reserve_name(tmp_path, "x_toon.jpg", "tok1")
    assert not reserve_name(tmp_path, "x_toon.jpg", "tok2")
    assert reserve_name(tmp_path, "x_toon.jpg", "tok1")  # the owner may ask again (a retry)
    release_name(tmp_path, "x_toon.jpg", "tok2")
    assert not reserve_name(tmp_path, "x_toon.jpg", "tok2")
    release_name(tmp_path, "x_toon.jpg", "tok1")
    assert reserve_name(tmp_path, "x_toon.jpg", "tok2")


def test_stale_temps_of_a_reserved_name_are_removed(tmp_path: Path) -> None:
    dst = tmp_path / "a_toon.jpg"
    stale = tmp_path / f"{TEMP_PREFIX}0123456789ab-a_toon.jpg"
    other = tmp_path / f"{TEMP_PREFIX}0123456789ab-b_toon.jpg"
    stale.write_bytes(b"half")
    other.write_bytes(b"someone else's")
    assert remove_stale_temps(dst) == 1
    assert not stale.exists() and other.exists()


def test_sweep_releases_only_reservations_whose_claim_is_gone(tmp_path: Path) -> None:
    """A crash between reserving and saving the record must not cost that output name forever."""
    folders = _folders(tmp_path)
    prepare_folders(folders)
    (folders.inbox / "a.jpg").write_bytes(b"data")
    worker = WorkerDir(folders.work, "one")
    worker.acquire()
    try:
        claim = worker.claim("a.jpg", folders.inbox)
        assert claim is not None
        assert reserve_name(folders.work, "a_toon.jpg", claim.token)   # a live claim's name
        assert reserve_name(folders.work, "b_toon.jpg", "crashed-token")  # no claim folder points here
        assert sweep_names(folders.work) == 1
        assert not reserve_name(folders.work, "a_toon.jpg", "other")  # still held by the live claim
        assert reserve_name(folders.work, "b_toon.jpg", "other")      # free again
    finally:
        worker.release()
