"""Huge pages: the environment `edge-anime` restarts itself with, and that the real CLI really runs with it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.runtime import host
from edge_anime.runtime.host import HUGE_PAGES_TUNABLE, OPT_OUT_ENV, huge_pages_environment, transparent_huge_pages

CLI_TIMEOUT_S = scaled(300)  # seconds; a loaded 2-core box, never reached when things work
SETTING = f"{HUGE_PAGES_TUNABLE}=1"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT_ENV)}


def _box_supports_it() -> bool:
    return huge_pages_environment(_clean_env()) is not None


@pytest.mark.box
def test_thp_mode_is_read_from_the_kernel_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mode_file = tmp_path / "enabled"
    monkeypatch.setattr(host, "THP_MODE_FILE", mode_file)
    assert transparent_huge_pages() is None  # no file: not Linux, or a kernel without THP
    for text, mode in (("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"),
                       ("always madvise [never]\n", "never")):
        mode_file.write_text(text, encoding="utf-8")
        assert transparent_huge_pages() == mode
    mode_file.write_text("always [madvise] never\n", encoding="utf-8")
    if huge_pages_environment(_clean_env()) is None:
        pytest.skip("this box's C library is not glibc >= 2.35: the tunable would do nothing")
    mode_file.write_text("[always] madvise never\n", encoding="utf-8")
    assert huge_pages_environment(_clean_env()) is None  # the kernel already gives every mapping huge pages
    mode_file.write_text("always madvise [never]\n", encoding="utf-8")
    assert huge_pages_environment(_clean_env()) is None  # and here it never will


@pytest.mark.box
@pytest.mark.skipif(not _box_supports_it(), reason="needs kernel THP 'madvise' and glibc >= 2.35")
def test_the_tunable_is_added_once_and_other_tunables_are_kept() -> None:
    env = huge_pages_environment({**_clean_env(), "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env is not None and env["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{SETTING}"
    assert huge_pages_environment(env) is None  # already there: no second restart
    assert huge_pages_environment({**_clean_env(), OPT_OUT_ENV: "0"}) is None


@pytest.mark.box
@pytest.mark.skipif(not _box_supports_it(), reason="needs kernel THP 'madvise' and glibc >= 2.35")
def test_the_cli_runs_inference_with_huge_pages_unless_opted_out(write_config: Callable[..., Path],
                                                                  make_photo: Callable[..., Path], random_ir: Path,
                                                                  tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    make_photo("p.jpg", 64, 64, seed=1, folder=photos)
    seen = {}
    for label, extra in (("default", {}), ("opted out", {OPT_OUT_ENV: "0"})):
        report_path = tmp_path / f"{label}.json"
        proc = subprocess.run(
            [sys.executable, "-m", "edge_anime", "bench", str(photos), "--config", str(write_config()),
             "--style", str(random_ir / "model.xml"), "--json", str(report_path), "--warmup", "0"],
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env={**_clean_env(), **extra})
        assert proc.returncode == 0, proc.stderr
        seen[label] = json.loads(report_path.read_text(encoding="utf-8"))["plugin"]["huge_pages"]
        assert f"huge pages {'on' if seen[label] else 'off'}" in proc.stdout
    assert seen == {"default": True, "opted out": False}

