"""The watch core in-process: real folders and files, a fake clock, a fake pipeline, injected faults.

Each test drives ``WatchCore.step`` by hand, so every transient/permanent path, the retry schedule and
pause/resume are checked without threads, sleeps or a model. Disk-full cases run on a real tmpfs.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edge_anime.config import Config
from edge_anime.core import naming
from edge_anime.errors import InputError, ModelError, TransientError
from edge_anime.fsutil import write_atomic
from edge_anime.inputs import InputFilter
from edge_anime.watch.claim import Claim, WorkerDir
from edge_anime.watch.core import WatchCore
from edge_anime.watch.faults import StyleFault
from edge_anime.watch.folders import Folders, prepare_folders
from edge_anime.watch.handler import ERROR_SUFFIX, Handler, Outcome, Verdict

OUTPUT = b"stylized"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Source:
    names: list[str] = field(default_factory=list)
    rescans: int = 0

    def get(self, timeout: float) -> str | None:
        return self.names.pop(0) if self.names else None

    def request_rescan(self) -> None:
        self.rescans += 1


@dataclass
class Events:
    verdicts: list[tuple[str, Verdict]] = field(default_factory=list)
    pauses: list[str] = field(default_factory=list)
    resumes: int = 0
    room: list[tuple[str, int, int]] = field(default_factory=list)
    found: list[str] = field(default_factory=list)

    def verdict(self, claim: Claim, verdict: Verdict, result: Any | None) -> None:
        self.verdicts.append((claim.rel, verdict))

    def paused(self, reason: str) -> None:
        self.pauses.append(reason)

    def resumed(self, paused_s: float) -> None:
        self.resumes += 1

    def waiting_for_room(self, claim: Claim, needed: int, free: int) -> None:
        self.room.append((claim.rel, needed, free))

    def room_found(self, claim: Claim, free: int) -> None:
        self.found.append(claim.rel)

    def outcomes(self, outcome: Outcome) -> list[str]:
        return [rel for rel, v in self.verdicts if v.outcome is outcome]


class Rig:
    """A core over real folders under ``root``; the test plays the pipeline with ``finish``."""

    def __init__(self, root: Path, *, max_attempts: int = 3, template: str = "{stem}_{style}.{ext}",
                 style: str = "toon") -> None:
        self.config = Config.model_validate({
            "watch": {"root": str(root), "retry": {"initial_seconds": 1.0, "max_seconds": 4.0,
                                                   "max_attempts": max_attempts}},
            "output": {"name_template": template},
        })
        self.folders = Folders.from_config(self.config.watch)
        prepare_folders(self.folders)
        self.worker = WorkerDir(self.folders.work, "w1")
        self.worker.acquire()
        self.handler = Handler(config=self.config, folders=self.folders, worker=self.worker, style=style,
                               accept=InputFilter(self.config.watch), model_hash=lambda _style: "0" * 64)
        self.clock, self.source, self.events = Clock(), Source(), Events()
        self.submitted: list[tuple[Claim, Path]] = []
        self.probe_error: OSError | None = None
        self.core = WatchCore(handler=self.handler, worker=self.worker, source=self.source,
                              submit=lambda c, d: self.submitted.append((c, d)), probe=self._probe,
                              events=self.events, limit=2, clock=self.clock)

    def _probe(self) -> None:
        if self.probe_error is not None:
            raise self.probe_error

    def drop(self, name: str, data: bytes = b"photo") -> None:
        (self.folders.inbox / name).write_bytes(data)
        self.source.names.append(name)

    def run(self, steps: int = 5) -> None:
        for _ in range(steps):
            self.core.step(0.0)

    def finish(self, error: BaseException | None = None) -> None:
        """The pipeline's part: write the output (on success) and report the first submitted job."""
        claim, dst = self.submitted.pop(0)
        if error is None:
            write_atomic(dst, OUTPUT)
        self.core.done(claim, error)
        self.core.take_results(wait_s=0.0)

    def files(self, folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def disk_full(path: str = "out.jpg") -> TransientError:
    """What the pipeline raises when the outbox is full: a TransientError over the OSError."""
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    except OSError as exc:
        try:
            raise TransientError(f"{path}: cannot write output: No space left on device", stage="write") from exc
        except TransientError as transient:
            return transient
    raise AssertionError


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "w")
    yield r
    r.worker.release()


def test_success_moves_the_input_and_names_the_output(rig: Rig) -> None:
    rig.drop("a.jpg")
    rig.run()
    assert [d.name for _, d in rig.submitted] == ["a_toon.jpg"]
    rig.finish()
    assert rig.files(rig.folders.done) == ["a.jpg"] and rig.files(rig.folders.outbox) == ["a_toon.jpg"]
    assert rig.events.outcomes(Outcome.DONE) == ["a.jpg"]


