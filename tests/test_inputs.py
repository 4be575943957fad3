"""One rule for which files are inputs (edge_anime.inputs): the watch folder's scan, stylize's folders and
globs, and bench's folder take the same names from the same folder."""
from __future__ import annotations

import re
from pathlib import Path

from edge_anime.config import WatchSection
from edge_anime.inputs import InputFilter, collect_sources
from edge_anime.watch.detect import scan

NAMES = ["a.jpg", "B.PNG", ".hidden.jpg", "c.jpg.part", "d.crdownload", "~$e.jpg", "f.gif", "noext",
         "sub/g.jpg", ".git/h.jpg"]


def _tree(root: Path) -> Path:
    for name in NAMES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    (root / "linked").symlink_to(root / "sub")  # never entered: a link can lead out of the folder
    return root


def test_the_watch_folder_stylize_and_files_in_agree(tmp_path: Path) -> None:
    root = _tree(tmp_path / "in")
    for recursive, expected in ((False, ["B.PNG", "a.jpg"]), (True, ["B.PNG", "a.jpg", "sub/g.jpg"])):
        accept = InputFilter(WatchSection(recursive=recursive))
        watched = sorted(scan(root, accept))
        listed = [p.relative_to(root).as_posix() for p in accept.files_in(root)]
        sources, problems = collect_sources([str(root)], recursive=recursive, accept=accept)
        stylized = sorted(s.path.relative_to(root).as_posix() for s in sources)
        assert watched == listed == stylized == expected, recursive
        assert problems == []


def test_a_glob_takes_what_a_folder_would_and_a_named_file_is_always_tried(tmp_path: Path) -> None:
    root = _tree(tmp_path / "in")
    accept = InputFilter(WatchSection())
    sources, _ = collect_sources([str(root / "*.*")], recursive=False, accept=accept)
    assert sorted(s.path.name for s in sources) == ["B.PNG", "a.jpg"]
    named, problems = collect_sources([str(root / "f.gif")], recursive=False, accept=accept)
    assert [s.path.name for s in named] == ["f.gif"] and problems == []


def test_style_routes_are_entered_whatever_recursive_says_and_held_styles_never(tmp_path: Path) -> None:
    root = tmp_path / "in"
    for name in ("a.jpg", "toon/b.jpg", "toon/deep/c.jpg", "paprika/d.jpg", "other/e.jpg", ".toon/f.jpg"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    flat = InputFilter(WatchSection(), routes=("toon",), held=("paprika",))
    assert sorted(scan(root, flat)) == ["a.jpg", "toon/b.jpg"]
    deep = InputFilter(WatchSection(recursive=True), routes=("toon",), held=("paprika",))
    assert sorted(scan(root, deep)) == ["a.jpg", "other/e.jpg", "toon/b.jpg", "toon/deep/c.jpg"]
    assert [deep.style_of(r) for r in ("a.jpg", "toon/b.jpg", "toon/deep/c.jpg", "other/e.jpg", "toon")] == \
        [None, "toon", "toon", None, None]
    # A held name that is served again is a route, not held.
    again = InputFilter(WatchSection(), routes=("toon", "paprika"), held=("paprika",))
    assert sorted(scan(root, again)) == ["a.jpg", "paprika/d.jpg", "toon/b.jpg"]


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    """``read_regular`` and ``check_regular`` (every reader's way in, issue 28 item 9): a regular file is read
    whole, anything else is refused at once by what it is, a FIFO without waiting for a writer."""
    import os
    import socket

    import pytest

    from edge_anime.errors import InputError
    from edge_anime.inputs import check_regular, read_regular

    photo = tmp_path / "a.jpg"
    photo.write_bytes(b"\xff\xd8 bytes")
    (tmp_path / "link.jpg").symlink_to(photo)
    assert read_regular(photo) == read_regular(tmp_path / "link.jpg") == b"\xff\xd8 bytes"
    check_regular(photo)
    os.mkfifo(tmp_path / "fifo.jpg")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock.jpg"))
        for name, kind in (("fifo.jpg", "a FIFO (named pipe)"), ("sock.jpg", "a socket"), ("", "a directory")):
            for reader in (read_regular, check_regular):
                with pytest.raises(InputError, match=rf": is {re.escape(kind)}, not a regular file") as info:
                    reader(tmp_path / name)
                assert info.value.stage == "read" and str(tmp_path / name) in str(info.value)
    for reader in (read_regular, check_regular):
        with pytest.raises(InputError, match="is a character device"):
            reader(Path("/dev/zero"))
        with pytest.raises(InputError, match="no such file"):
            reader(tmp_path / "gone.jpg")
