"""The live booth's mirror (issue 43): `edge-anime serve`'s ``GET /v1/live`` fed camera-like frames for a while.

The frames are a slow pan across real photos (``--photos``, ``../shared/photos`` by default): a 4:3 window that
moves a few pixels a frame, scaled to ``--frame`` (640x480, a webcam's), JPEG at quality 80, as the booth page
sends them. Each session keeps ``--in-flight`` frames outstanding (2: the server stylizes two of a session at
once), sending the next when an answer arrives, so answer k is frame k's and its latency is exact; no frame is
replaced. That is the booth page's own pace. Reported per run: answered frames/s (all sessions), p50/p95
latency from send to answer, the server's peak RSS, and the CPU.

    python benchmarks/live.py [--config FILE] [--seconds 20] [--sessions 1 4] [--side 384]

The issue's goals: >= 10 frames/s with p95 <= 250 ms at 384 px on a 2-core box (one session), >= 30 frames/s
at 512 px on a 16-core box (``--side 512``); serve's peak RSS with 4 sessions <= 700 MB. Loopback only; every
loop is bounded by ``--seconds``.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from PIL import Image

from _common import PHOTOS_DIR, REPO, machine, markdown_table, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import free_port, wait_ready

PAN_PX_PER_FRAME = 3


def pan_frames(photos: list[Path], count: int, size: tuple[int, int]) -> list[bytes]:
    """``count`` JPEG frames panning across ``photos`` in turn (a still camera would be easier on nothing)."""
    frames: list[bytes] = []
    per_photo = max(1, count // max(1, len(photos)))
    for path in photos:
        with Image.open(path) as opened:
            photo = opened.convert("RGB")
        w = min(photo.width, round(photo.height * 4 / 3))
        h = round(w * 3 / 4)
        for i in range(per_photo):
            x = min(photo.width - w, i * PAN_PX_PER_FRAME) if photo.width > w else 0
            window = photo.crop((x, 0, x + w, h)).resize(size, Image.Resampling.BILINEAR)
            buf = io.BytesIO()
            window.save(buf, "JPEG", quality=80)
            frames.append(buf.getvalue())
            if len(frames) >= count:
                return frames
    return frames


def session(url: str, frames: list[bytes], seconds: float, in_flight: int, out: dict[str, Any]) -> None:
    """One client: ``in_flight`` frames outstanding, the next sent when an answer comes; latencies in s."""
    from websockets.sync.client import connect

    latencies: list[float] = []
    sent: list[float] = []
    errors = 0
    with connect(url, open_timeout=120, max_size=None) as ws:
        ws.send(frames[0])  # the first frame builds the live Stylizer: not timed
        ws.recv(timeout=300)
        end = time.monotonic() + seconds
        k = 0
        for _ in range(in_flight):
            sent.append(time.perf_counter())
            ws.send(frames[k % len(frames)])
            k += 1
        answered = 0
        while time.monotonic() < end:
            message = ws.recv(timeout=60)
            if not isinstance(message, bytes):
                errors += 1
            latencies.append(time.perf_counter() - sent[answered])
            answered += 1
            sent.append(time.perf_counter())
            ws.send(frames[k % len(frames)])
            k += 1
        out.update(latencies=latencies, errors=errors, seconds=seconds)


def run(config: Path, photos: list[Path], *, seconds: float, sessions: int, side: int,
        in_flight: int) -> dict[str, Any]:
    port = free_port()
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    http = data.setdefault("http", {})
    http.update(port=port, host="127.0.0.1")
    http["live"] = {**http.get("live", {}), "max_side": side, "max_sessions": max(4, sessions)}
    results: list[dict[str, Any]] = [{} for _ in range(sessions)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "live.yaml"
        cfg.write_text(yaml.safe_dump(data), encoding="utf-8")
        log = (Path(tmp) / "serve.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "serve", "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
            frames = pan_frames(photos, 200, (640, 480))
            peak = [0.0]
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.1):
                    peak[0] = max(peak[0], psutil.Process(proc.pid).memory_info().rss / 2**20)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            threads = [threading.Thread(target=session, args=(f"ws://127.0.0.1:{port}/v1/live", frames, seconds,
                                                              in_flight, results[i])) for i in range(sessions)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(seconds + 400)
            done.set()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
            if not all(r.get("latencies") for r in results):
                print((Path(tmp) / "serve.log").read_text(encoding="utf-8", errors="replace")[-4000:], file=sys.stderr)
    latencies = sorted(x for r in results for x in r.get("latencies", []))
    total = len(latencies)

    def pct(q: float) -> float:
        return latencies[min(total - 1, int(q * total))] * 1000 if latencies else float("nan")

    return {"sessions": sessions, "side": side, "frames": total, "fps": total / seconds,
            "p50_ms": pct(0.5), "p95_ms": pct(0.95), "errors": sum(r.get("errors", 0) for r in results),
            "peak_rss_mb": round(peak[0], 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "default.yaml")
    p.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 4])
    p.add_argument("--side", type=int, default=384)
    p.add_argument("--in-flight", type=int, default=2)
    a = p.parse_args()
    photos = sorted(a.photos.glob("*.jpg"))[:6]
    if not photos:
        raise SystemExit(f"no photos in {a.photos}")
    rows = [run(a.config, photos, seconds=a.seconds, sessions=n, side=a.side, in_flight=a.in_flight)
            for n in a.sessions]
    info = machine()
    table = markdown_table(rows, ["sessions", "side", "frames", "fps", "p50_ms", "p95_ms", "errors", "peak_rss_mb"])
    table = f"`python benchmarks/live.py` on {info['cpu_model']} ({info['cores']} cores, load {info['loadavg_1m']})\n\n" \
        + table
    write_results("live", {"machine": info, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