def test_a_long_disk_full_never_condemns_an_input_and_intake_waits(rig: Rig) -> None:
    """max_attempts is 3: twenty disk-full rounds must still end in done/, and no new file is taken meanwhile."""
    rig.drop("a.jpg")
    rig.run()
    rig.probe_error = OSError(errno.ENOSPC, "No space left on device", str(rig.folders.work))
    for _ in range(20):
        rig.finish(disk_full())
        assert rig.core.pause is not None and "disk full" in rig.core.pause.reason
        rig.drop(f"new{_}.jpg")
        rig.run()
        assert rig.submitted == []                       # paused: nothing starts, nothing is claimed
        rig.clock.now += 10.0                            # probes fail: still paused
        rig.run()
        assert rig.core.pause is not None and rig.submitted == []
        rig.probe_error = None                           # space is back: the probe resumes intake
        rig.clock.now += 10.0
        rig.run(1)
        assert rig.core.pause is None
        assert [c.rel for c, _ in rig.submitted][:1] == ["a.jpg"]   # the held claim goes first
        rig.probe_error = OSError(errno.ENOSPC, "No space left on device", str(rig.folders.work))
        rig.submitted[1:] = []                           # only follow a.jpg in this test
    rig.finish()
    assert rig.files(rig.folders.failed) == []
    assert "a.jpg" in rig.files(rig.folders.done)
    assert len(rig.events.pauses) == 20 and rig.events.resumes == 20
    assert rig.events.outcomes(Outcome.FAILED) == []
    assert all(v.held for _, v in rig.events.verdicts if v.outcome is Outcome.RETRY)


def test_probe_backoff_doubles_up_to_retry_max_seconds(rig: Rig) -> None:
    rig.drop("a.jpg")
    rig.run()
    rig.probe_error = OSError(errno.EROFS, "Read-only file system", str(rig.folders.work))
    rig.finish(disk_full())
    pause = rig.core.pause
    assert pause is not None
    gaps = []
    for _ in range(5):
        before = pause.next_probe
        rig.clock.now = before
        rig.run(1)
        gaps.append(pause.next_probe - before)
    assert gaps == [2.0, 4.0, 4.0, 4.0, 4.0]             # initial 1 s, doubled, capped at max_seconds
    assert "read-only" in pause.reason


def test_input_error_goes_to_failed_at_once_with_its_report(rig: Rig) -> None:
    rig.drop("bad.jpg")
    rig.run()
    rig.finish(InputError("bad.jpg: not an image", stage="decode"))
    assert rig.files(rig.folders.failed) == ["bad.jpg", "bad.jpg" + ERROR_SUFFIX]
    report = json.loads((rig.folders.failed / ("bad.jpg" + ERROR_SUFFIX)).read_text())
    assert report["stage"] == "decode" and "not an image" in report["reason"]
    assert rig.core.pause is None


def test_a_transient_non_storage_error_retries_on_schedule_then_gives_up(rig: Rig) -> None:
    rig.drop("a.jpg")
    rig.run()
    delays = []
    for _ in range(2):
        rig.finish(TransientError("a.jpg: out of memory while decoding", stage="decode"))
        delays.append(rig.events.verdicts[-1][1].delay_s)
        rig.run()
        assert rig.submitted == []                       # not due yet
        rig.clock.now += delays[-1]
        rig.run()
    assert delays == [1.0, 2.0]
    rig.finish(TransientError("a.jpg: out of memory while decoding", stage="decode"))
    assert rig.files(rig.folders.failed) == ["a.jpg", "a.jpg" + ERROR_SUFFIX]
    assert "gave up after 3 attempts" in rig.events.verdicts[-1][1].reason
    assert rig.core.pause is None                        # not the box's fault: intake never paused


def test_a_job_the_pipeline_never_ran_is_requeued_without_an_attempt(rig: Rig) -> None:
    rig.drop("a.jpg")
    rig.run()
    rig.finish(TransientError("pipeline closed before the job ran", stage="queue"))
    rig.run()
    claim, _ = rig.submitted[0]
    assert claim.attempts == 0
    rig.finish()
    assert rig.files(rig.folders.done) == ["a.jpg"]


def test_a_bug_goes_to_failed_as_an_internal_error(rig: Rig) -> None:
    rig.drop("a.jpg")
    rig.run()
    rig.finish(ZeroDivisionError("division by zero"))
    verdict = rig.events.verdicts[-1][1]
    assert verdict.outcome is Outcome.FAILED and verdict.stage == "internal" and "ZeroDivisionError" in verdict.reason


