"""Disk-full soak (issue 13): the service's state filesystem filled and freed while it works.

200 small photos arrive in the inbox of a real `edge-anime run` whose watch.root sits on a small tmpfs; three
times during the run the tmpfs is filled to the last byte, held full, then freed. Expected: 200 outputs,
0 inputs in failed/, 0 temp files, and the process never exits until the final SIGTERM (which exits 0).

    sudo .venv/bin/python benchmarks/disk_full_soak.py [--photos 200] [--cycles 3] [--full-seconds 4]

Needs root (mount). Uses the bundled toon model at 128 px so a 2-core box finishes in about a minute.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "toon" / "model.xml"
TMPFS_SIZE = "16m"


def make_photos(folder: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(13)
    folder.mkdir(parents=True)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
        path = folder / f"p{i:03d}.jpg"
        Image.fromarray(pixels).save(path, quality=85)
        paths.append(path)
    return paths


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def feed(photos: list[Path], inbox: Path, interval_s: float, stop: threading.Event) -> None:
    """Copy each photo in as a hidden temp then rename (how rsync delivers); retry while the disk is full."""
    for src in photos:
        tmp, dst = inbox / f".{src.name}.part", inbox / src.name
        while not stop.is_set():
            try:
                shutil.copyfile(src, tmp)
                os.rename(tmp, dst)
                break
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                if exc.errno != errno.ENOSPC:
                    raise
                stop.wait(0.05)
        stop.wait(interval_s)


def count(folder: Path, *, hidden: bool = False) -> int:
    if not folder.exists():
        return 0
    return sum(1 for p in folder.rglob("*") if p.is_file() and p.name.startswith(".") == hidden)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--full-seconds", type=float, default=4.0)
    parser.add_argument("--deadline-seconds", type=float, default=600.0)
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="edge-anime-soak-"))
    state = base / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(state)], check=True)
    proc = None
    try:
        photos = make_photos(base / "photos", args.photos)
        root = state / "watch"
        config = base / "config.yaml"
        config.write_text(yaml.safe_dump({
            "model": {"path": str(MODEL)},
            "device": {"cache_dir": str(base / "ovcache")},
            "image": {"resize": "max_side", "max_side": 128},
            "watch": {"root": str(root), "settle_seconds": 0.3,
                      "retry": {"initial_seconds": 0.2, "max_seconds": 1.0, "max_attempts": 3}},
            "service": {"log_format": "json"},
        }))
        log_path = base / "service.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "run", "--config", str(config)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        status = root / "status.json"
        deadline = time.monotonic() + 120
        while not (status.exists() and json.loads(status.read_text() or "{}").get("state") == "ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"service did not start ({proc.returncode}); see {log_path}")
            time.sleep(0.1)

        started = time.monotonic()
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(photos, root / "inbox", 0.05, stop), daemon=True)
        feeder.start()
        full_s = []
        for cycle in range(args.cycles):
            target = (cycle + 1) * args.photos // (args.cycles + 1)
            while count(root / "done") < target and proc.poll() is None:
                time.sleep(0.05)
            filler = fill(state)
            t0 = time.monotonic()
            time.sleep(args.full_seconds)  # the point: the disk stays full this long, past the retry budget
            filler.unlink()
            full_s.append(time.monotonic() - t0)
            if proc.poll() is not None:
                break
        end = time.monotonic() + args.deadline_seconds
        while count(root / "done") < args.photos and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        stop.set()
        alive = proc.poll() is None
        outputs = count(root / "outbox")
        failed = count(root / "failed")
        temps = count(root / "outbox", hidden=True) + sum(
            1 for p in root.rglob(".edge-anime-tmp-*") if p.is_file())
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        text = log_path.read_text(errors="replace")
        pauses = text.count('"event": "paused"')
        resumes = text.count('"event": "resumed"')
        print(f"photos {args.photos}, fill/free cycles {args.cycles} (full for "
              f"{', '.join(f'{s:.1f}' for s in full_s)} s), elapsed {elapsed:.1f} s")
        print(f"outputs {outputs}, done {count(root / 'done')}, failed {failed}, temp files {temps}, "
              f"inbox left {count(root / 'inbox')}")
        print(f"intake pauses {pauses}, resumes {resumes}, alive until SIGTERM: {alive}, exit status {rc}")
        ok = alive and rc == 0 and outputs == args.photos and failed == 0 and temps == 0
        print("PASS" if ok else f"FAIL (log: {log_path})")
        return 0 if ok else 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", "-l", str(state)], check=False)


if __name__ == "__main__":
    sys.exit(main())
