"""Issue 42, items 4, 5, 6, 13, 16 and 17: what `batch` and `stylize` name, take, refuse and show.

Each test runs the real command in a real subprocess (``python -m edge_anime``) on real files: the seeded-random
IR and small synthetic photos; storage faults on real tmpfs mounts (read-only, or filled), since root writes
into a mode-0555 folder anyway.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled

from conftest import REPO_ROOT, mounted_tmpfs
from edge_anime.errors import EXIT_CANTCREAT, EXIT_FAILURES, EXIT_IOERR, EXIT_OK

STYLE = "randgen"  # the random IR's manifest name
PAGE = 4096


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_anime", *map(str, args)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=scaled(300), check=False)


def _files(folder: Path) -> dict[str, bytes]:
    """Relative name -> bytes of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_item4_an_output_name_is_its_inputs_alone_and_no_other_input_is_counted_done(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """photo.png alone gets photo_S.jpg; once photo.jpg lies beside it, each gets a name with its own
    extension (photo_png_S.jpg, photo_jpg_S.jpg), both stylized: photo.jpg is never counted done by
    photo.png's output, the old output is left as it was and said, and the next run renames nothing.
    stylize names by the same rule."""
    inbox, out, cfg = tmp_path / "in", tmp_path / "out", narrow_config()
    make_photo("photo.png", 96, 64, folder=inbox, seed=1)
    first = _cli("batch", inbox, "-o", out, "--config", cfg, "-q")
    assert first.returncode == EXIT_OK, first.stderr
    assert set(_files(out)) == {f"photo_{STYLE}.jpg"}
    earlier = (out / f"photo_{STYLE}.jpg").read_bytes()

    make_photo("photo.jpg", 96, 64, folder=inbox, seed=2)
    second = _cli("batch", inbox, "-o", out, "--config", cfg, "-q")
    assert second.returncode == EXIT_OK, second.stderr
    assert "batch: 2 written, 0 already done, 0 failed, of 2 input(s)" in second.stdout, second.stdout
    assert f"left as they were: {out.resolve() / f'photo_{STYLE}.jpg'}" in second.stdout
    written = _files(out)
    assert set(written) == {f"photo_{STYLE}.jpg", f"photo_png_{STYLE}.jpg", f"photo_jpg_{STYLE}.jpg"}
    assert written[f"photo_{STYLE}.jpg"] == earlier
    assert written[f"photo_png_{STYLE}.jpg"] != written[f"photo_jpg_{STYLE}.jpg"]  # two photos, two pictures

    third = _cli("batch", inbox, "-o", out, "--config", cfg, "-q")
    assert third.returncode == EXIT_OK, third.stderr
    assert "batch: 0 written, 2 already done" in third.stdout and "left as they were" not in third.stdout
    assert _files(out) == written

    # One naming rule: stylize gives the same names, in a run of one of them too (the folder decides).
    assert _cli("stylize", inbox / "photo.jpg", "-o", tmp_path / "s", "--config", cfg, "-q").returncode == EXIT_OK
    assert set(_files(tmp_path / "s")) == {f"photo_jpg_{STYLE}.jpg"}

    # No clash, no change: a photo alone in its folder keeps the template's own name.
    make_photo("solo.png", 64, 64, folder=tmp_path / "other")
    assert _cli("batch", tmp_path / "other", "-o", out, "--config", cfg, "-q").returncode == EXIT_OK
    assert (out / f"solo_{STYLE}.jpg").is_file()


def test_item5_an_output_folder_inside_the_input_is_never_fed_back(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """`batch in -r -o in/out` three times: one output, no scene_S_S.jpg; the run says once which folder it
    did not take. The watch folder's own folders under the input (its outbox) are skipped the same way."""
    inbox = tmp_path / "in"
    cfg = narrow_config({"watch": {"root": str(inbox / "svc")}})
    make_photo("scene_26.jpg", 80, 64, folder=inbox)
    make_photo("ready_toon.jpg", 64, 64, folder=inbox / "svc" / "outbox")  # the service's output
    out = inbox / "out"
    for run in range(3):
        proc = _cli("batch", inbox, "-r", "-o", out, "--config", cfg, "-q")
        assert proc.returncode == EXIT_OK, proc.stderr
        said = [line for line in proc.stdout.splitlines() if line.startswith("not taken as input")]
        assert len(said) == 1, proc.stdout
        assert str((inbox / "svc" / "outbox").resolve()) in said[0] and "watch.outbox" in said[0]
        assert (str(out.resolve()) in said[0]) == (run > 0)  # the output folder exists from the first run on
        assert "of 1 input(s)" in proc.stdout, proc.stdout
    assert set(_files(out)) == {f"scene_26_{STYLE}.jpg"}

    stylized = _cli("stylize", inbox, "-r", "-o", out, "--config", cfg, "-q")
    assert stylized.returncode == EXIT_OK, stylized.stderr
    assert "stylized 1 of 1 input(s)" in stylized.stdout  # scene_26 once more (stylize never skips), no output
    assert not any("_toon_" in name or f"{STYLE}_{STYLE}" in name for name in _files(out))


def test_item5_an_output_folder_that_is_the_input_folder_takes_no_output_as_input(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """`batch photos -o photos` and `stylize photos -o photos`: the second run took photo_S.jpg as an input
    and wrote photo_S_S.jpg beside it. A file named as the output of an input beside it is not an input."""
    photos, cfg = tmp_path / "photos", narrow_config()
    make_photo("photo.jpg", 80, 64, folder=photos)
    make_photo("photo.png", 80, 64, folder=photos, seed=3)  # a clash: both named by their extension
    make_photo("other.jpg", 80, 64, folder=photos, seed=4)
    for run in range(3):
        proc = _cli("batch", photos, "-o", photos, "--config", cfg, "-q")
        assert proc.returncode == EXIT_OK, proc.stderr
        assert "of 3 input(s)" in proc.stdout, proc.stdout
        assert ("not taken as input: 3 file(s)" in proc.stdout) == (run > 0), proc.stdout
    stylized = _cli("stylize", photos, "-o", photos, "--config", cfg, "-q", "--overwrite")  # stylize never skips
    assert stylized.returncode == EXIT_OK, stylized.stderr
    assert "stylized 3 of 3 input(s)" in stylized.stdout, stylized.stdout
    assert sorted(_files(photos)) == sorted(["photo.jpg", "photo.png", "other.jpg", f"photo_jpg_{STYLE}.jpg",
                                             f"photo_png_{STYLE}.jpg", f"other_{STYLE}.jpg"])


def _full_but_one_page(folder: Path) -> None:
    """Fill the tmpfs at ``folder`` to one free page: the output folder takes the start's probe, and then no
    picture nor the list of failures (each over a page)."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    (folder / "fill").write_bytes(b"\0" * (free - PAGE))


def test_item6_a_disk_that_fails_the_writes_is_the_boxs_fault_with_each_inputs_reason(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """Every write fails for a full disk during the run, failed.jsonl included: exit 74 (EX_IOERR), each
    input's reason on the terminal, one line that blames the box and not the inputs; no "internal error",
    no traceback (it was exit 70 from an OSError writing failed.jsonl)."""
    inbox, cfg = tmp_path / "in", narrow_config()
    names = [f"{'p' * 170}_{i}.jpg" for i in range(8)]  # long names: the list of failures is over a page
    for i, name in enumerate(names):
        make_photo(name, 96, 64, folder=inbox, seed=i)
    for command in ("batch", "stylize"):
        with mounted_tmpfs(tmp_path / f"disk_{command}", "size=64k") as disk:
            _full_but_one_page(disk)
            proc = _cli(command, inbox, "-o", disk, "--config", cfg, "-q")
            assert proc.returncode == EXIT_IOERR, (command, proc.returncode, proc.stderr)
            assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
            for name in names:
                assert any(name in line and "No space left on device" in line
                           for line in proc.stderr.splitlines() if line.startswith("  ")), (command, name)
            assert "failed for this box's storage, not for the inputs" in proc.stderr
            if command == "batch":
                assert "failed.jsonl could not be written: No space left on device" in proc.stderr
            assert sorted(p.name for p in disk.iterdir()) == ["fill"]  # no picture, no temp file left


def _refused(command: str, out: Path, inbox: Path, cfg: Path) -> str:
    proc = _cli(command, inbox, "-o", out, "--config", cfg)
    assert proc.returncode == EXIT_CANTCREAT, (command, out, proc.returncode, proc.stderr)
    assert "engine: compiling" not in proc.stderr  # refused before any work
    return proc.stderr


def test_item17_an_unwritable_output_folder_is_refused_before_any_work(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """A read-only mount (and a folder below it), a file in place of the folder, a full disk and, where this
    user is not root (root writes into mode 0555 anyway), a mode-0555 folder: stylize and batch refuse each
    at once with exit 73 (EX_CANTCREAT) and a line naming the path, before compiling anything."""
    inbox, cfg = tmp_path / "in", narrow_config()
    make_photo("a.jpg", 64, 64, folder=inbox)
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n", encoding="utf-8")
    for command in ("stylize", "batch"):
        err = _refused(command, afile, inbox, cfg)
        assert f"{afile}: exists and is not a folder; expected a folder for the outputs (-o)" in err
        assert afile.read_text(encoding="utf-8") == "not a folder\n"
    with mounted_tmpfs(tmp_path / "ro", "ro") as ro:
        for command in ("stylize", "batch"):
            for out in (ro, ro / "sub"):
                err = _refused(command, out, inbox, cfg)
                assert f"{out}: cannot write into the output folder: Read-only file system" in err, err
    with mounted_tmpfs(tmp_path / "full", "size=64k") as full:
        free = os.statvfs(full).f_bavail * os.statvfs(full).f_frsize
        (full / "fill").write_bytes(b"\0" * free)
        for command in ("stylize", "batch"):
            err = _refused(command, full, inbox, cfg)
            assert f"{full}: cannot write into the output folder: No space left on device" in err, err
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        for command in ("stylize", "batch"):
            assert f"{locked}: cannot write into the output folder: Permission denied" in _refused(
                command, locked, inbox, cfg)


def _on_a_terminal(*args: str | Path) -> tuple[int, str]:
    """The command with stderr on a pseudo-terminal that reports no size (0 x 0, as a pty nobody sized):
    (exit status, what the terminal got)."""
    main_fd, sub_fd = pty.openpty()
    fcntl.ioctl(sub_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "edge_anime", *map(str, args)], cwd=REPO_ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sub_fd)
    os.close(sub_fd)
    chunks = []
    try:
        while True:
            try:
                data = os.read(main_fd, 65536)
            except OSError:  # EIO: the command closed its end
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(main_fd)
        status = proc.wait(timeout=scaled(300))
    return status, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow  # ~20 s loaded: two commands on a pseudo-terminal, read to the end
def test_item16_stylize_shows_pictures_done_on_a_terminal_of_no_reported_size(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """On a terminal that reports 0 x 0, tqdm drew nothing at all: stylize (and batch) were silent while the
    photos ran. Both now draw the bar with the pictures done; with stderr not a terminal, no bar."""
    inbox, cfg = tmp_path / "in", narrow_config()
    for i in range(2):
        make_photo(f"p{i}.jpg", 80, 64, folder=inbox, seed=i)
    for command in ("stylize", "batch"):
        status, screen = _on_a_terminal(command, inbox, "-o", tmp_path / f"out_{command}", "--config", cfg)
        assert status == EXIT_OK, screen
        assert "2/2" in screen and "img/s" in screen and "100%" in screen, (command, screen)
    piped = _cli("stylize", inbox, "-o", tmp_path / "piped", "--config", cfg)
    assert piped.returncode == EXIT_OK and "img/s" not in piped.stderr, piped.stderr


def test_item13_failed_list_keeps_a_command_line_input_with_a_colon_whole(
        tmp_path: Path, narrow_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """failed.jsonl's ``input`` of a command-line input that names nothing is the input as given, not the
    part before its first ':' (``in/a:b.jpg`` was ``in/a``)."""
    photo = make_photo("ok.jpg", 64, 64, folder=tmp_path / "in")
    missing = str(tmp_path / "in" / "a:b:c.jpg")
    out = tmp_path / "out"
    proc = _cli("batch", photo, missing, "-o", out, "--config", narrow_config(), "-q")
    assert proc.returncode == EXIT_FAILURES, proc.stderr
    [record] = [json.loads(line) for line in (out / "failed.jsonl").read_text(encoding="utf-8").splitlines()]
    assert record == {"input": missing, "reason": f"{missing}: no such file or folder", "bug": False}