def test_unusable_outbox_pauses_then_resumes_when_it_is_fixed(rig: Rig) -> None:
    """An OSError in the core's own steps (the outbox is a file) is the box's: held, not failed."""
    outbox = rig.folders.outbox
    outbox.rmdir()
    outbox.write_text("not a folder")
    rig.probe_error = OSError(errno.ENOTDIR, "Not a directory", str(outbox))
    rig.drop("sub.jpg")
    rig.run()
    assert rig.core.pause is not None and rig.submitted == []
    outbox.unlink()
    outbox.mkdir()
    rig.probe_error = None
    rig.clock.now += 5.0
    rig.run()
    rig.finish()
    assert rig.files(rig.folders.done) == ["sub.jpg"] and rig.files(rig.folders.failed) == []


# --- names near NAME_MAX, and names that would leave their folder -------------------------------------

@pytest.mark.parametrize("length", [200, 218, 226, 230, 246, 251, 255])
def test_names_near_name_max_are_processed_and_failed_ones_keep_their_report(rig: Rig, length: int) -> None:
    good = "g" * (length - 4) + ".jpg"
    bad = "b" * (length - 4) + ".jpg"
    rig.drop(good)
    rig.drop(bad)
    rig.run()
    rig.finish()
    rig.finish(InputError("not an image", stage="decode"))
    outputs = rig.files(rig.folders.outbox)
    assert len(outputs) == 1 and outputs[0].endswith(".jpg")
    assert naming.name_bytes(outputs[0]) <= naming.OUTPUT_MAX_BYTES
    failed = rig.files(rig.folders.failed)
    assert len(failed) == 2 and failed[1] == failed[0] + ERROR_SUFFIX     # the input and its report
    report = json.loads((rig.folders.failed / failed[1]).read_text())
    assert report["file"] == bad                                          # the original name is kept inside
    assert rig.events.outcomes(Outcome.FAILED) == [bad] and rig.events.outcomes(Outcome.DONE) == [good]
    assert rig.core.pause is None


def test_long_names_that_share_a_prefix_get_distinct_outputs(rig: Rig) -> None:
    names = ["x" * 240 + f"{i}.jpg" for i in range(3)] + ["x" * 240 + "0.png"]
    for name in names:
        rig.drop(name)
    rig.run(8)
    while rig.submitted:
        rig.finish()
        rig.run(2)
    outputs = rig.files(rig.folders.outbox)
    assert len(outputs) == 4 and len(set(outputs)) == 4
    assert rig.files(rig.folders.failed) == []


def test_a_style_with_slashes_never_writes_outside_the_outbox(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "w", template="{style}_{stem}.{ext}", style="../../ESCAPED")
    with pytest.raises(ModelError, match="ESCAPED"):
        naming.check_style(rig.config.output.name_template, "../../ESCAPED")
    rig.drop("a.jpg")
    rig.run()
    assert rig.submitted == []                                    # never reached the pipeline
    assert rig.files(rig.folders.failed) == ["a.jpg", "a.jpg" + ERROR_SUFFIX]
    assert "not a single file name" in rig.events.verdicts[-1][1].reason
    assert not any(tmp_path.rglob("*ESCAPED*"))
    rig.worker.release()


# --- a real full disk ------------------------------------------------------------------------------------

def fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; returns the filler (delete it to free)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 16, 1 << 12, 1):  # big blocks, then the last partial page byte by byte
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def test_a_real_full_disk_in_the_core_steps_holds_the_claim(tmpfs: Path) -> None:
    rig = Rig(tmpfs / "w", max_attempts=1)
    rig.core.probe = lambda: None
    filler = fill(tmpfs)
    rig.drop("a.jpg", b"")                                # an empty file fits on a full disk; claim.json not
    rig.run()
    assert rig.core.pause is not None and "disk full" in rig.core.pause.reason
    assert rig.files(rig.folders.failed) == [] and rig.submitted == []
    filler.unlink()
    rig.clock.now += 5.0
    rig.run()
    rig.finish()
    assert rig.files(rig.folders.done) == ["a.jpg"] and rig.files(rig.folders.failed) == []
    rig.worker.release()
    shutil.rmtree(tmpfs / "w")


