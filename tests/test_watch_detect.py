"""Detection: which inbox files are offered, and when. Real files, real inotify, real polling."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.config import WatchSection
from edge_anime.inputs import InputFilter
from edge_anime.watch.detect import (
    CREATED_SETTLE_SECONDS,
    MAX_TRACKED_FILES,
    READY_QUEUE_SIZE,
    Detector,
    scan,
)

DEADLINE_SECONDS = scaled(10.0)


def _watch(**over: object) -> WatchSection:
    base: dict[str, object] = {"settle_seconds": 0.3, "poll_interval_seconds": 0.05}
    base.update(over)
    return WatchSection(**base)  # type: ignore[arg-type]


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "inbox"
    path.mkdir()
    return path


@pytest.fixture
def detector_factory(inbox: Path) -> Iterator[object]:
    started: list[Detector] = []

    def make(**over: object) -> Detector:
        det = Detector(inbox, _watch(**over))
        det.start()
        started.append(det)
        return det

    yield make
    for det in started:
        det.stop()


def _collect(det: Detector, want: int, *, deadline_s: float = DEADLINE_SECONDS) -> list[str]:
    got: list[str] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        rel = det.get(timeout=0.05)
        if rel is not None:
            got.append(rel)
    return got


def test_name_filter_ignores_temp_and_partial_names() -> None:
    f = InputFilter(_watch())
    for name in [".a.jpg.Xy12Ab", "a.jpg.part", "a.tmp", "a.jpg.crdownload", "~$a.jpg", ".edge-anime-tmp-1-a.jpg",
                 "notes.txt", "noext"]:
        assert not f.accepts(name), name
    for name in ["a.jpg", "B.JPEG", "c d.png", "ü\nx.webp"]:
        assert f.accepts(name), name
    assert not f.accepts("sub/a.jpg")
    assert InputFilter(_watch(recursive=True)).accepts("sub/a.jpg")
    assert not InputFilter(_watch(recursive=True)).accepts(".hidden/a.jpg")


def test_scan_skips_folders_and_enters_them_only_when_recursive(inbox: Path) -> None:
    (inbox / "x.jpg").mkdir()
    (inbox / "x.jpg" / "in.jpg").write_bytes(b"1")
    (inbox / "a.jpg").write_bytes(b"1")
    os.symlink("/etc", inbox / "etc.jpg")
    assert sorted(scan(inbox, InputFilter(_watch()))) == ["a.jpg", "etc.jpg"]
    assert sorted(scan(inbox, InputFilter(_watch(recursive=True)))) == ["a.jpg", "etc.jpg", "x.jpg/in.jpg"]


@pytest.mark.parametrize("mode", ["polling", "auto"])
def test_slow_writer_is_offered_only_when_complete(inbox: Path, detector_factory: object, mode: str) -> None:
    # settle scaled to the box: a pause of the writer stretched by a loaded box must stay shorter than it
    det = detector_factory(detector=mode, settle_seconds=scaled(0.5))  # type: ignore[operator]
    path = inbox / "slow.jpg"
    with _offers(det, path) as offered:
        with open(path, "wb") as fh:  # one open file, written in chunks over ~1 s (pauses shorter than settle,
            for _ in range(5):        # the whole write twice as long)
                fh.write(b"x" * 1000)
                fh.flush()
                time.sleep(0.2)
        _until_offered(offered)
    assert offered and offered[0] == ("slow.jpg", 5000)


@contextlib.contextmanager
def _offers(det: Detector, path: Path) -> Iterator[list[tuple[str, int]]]:
    """Every name the detector offers while the block runs, with ``path``'s size at that moment."""
    offered: list[tuple[str, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            rel = det.get(timeout=0.02)
            if rel is not None:
                offered.append((rel, path.stat().st_size))

    reader = threading.Thread(target=watch)
    reader.start()
    try:
        yield offered
    finally:
        done.set()
        reader.join()


def _until_offered(offered: list[tuple[str, int]]) -> None:
    end = time.monotonic() + DEADLINE_SECONDS
    while not offered and time.monotonic() < end:
        time.sleep(0.02)


def test_inotify_sees_cp_and_rsync_style_rename_and_moved_in(inbox: Path, tmp_path: Path,
                                                              detector_factory: object) -> None:
    settle = scaled(1.0)  # a loaded box's moved-to offers take longer too: the gap to settle keeps its proportion
    det = detector_factory(detector="inotify", settle_seconds=settle)  # type: ignore[operator]
    assert det.mode == "inotify"
    (inbox / "cp.jpg").write_bytes(b"cp")                      # close-write: settles from the close
    tmp = inbox / ".rs.jpg.AbC123"                             # rsync: temp dotfile, then rename
    tmp.write_bytes(b"rs")
    tmp.rename(inbox / "rs.jpg")
    outside = tmp_path / "mv.jpg"
    outside.write_bytes(b"mv")
    shutil.move(str(outside), inbox / "mv.jpg")               # moved in from elsewhere
    fast = _collect(det, 2, deadline_s=0.75 * settle)  # only moved-to events can offer them before settle
    assert sorted(fast) == ["mv.jpg", "rs.jpg"]
    for rel in fast:  # taken, as the service's claim would (else the start's rescan may offer one again)
        (inbox / rel).unlink()
    assert _collect(det, 1, deadline_s=settle + DEADLINE_SECONDS) == ["cp.jpg"]


def test_a_writer_that_closes_and_reopens_to_append_arrives_as_one_file(inbox: Path,
                                                                        detector_factory: object) -> None:
    """Issue 13 item 4: ten opens for append used to be ten fragments (g.jpg, g-1.jpg...) in failed/."""
    det = detector_factory(detector="inotify", settle_seconds=scaled(0.5))  # type: ignore[operator]
    path = inbox / "g.jpg"
    with _offers(det, path) as offered:
        for _ in range(6):  # close and reopen every 0.2 s (0.4 of settle): each close is a close-write event
            with open(path, "ab") as fh:
                fh.write(b"x" * 1000)
            time.sleep(0.2)
        _until_offered(offered)
        time.sleep(0.3)  # a second offer, were there one, would come within a poll or two
    assert offered == [("g.jpg", 6000)]


@pytest.mark.slow
def test_ten_thousand_waiting_files_keep_the_detector_bounded(inbox: Path, detector_factory: object) -> None:
    count = 10_000
    for i in range(count):
        (inbox / f"f{i:05d}.jpg").touch()
    det = detector_factory(detector="polling", settle_seconds=0.05, poll_interval_seconds=0.01)  # type: ignore[operator]
    peak = 0
    seen: set[str] = set()
    end = time.monotonic() + scaled(60)
    while len(seen) < count and time.monotonic() < end:
        peak = max(peak, det.pending())
        rel = det.get(timeout=0.05)
        if rel is not None:
            seen.add(rel)
            os.unlink(inbox / rel)  # the service would claim it
    assert len(seen) == count
    assert peak <= MAX_TRACKED_FILES + READY_QUEUE_SIZE


def test_inotify_takes_links_that_never_get_a_close_write(inbox: Path, tmp_path: Path,
                                                        detector_factory: object) -> None:
    det = detector_factory(detector="inotify", settle_seconds=0.3)  # type: ignore[operator]
    original = tmp_path / "orig.jpg"
    original.write_bytes(b"x")
    os.link(original, inbox / "hard.jpg")
    os.symlink("/etc/passwd", inbox / "soft.jpg")
    assert sorted(_collect(det, 2, deadline_s=DEADLINE_SECONDS)) == ["hard.jpg", "soft.jpg"]


def test_rescan_before_the_create_event_still_waits_for_close_write(inbox: Path) -> None:
    """A rescan that tracks a half-written file first must not let it go after settle_seconds."""
    now = [0.0]
    det = Detector(inbox, _watch(settle_seconds=0.3), clock=lambda: now[0])  # not started: tick by hand
    with open(inbox / "slow.jpg", "wb") as fh:  # open, like a slow writer that pauses
        fh.write(b"x" * 100)
        fh.flush()
        det.tick()             # the rescan finds it first
        det.on_created("slow.jpg")
        now[0] += 5.0          # far past settle_seconds, the writer paused
        det.tick()
        det.tick()
        assert det.get(timeout=0) is None
    now[0] += CREATED_SETTLE_SECONDS + 1.0  # the last resort for a lost close-write still applies
    det.tick()
    assert det.get(timeout=0) == "slow.jpg"


def test_stop_removes_the_overflow_hook_from_watchdogs_logger(detector_factory: object) -> None:
    watchdog_log = logging.getLogger("watchdog.observers.inotify_c")
    before = list(watchdog_log.handlers)
    det = detector_factory(detector="inotify")  # type: ignore[operator]
    assert len(watchdog_log.handlers) == len(before) + 1
    det.stop()
    assert watchdog_log.handlers == before


MAX_QUEUED_EVENTS = Path("/proc/sys/fs/inotify/max_queued_events")


@pytest.mark.box
def test_an_inotify_queue_overflow_is_detected_and_rescanned_at_once(inbox: Path) -> None:
    """A 16-event inotify queue (the sysctl is read once, at inotify_init) overflows under 600 new files;
    every file must still be offered long before the 60 s safety-net rescan."""
    try:
        original = MAX_QUEUED_EVENTS.read_text()
        MAX_QUEUED_EVENTS.write_text("16")
    except OSError as exc:
        pytest.skip(f"cannot set {MAX_QUEUED_EVENTS} here: {exc}")
    try:
        det = Detector(inbox, _watch(detector="inotify", settle_seconds=0.2))
        det.start()
    finally:
        MAX_QUEUED_EVENTS.write_text(original)  # only this detector's queue is small
    try:
        names = [f"f{i:04d}.jpg" for i in range(600)]
        subprocess.run(["touch", *names], cwd=inbox, check=True)  # one burst, at C speed: ~1,800 events
        got: set[str] = set()
        end = time.monotonic() + scaled(20.0)
        while len(got) < len(names) and time.monotonic() < end:
            rel = det.get(timeout=0.05)
            if rel is not None:
                got.add(rel)
                (inbox / rel).unlink()  # taken, as the service's claim would
        assert det.overflows >= 1
        assert sorted(got) == names
    finally:
        det.stop()


def _wait_for_log(caplog: pytest.LogCaptureFixture, text: str, *, deadline_s: float = DEADLINE_SECONDS) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if any(text in r.getMessage() for r in caplog.records):
            return
        time.sleep(0.02)
    raise AssertionError(f"no log line with {text!r} within {deadline_s} s")


def test_a_file_that_will_never_be_taken_is_said_once(inbox: Path, detector_factory: object,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A .gif or a name without extension stays in the inbox: one log line each, however often the folder is
    scanned; uploads in progress (hidden, .part) stay quiet."""
    caplog.set_level(logging.INFO, logger="edge_anime.watch")
    for name in ("a.gif", "noext", ".hidden.gif", "b.jpg.part"):
        (inbox / name).write_bytes(b"x")
    det = detector_factory(detector="polling")  # type: ignore[operator]
    _wait_for_log(caplog, "skipped noext")
    _wait_for_log(caplog, "skipped a.gif: its extension is not in watch.extensions")
    ticks_before = sum("skipped" in r.getMessage() for r in caplog.records)
    (inbox / "c.jpg").write_bytes(b"y")
    assert _collect(det, 1) == ["c.jpg"]  # several polling rescans later
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == ticks_before == 2, skipped


def test_a_file_that_will_never_be_taken_is_said_when_it_lands(inbox: Path, tmp_path: Path,
                                                               detector_factory: object,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Issue 42 item 18: with inotify such a file was only said at the next full rescan, a minute after it
    landed. Now at its create or move event: copied in, or renamed in whole."""
    caplog.set_level(logging.INFO, logger="edge_anime.watch")
    det = detector_factory(detector="inotify")  # type: ignore[operator]
    assert det.mode == "inotify"
    (inbox / "ready.jpg").write_bytes(b"x")
    assert _collect(det, 1) == ["ready.jpg"]  # watching: the first scan is behind us
    (inbox / "copied.gif").write_bytes(b"x")
    _wait_for_log(caplog, "skipped copied.gif: its extension is not in watch.extensions", deadline_s=scaled(5.0))
    (tmp_path / "moved.heix").write_bytes(b"x")
    os.replace(tmp_path / "moved.heix", inbox / "moved.heix")
    _wait_for_log(caplog, "skipped moved.heix: its extension is not in watch.extensions", deadline_s=scaled(5.0))
    (inbox / "upload.gif.part").write_bytes(b"x")  # an upload in progress stays quiet
    (inbox / "after.jpg").write_bytes(b"y")
    assert _collect(det, 1) == ["after.jpg"]
    said = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(said) == 2 and not any("upload" in line for line in said), said


def test_a_deleted_and_recreated_inbox_is_said_and_watched_again_at_once(
        inbox: Path, tmp_path: Path, detector_factory: object, caplog: pytest.LogCaptureFixture) -> None:
    """inotify's watch dies with the folder: the detector says so, and on its return sets a new watch and
    rescans, so a file dropped then is offered in seconds, not at the 60 s rescan."""
    caplog.set_level(logging.INFO, logger="edge_anime.watch")
    det = detector_factory(detector="inotify")  # type: ignore[operator]
    assert det.mode == "inotify"
    shutil.rmtree(inbox)
    _wait_for_log(caplog, f"inbox {inbox} is gone")
    inbox.mkdir()
    _wait_for_log(caplog, f"inbox {inbox} is back")
    (tmp_path / "d.jpg").write_bytes(b"z")
    os.replace(tmp_path / "d.jpg", inbox / "d.jpg")
    assert _collect(det, 1) == ["d.jpg"]


def test_a_linked_style_folder_and_a_look_alike_folder_are_said_for_what_they_are(
        inbox: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 28 items 14 and 16: a symlinked style folder was logged as a file of the wrong extension, and a
    folder spelt like a style in another Unicode form (the NFD `café` a Mac writes) was never read, silently."""
    caplog.set_level(logging.INFO, logger="edge_anime.watch")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.jpg").write_bytes(b"x")
    (inbox / "toon").symlink_to(elsewhere)
    nfd = "cafe\u0301"
    (inbox / nfd).mkdir()
    (inbox / nfd / "b.jpg").write_bytes(b"y")
    (inbox / "other").mkdir()  # an ordinary folder (not recursive): nothing to say about it
    (inbox / "c.jpg").write_bytes(b"z")
    watch = _watch(detector="polling")
    det = Detector(inbox, watch, accept=InputFilter(watch, routes=["toon", "caf\u00e9"]))
    det.start()
    try:
        assert _collect(det, 1) == ["c.jpg"]
        _wait_for_log(caplog, "skipped toon: a symbolic link to a folder: links are never followed")
        _wait_for_log(caplog, f"skipped {nfd}/: a folder spelt like style 'caf\u00e9' but not its folder")
    finally:
        det.stop()
    messages = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert not any("extension" in m for m in messages), messages
    assert len(messages) == 2 and not any("skipped other" in m for m in messages), messages
    assert os.path.exists(inbox / nfd / "b.jpg") and os.path.exists(elsewhere / "a.jpg")


def test_a_look_alike_folder_in_recursive_mode_is_said_to_get_the_default_style(
        inbox: Path, caplog: pytest.LogCaptureFixture) -> None:
    """watch.recursive enters the NFD `café/` as a plain folder: its files go, in the default style, not in
    style café; the log says so once, however often the inbox is scanned."""
    caplog.set_level(logging.INFO, logger="edge_anime.watch")
    nfd = "cafe\u0301"
    (inbox / nfd).mkdir()
    (inbox / nfd / "b.jpg").write_bytes(b"y")
    watch = _watch(detector="polling", recursive=True)
    det = Detector(inbox, watch, accept=InputFilter(watch, routes=["caf\u00e9"]))
    det.start()
    try:
        assert _collect(det, 1) == [f"{nfd}/b.jpg"]
        _wait_for_log(caplog, f"{nfd}/: a folder spelt like style 'caf\u00e9' but not its folder (another Unicode "
                      "form or case): its files are taken as a plain folder in the default style")
        (inbox / "c.jpg").write_bytes(b"z")
        assert _collect(det, 1) == ["c.jpg"]  # several polling rescans later
    finally:
        det.stop()
    assert sum("spelt like" in r.getMessage() for r in caplog.records) == 1
