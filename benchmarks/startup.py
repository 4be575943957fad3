"""(c) Start-up: from process start to READY (sd_notify) and to the first stylized file, cold and warm model cache.

The real service runs (`python -m edge_anime run --config X`), under a NOTIFY_SOCKET this script listens
on, exactly as systemd would run it (with the unit's GLIBC_TUNABLES); one photo waits in the inbox before it starts. The first run uses an
empty model cache (cold); the next ``--warm`` runs reuse it. For context, the script also times a bare
``python -c pass`` and ``python -c 'import openvino'``: the floor no Python service gets under.

    python benchmarks/startup.py [--warm 3] [--photo FILE ...] [--max-side 512] [--model models/toon] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from _common import (
    PHOTOS_DIR,
    REPO,
    ensure_seeded_ir,
    machine,
    markdown_table,
    median,
    product_environment,
    write_results,
)

READY_TIMEOUT_S = 600.0  # seconds: a cold start measures the variants first (minutes on a loaded 2-core box)
POLL_S = 0.005  # seconds between outbox checks; the figure's resolution
EXIT_TIMEOUT_S = 180.0
TREE_SAMPLE_S = 0.02  # the process tree's RSS is sampled this often: a peak shorter than that can be missed


def wait_ready(sock: socket.socket, deadline: float) -> float | None:
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096).decode()
        except TimeoutError:
            return None
        if "READY=1" in data.splitlines():
            return time.monotonic()
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (/proc/PID/stat utime + stime): on a shared box
    the start's own cost, which other processes' load inflates far less than its wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set so far (VmHWM), in MiB: what an edge box must have room for."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")


def tree_rss_mb(pid: int) -> float:
    """RSS of ``pid`` and every process under it, in MiB: the service measures candidates in a child process,
    and the box has to hold both at once."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(x) for x in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class TreePeak:
    """The highest ``tree_rss_mb`` seen, sampled every ``TREE_SAMPLE_S`` on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(TREE_SAMPLE_S):
            self.peak = max(self.peak, tree_rss_mb(self.pid))

    def read(self) -> float:
        return self.peak


def outputs_at(outbox: Path, count: int, deadline: float) -> float | None:
    """When ``count`` results are in the outbox."""
    while time.monotonic() < deadline:
        if sum(1 for p in outbox.glob("*") if not p.name.startswith(".")) >= count:
            return time.monotonic()
        time.sleep(POLL_S)  # a poll with a deadline: the outbox is another process's, no event to wait on
    return None


def one_start(config_path: Path, root: Path, photos: list[Path]) -> dict[str, Any]:
    for name in ("inbox", "outbox", "work", "done", "failed"):
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).mkdir(parents=True)
    for number, photo in enumerate(photos):
        shutil.copy(photo, root / "inbox" / f"{number:02d}-{photo.name}")
    address = str(root / "notify.sock")
    Path(address).unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    # As the systemd unit starts it: its Environment= sets glibc's huge-page tunable, so the service does not
    # restart itself for it (that restart, a second interpreter start, is ~0.1-0.2 s of a warm start).
    env = {**product_environment(), "NOTIFY_SOCKET": address}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "run", "--config", str(config_path)], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree = TreePeak(proc.pid)
    try:
        ready = wait_ready(sock, start + READY_TIMEOUT_S)
        ready_cpu = cpu_seconds(proc.pid) if ready is not None else None
        ready_peak = peak_rss_mb(proc.pid) if ready is not None else None
        ready_tree = tree.read()
        first = outputs_at(root / "outbox", 1, start + READY_TIMEOUT_S)
        last = outputs_at(root / "outbox", len(photos), start + READY_TIMEOUT_S)
        end_peak = peak_rss_mb(proc.pid)
        end_tree = tree.read()
    finally:
        tree.stop.set()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
        sock.close()
    if ready is None or first is None or last is None:
        raise RuntimeError(f"service did not get ready or write an output; stderr:\n{err.decode()[-3000:]}")
    return {"ready_s": ready - start, "ready_cpu_s": ready_cpu, "first_result_s": first - start,
            "last_result_s": last - start, "tree_peak_ready_mb": ready_tree, "tree_peak_mb": end_tree,
            "peak_rss_ready_mb": ready_peak, "peak_rss_mb": end_peak, "exit_status": proc.returncode}


def python_floor(code: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.monotonic() - start)
    return median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=3, help="warm starts measured")
    parser.add_argument("--photo", type=Path, action="append", default=None,
                        help="a photo waiting in the inbox (again for more: the peak with both streams busy)")
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: seeded-random IR)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="a model cache (and decision) to reuse, already warm: only warm starts are timed")
    args = parser.parse_args()
    model = (args.model or ensure_seeded_ir()).resolve()
    photos = args.photo or sorted(PHOTOS_DIR.glob("*.jpg"))[:1]
    if not photos:
        print("no photo: give --photo FILE", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="edge-anime-startup-") as tmp:
        root = Path(tmp)
        # A style folder (manifest.yaml, e.g. models/toon) starts as the default does: its variant chosen by
        # measurement at the cold start, read from the decision cache at the warm ones.
        model_path = model if (model / "manifest.yaml").is_file() else model / "model.xml"
        config = {"model": {"path": str(model_path)},
                  "device": {"cache_dir": str(args.cache_dir.resolve() if args.cache_dir else root / "ovcache")},
                  "image": {"resize": "max_side", "max_side": args.max_side},
                  "watch": {"root": str(root), "settle_seconds": 0.05, "poll_interval_seconds": 0.05},
                  "service": {"log_level": "WARNING"}}
        config_path = root / "config.yaml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        runs = [] if args.cache_dir else [{"cache": "cold", **one_start(config_path, root, photos)}]
        runs += [{"cache": "warm", **one_start(config_path, root, photos)} for _ in range(args.warm)]
    floors = {"python -c pass": python_floor("pass"), "python -c 'import openvino'": python_floor("import openvino")}
    cold, warm = [r for r in runs if r["cache"] == "cold"], [r for r in runs if r["cache"] == "warm"]
    rows = [{"start": "cold cache", "READY s": r["ready_s"], "READY CPU s": r["ready_cpu_s"],
             "first result s": r["first_result_s"], "last result s": r["last_result_s"], "peak RSS at READY MB": r["peak_rss_ready_mb"],
             "peak RSS MB": r["peak_rss_mb"], "tree peak at READY MB": r["tree_peak_ready_mb"],
             "tree peak MB": r["tree_peak_mb"]} for r in cold]
    rows += [{"start": f"warm cache (median of {args.warm})",
              "READY s": median([r["ready_s"] for r in warm]),
              "READY CPU s": median([r["ready_cpu_s"] for r in warm]),
              "first result s": median([r["first_result_s"] for r in warm]),
              "last result s": median([r["last_result_s"] for r in warm]),
              "peak RSS at READY MB": median([r["peak_rss_ready_mb"] for r in warm]),
              "peak RSS MB": median([r["peak_rss_mb"] for r in warm]),
              "tree peak at READY MB": median([r["tree_peak_ready_mb"] for r in warm]),
              "tree peak MB": median([r["tree_peak_mb"] for r in warm])}]
    rows += [{"start": name, "READY s": value, "READY CPU s": "", "first result s": "", "last result s": "",
              "peak RSS at READY MB": "", "peak RSS MB": "", "tree peak at READY MB": "", "tree peak MB": ""}
             for name, value in floors.items()]
    names = ", ".join(p.name for p in photos)
    table = (f"`edge-anime run` under a NOTIFY_SOCKET, {len(photos)} photo(s) ({names}) waiting, max_side "
             f"{args.max_side}; peak RSS is the service's VmHWM at READY and after the last result, tree peak the "
             f"highest RSS of the service and its children together (sampled every {TREE_SAMPLE_S * 1000:.0f} ms)\n\n"
             + markdown_table(rows, list(rows[0])))
    write_results("startup", {"machine": machine(), "runs": runs, "floors_s": floors,
                              "photos": [str(p) for p in photos]}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