def test_a_default_style_that_cannot_compile_pauses_intake_and_condemns_nothing(rig: Rig) -> None:
    """Issue 28 item 6, the default style: its folder is the inbox, so intake pauses (the shell's probe fails
    while the model is broken) and the claim is held however long it lasts; max_attempts (3) never counts."""
    rig.drop("a.jpg")
    rig.run()
    fault = StyleFault("toon", "OpenVINO cannot read the IR")
    rig.probe_error = fault  # type: ignore[assignment]  # the shell's probe: the default style is still broken
    rig.finish(fault)
    for _ in range(10):
        rig.clock.now += 10.0
        rig.drop(f"new{_}.jpg")
        rig.run()
        assert rig.core.pause is not None and "style 'toon' cannot be compiled" in rig.core.pause.reason
        assert rig.submitted == []
    rig.probe_error = None  # a reload cleared it: the probe passes, the held claim goes first
    rig.clock.now += 10.0
    rig.run(1)
    assert [c.rel for c, _ in rig.submitted][:1] == ["a.jpg"]
    rig.submitted[1:] = []
    rig.finish()
    assert rig.files(rig.folders.failed) == [] and "a.jpg" in rig.files(rig.folders.done)
    assert all(v.held for _, v in rig.events.verdicts if v.outcome is Outcome.RETRY)


def test_a_claim_that_needs_room_waits_for_it_and_says_so_once(rig: Rig) -> None:
    """Issue 28 item 7 in the core: a claim with ``needs_bytes`` starts only when its outbox has that much free;
    until then it is rescheduled (not started, not failed), and the shell hears of it once."""
    free = [1000]
    rig.core.room = lambda _folder: free[0]
    rig.drop("clip.mp4")
    rig.run()
    rig.probe_error = None
    claim, _dst = rig.submitted[0]
    claim.needs_bytes = 5000  # what the shell's estimate set when the disk ran full under it
    rig.finish(disk_full("clip.mp4"))
    for _ in range(10):
        rig.clock.now += 10.0
        rig.run()
        assert rig.submitted == [] and claim.token in rig.core.room_waits
    assert rig.events.room == [("clip.mp4", 5000, 1000)]
    free[0] = 6000
    rig.clock.now += 10.0
    rig.run()
    assert [c.rel for c, _ in rig.submitted] == ["clip.mp4"] and rig.core.room_waits == {}
    rig.finish()
    assert "clip.mp4" in rig.files(rig.folders.done) and rig.events.found == ["clip.mp4"]


def _new_life(rig: Rig) -> None:
    """The service died (nothing cleaned up, nothing finished) and started again over the same folders."""
    rig.submitted.clear()
    rig.core = WatchCore(handler=rig.handler, worker=rig.worker, source=rig.source,
                         submit=lambda c, d: rig.submitted.append((c, d)), probe=rig._probe,
                         events=rig.events, limit=2, clock=rig.clock)
    rig.core.recover_at_start()


def test_a_poison_pill_in_flight_across_max_crashes_goes_to_failed_and_the_rest_go_on(rig: Rig) -> None:
    """Issue 42 item 2: an input that kills the service each time it runs (a decode bomb and the OOM killer)
    used to be put back at every start and kill it again, and the photos behind it stayed in work/ for good."""
    for name in ("good_1.jpg", "bomb.jpg", "good_2.jpg"):
        rig.drop(name)
    lives, beside_a_suspect = 0, []
    rig.run(3)
    while lives < 6:
        names = [c.rel for c, _ in rig.submitted]
        if any(c.crashes for c, _ in rig.submitted):
            beside_a_suspect.append(names)
        if "bomb.jpg" in names:  # the pipeline dies with the bomb, taking whatever ran beside it
            lives += 1
            _new_life(rig)
            rig.run(3)
            continue
        if not rig.submitted:
            break
        rig.finish()
        rig.run(3)
    assert lives == 2  # the first death with the bomb in flight, the second with it alone; the third start fails it
    assert all(len(names) == 1 for names in beside_a_suspect), beside_a_suspect  # a suspect runs alone
    assert rig.files(rig.folders.failed) == ["bomb.jpg", "bomb.jpg.error.json"]
    report = json.loads((rig.folders.failed / "bomb.jpg.error.json").read_text())
    assert "stopped unexpectedly 2 times" in report["reason"] and "max_crashes" in report["reason"]
    assert rig.files(rig.folders.outbox) == ["good_1_toon.jpg", "good_2_toon.jpg"]
    assert rig.files(rig.folders.done) == ["good_1.jpg", "good_2.jpg"]


def test_an_attempt_that_ended_is_not_counted_as_a_crash(rig: Rig) -> None:
    """A transient failure ended its attempt (and was recorded); a later death while the claim only waited
    for its retry is no crash of that input."""
    rig.drop("slow.jpg")
    rig.run(2)
    rig.finish(TransientError("slow.jpg: out of memory while decoding", stage="decode"))
    _new_life(rig)
    (claim,) = list(rig.core._requeue)
    assert (claim.crashes, claim.attempts) == (0, 1)
