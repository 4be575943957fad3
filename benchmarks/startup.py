"""(c) Start-up: from process start to READY (sd_notify) and to the first stylized file, cold and warm model cache.

The real service runs (`python -m edge_anime run --config X`), under a NOTIFY_SOCKET this script listens
on, exactly as systemd would run it (with the unit's GLIBC_TUNABLES); one photo waits in the inbox before it starts. The first run uses an
empty model cache (cold); the next ``--warm`` runs reuse it. For context, the script also times a bare
``python -c pass`` and ``python -c 'import openvino'``: the floor no Python service gets under.

    python benchmarks/startup.py [--warm 3] [--photo FILE] [--max-side 512] [--model models/toon] [--cache-dir DIR]
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


def first_output(outbox: Path, deadline: float) -> float | None:
    while time.monotonic() < deadline:
        if any(not p.name.startswith(".") for p in outbox.glob("*")):
            return time.monotonic()
        time.sleep(POLL_S)  # a poll with a deadline: the outbox is another process's, no event to wait on
    return None


def one_start(config_path: Path, root: Path, photo: Path) -> dict[str, Any]:
    for name in ("inbox", "outbox", "work", "done", "failed"):
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).mkdir(parents=True)
    shutil.copy(photo, root / "inbox" / photo.name)
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
    try:
        ready = wait_ready(sock, start + READY_TIMEOUT_S)
        ready_cpu = cpu_seconds(proc.pid) if ready is not None else None
        first = first_output(root / "outbox", start + READY_TIMEOUT_S)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
        sock.close()
    if ready is None or first is None:
        raise RuntimeError(f"service did not get ready or write an output; stderr:\n{err.decode()[-3000:]}")
    return {"ready_s": ready - start, "ready_cpu_s": ready_cpu, "first_result_s": first - start,
            "exit_status": proc.returncode}


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
    parser.add_argument("--photo", type=Path, default=None, help="the photo waiting in the inbox")
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: seeded-random IR)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="a model cache (and decision) to reuse, already warm: only warm starts are timed")
    args = parser.parse_args()
    model = (args.model or ensure_seeded_ir()).resolve()
    photo = args.photo or next(iter(sorted(PHOTOS_DIR.glob("*.jpg"))), None)
    if photo is None:
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
        runs = [] if args.cache_dir else [{"cache": "cold", **one_start(config_path, root, photo)}]
        runs += [{"cache": "warm", **one_start(config_path, root, photo)} for _ in range(args.warm)]
    floors = {"python -c pass": python_floor("pass"), "python -c 'import openvino'": python_floor("import openvino")}
    cold, warm = [r for r in runs if r["cache"] == "cold"], [r for r in runs if r["cache"] == "warm"]
    rows = [{"start": "cold cache", "READY s": r["ready_s"], "READY CPU s": r["ready_cpu_s"],
             "first result s": r["first_result_s"]} for r in cold]
    rows += [{"start": f"warm cache (median of {args.warm})",
              "READY s": median([r["ready_s"] for r in warm]),
              "READY CPU s": median([r["ready_cpu_s"] for r in warm]),
              "first result s": median([r["first_result_s"] for r in warm])}]
    rows += [{"start": name, "READY s": value, "READY CPU s": "", "first result s": ""} for name, value in floors.items()]
    table = (f"`edge-anime run` under a NOTIFY_SOCKET, one photo ({photo.name}) waiting, max_side {args.max_side}\n\n"
             + markdown_table(rows, list(rows[0])))
    write_results("startup", {"machine": machine(), "runs": runs, "floors_s": floors, "photo": str(photo)}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
