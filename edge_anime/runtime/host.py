"""Facts about the box this process runs on, that sizing decisions (threads, the bench's CPU share) need."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def usable_cores() -> int:
    """CPUs this process may run on: the affinity mask (taskset, systemd ``CPUAffinity=``, a container's
    cpuset), not the machine's count.

    Why: against the machine's count a service pinned to 2 of 16 cores would size 16-core thread pools and
    report 12 % CPU utilisation while both of its cores are busy.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


# glibc's malloc asks the kernel for transparent huge pages (madvise) when this tunable is 1 (glibc >= 2.35).
# OpenVINO's CPU plugin and numpy take their big buffers from malloc, so with it the activations of one
# inference sit in 2 MB pages instead of 4 kB ones: f32 inference at 512 px ran 10-24 % faster on our boxes
# (a VM, where every TLB miss walks two page tables) for ~5 MB more RSS (benchmarks/huge_pages.py).
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb"
THP_MODE_FILE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
OPT_OUT_ENV = "EDGE_ANIME_HUGE_PAGES"  # "0" keeps glibc's default


def transparent_huge_pages() -> str | None:
    """The kernel's THP mode ("always", "madvise" or "never"); None where the kernel has none."""
    try:
        match = re.search(r"\[(\w+)\]", THP_MODE_FILE.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def huge_pages_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process's big buffers get huge pages: the kernel gives them to every mapping, or glibc
    was started with the tunable and the kernel honours madvise."""
    mode = transparent_huge_pages()
    return mode == "always" or (mode == "madvise" and f"{HUGE_PAGES_TUNABLE}=1" in environ.get("GLIBC_TUNABLES", ""))


def huge_pages_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """The environment to restart this process with so malloc asks for huge pages; None when that would
    change nothing (already on, kernel THP "always" or "never", not glibc >= 2.35) or the operator opted out.

    Why an environment and a re-exec: glibc reads its tunables once, at process start; nothing a running
    Python process can call switches it on for the allocations OpenVINO makes later.
    """
    if environ.get(OPT_OUT_ENV, "1") == "0" or HUGE_PAGES_TUNABLE in environ.get("GLIBC_TUNABLES", ""):
        return None
    if transparent_huge_pages() != "madvise":
        return None
    libc, version = platform.libc_ver()
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    if libc != "glibc" or major_minor < (2, 35):
        return None
    env = dict(environ)
    setting = f"{HUGE_PAGES_TUNABLE}=1"
    env["GLIBC_TUNABLES"] = f"{env['GLIBC_TUNABLES']}:{setting}" if env.get("GLIBC_TUNABLES") else setting
    return env


def skip_model_converter() -> None:
    """Keep ``import openvino`` from importing its model converter in a process that only runs models.

    ``openvino/__init__`` imports ``openvino.tools.ovc`` when it is installed (for ``ov.convert_model``),
    inside a ``try/except ImportError``. That import scans every installed distribution's metadata, pulls in
    numpy.ma and starts OVC's telemetry: ~0.15 s of CPU, measured on a warm service start that takes ~1 s
    (issue 14: READY <= 1 s), for a function the runtime never calls. A ``None`` entry in ``sys.modules`` is
    Python's documented way to make that import raise ImportError, which openvino's own ``except`` takes.
    Only ``cli.entry`` calls this, for commands that never convert, before anything imports openvino; a
    process that has imported openvino already is left as it is.
    """
    if "openvino" not in sys.modules and "openvino.tools.ovc" not in sys.modules:
        sys.modules["openvino.tools.ovc"] = None  # type: ignore[assignment]  # documented: import raises


def cpu_identity() -> tuple[str, str]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; empty strings where there is none."""
    model, flags = "", ""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = " ".join(sorted(value.split()))
        if model and flags:
            break
    return model, flags


def box_key() -> dict[str, Any]:
    """The box in a cache key (the measured variant choice, the plugin's read-back properties): CPU model, a
    digest of its flags, and the cores this process may use; a change of any re-measures."""
    cpu_model, flags = cpu_identity()
    return {"cpu": cpu_model, "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest(),
            "cores": usable_cores()}
