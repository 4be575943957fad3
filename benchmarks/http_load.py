"""HTTP under load: `edge-anime serve` against the seed's FastAPI + TorchScript service, same photos, one run.

For 1, 2, 4 and 8 concurrent clients (closed loop: each posts the next photo when its answer is in) for
``--seconds`` each: requests/s, p50/p95/p99 latency, errors, the server's peak RSS. Then the ratio to
`edge-anime bench` images/s on the same photos (goal >= 0.9x from 2 clients), and p95 at the most clients
against the queueing minimum: a closed loop of c clients on a server doing mu pictures/s cannot answer
faster than c / mu (Little's law); goal p95 <= 1.3x that.

The photos are shrunk to the 512 px long side once and sent as JPEG, so both servers receive the same
bodies. Both servers run the same weights (the bundled toon checkpoint, traced for the seed side).
Loopback only; every loop is bounded by ``--seconds``.

Hostile load (issue 28), on the edge-anime side only: ``--idle-sockets N`` holds N idle connections open
(half of them with half-sent headers) through every client count, with ``http.header_timeout_seconds`` raised
so they stay, and says how many were still open at the end of each; ``--upload-burst N MB`` then sends N
concurrent MB-sized uploads at once (a small JPEG padded with zeros, so the bytes cost and not the pixels)
and gives the answers and the server's RSS before, at its peak and 3 s after.

    pip install fastapi gunicorn                     # the seed's side only
    python benchmarks/http_load.py [--photos DIR] [--limit 12] [--seconds 20] [--clients 1 2 4 8] [--no-seed]
    python benchmarks/http_load.py --no-seed --idle-sockets 200 --upload-burst 150 20
"""
from __future__ import annotations

import argparse
import io
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import yaml
from PIL import Image

from _common import PHOTOS_DIR, REPO, RESULTS_DIR, machine, markdown_table, median, write_results

MAX_SIDE_PX = 512
TOON_CHECKPOINT = REPO / "training" / "checkpoints" / "toon.pt"
TORCHSCRIPT = RESULTS_DIR / "models" / "toon_torchscript.pt"
READY_DEADLINE_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def photo_bodies(folder: Path, limit: int) -> list[bytes]:
    bodies = []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))[:limit]:
        image = Image.open(path).convert("RGB")
        image.thumbnail((MAX_SIDE_PX, MAX_SIDE_PX), Image.LANCZOS)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=92)
        bodies.append(buffer.getvalue())
    return bodies


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "image/jpeg"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + READY_DEADLINE_S
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready within {READY_DEADLINE_S} s")


def load(url: str, bodies: list[bytes], clients: int, seconds: float, pid: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    peak_rss = [0]

    def client(offset: int) -> None:
        i = offset
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            status = post(url, bodies[i % len(bodies)])
            elapsed = time.perf_counter() - started
            with lock:
                (latencies if status == 200 else errors).append(elapsed if status == 200 else status)
            i += clients

    def sample() -> None:
        process = psutil.Process(pid)
        while time.monotonic() < stop_at:
            rss = sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
            peak_rss[0] = max(peak_rss[0], rss)
            time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    sampler = threading.Thread(target=sample)
    started = time.perf_counter()
    for thread in [*threads, sampler]:
        thread.start()
    for thread in [*threads, sampler]:
        thread.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    return {"clients": clients, "requests_per_s": len(latencies) / wall, "ok": len(latencies),
            "errors": len(errors), "p50_s": pct(0.50), "p95_s": pct(0.95), "p99_s": pct(0.99),
            "peak_rss_mb": peak_rss[0] / 2**20}


def hold_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that never finish a request: every other one sends half of its headers."""
    held = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            sock.sendall(b"POST /v1/stylize HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        held.append(sock)
    return held


def still_open(held: list[socket.socket]) -> int:
    """How many of ``held`` the server has neither closed nor answered."""
    return sum(not select.select([sock], [], [], 0)[0] for sock in held)


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def upload_burst(url: str, pid: int, count: int, megabytes: int) -> dict[str, Any]:
    """``count`` concurrent uploads of ``megabytes`` each; the answers, and the RSS before, peak and after."""
    photo = io.BytesIO()
    Image.new("RGB", (96, 64), (120, 90, 60)).save(photo, "JPEG")
    body = photo.getvalue() + bytes(megabytes * 2**20 - len(photo.getvalue()))
    for _ in range(3):  # warm: this shape compiled, the threads made
        post(url, body)
    time.sleep(2)  # what the last answer freed is given back (http.memory trims 1 s after the last body)
    before = peak = rss_mb(pid)
    statuses: list[int] = []
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss_mb(pid))

    def client() -> None:
        try:
            statuses.append(post(url, body))
        except OSError as exc:
            statuses.append(-1)
            print(f"upload burst: {exc}", file=sys.stderr)

    sampler = threading.Thread(target=sample)
    threads = [threading.Thread(target=client) for _ in range(count)]
    started = time.perf_counter()
    for thread in [sampler, *threads]:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    time.sleep(3)
    answers = {str(code): statuses.count(code) for code in sorted(set(statuses))}
    return {"uploads": count, "mb_each": megabytes, "answers": answers, "seconds": wall,
            "rss_before_mb": before, "rss_peak_mb": peak, "rss_after_mb": rss_mb(pid)}


def run_server(name: str, cmd: list[str], env: dict[str, str], port: int, bodies: list[bytes],
               clients: list[int], seconds: float, *, idle_sockets: int = 0,
               burst: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    proc = subprocess.Popen(cmd, env=env, cwd=REPO / "benchmarks", stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url + ("/readyz" if name == "edge-anime" else "/docs"), proc)
        for body in bodies:  # warm-up: every size compiled (ours) or profiled (TorchScript)
            post(url + "/v1/stylize", body)
        held = hold_idle(port, idle_sockets)
        rows = []
        for count in clients:
            row = load(url + "/v1/stylize", bodies, count, seconds, proc.pid)
            if held:
                row["idle_open"] = still_open(held)
            print(f"{name}: {count} clients: {row['requests_per_s']:.2f} req/s, p95 {row['p95_s']:.2f} s, "
                  f"{row['errors']} errors" + (f", {row['idle_open']} idle sockets open" if held else ""),
                  flush=True)
            rows.append({"server": name, **row})
        for sock in held:
            sock.close()
        if burst is not None:
            result = upload_burst(url + "/v1/stylize", proc.pid, *burst)
            print(f"{name}: upload burst: {json.dumps(result)}", flush=True)
            rows.append({"server": name, "burst": result})
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def ensure_torchscript() -> Path:
    if TORCHSCRIPT.is_file():
        return TORCHSCRIPT
    import torch

    sys.path.insert(0, str(REPO))
    from edge_anime_converters.generator import Generator

    state = torch.load(TOON_CHECKPOINT, map_location="cpu", weights_only=True)
    model = Generator(upsample_align=True)
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    traced = torch.jit.trace(model.eval(), torch.zeros(1, 3, 256, 256))
    TORCHSCRIPT.parent.mkdir(parents=True, exist_ok=True)
    tmp = TORCHSCRIPT.with_name(".tmp-" + TORCHSCRIPT.name)
    traced.save(str(tmp))
    tmp.replace(TORCHSCRIPT)
    return TORCHSCRIPT


def bench_images_per_s(photos_dir: Path, config: Path) -> float:
    out = photos_dir.parent / "bench.json"
    subprocess.run([sys.executable, "-m", "edge_anime", "bench", str(photos_dir), "--config", str(config),
                    "--max-side", str(MAX_SIDE_PX), "--repeat", "2", "--json", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return float(json.loads(out.read_text())["images_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--no-seed", action="store_true", help="skip the seed's FastAPI + TorchScript side")
    parser.add_argument("--idle-sockets", type=int, default=0, metavar="N",
                        help="hold N idle connections open through the edge-anime runs")
    parser.add_argument("--upload-burst", type=int, nargs=2, default=None, metavar=("N", "MB"),
                        help="then N concurrent uploads of MB each against edge-anime: answers and RSS")
    args = parser.parse_args()
    bodies = photo_bodies(args.photos, args.limit)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "photos").mkdir()
        for i, body in enumerate(bodies):
            (work / "photos" / f"p{i:02d}.jpg").write_bytes(body)
        port = free_port()
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump({
            "image": {"resize": "max_side", "max_side": MAX_SIDE_PX},
            # idle sockets held for the whole run: past the header deadline the server would close them
            "http": {"port": port, "max_queue": 64,
                     **({"header_timeout_seconds": 3600} if args.idle_sockets else {})},
        }), encoding="utf-8")
        mu = bench_images_per_s(work / "photos", config)
        print(f"edge-anime bench: {mu:.2f} images/s", flush=True)
        env = {k: v for k, v in os.environ.items() if k != "EDGE_ANIME_CONFIG"}
        rows += run_server("edge-anime", [sys.executable, "-m", "edge_anime", "serve", "--config", str(config)],
                           env, port, bodies, args.clients, args.seconds, idle_sockets=args.idle_sockets,
                           burst=tuple(args.upload_burst) if args.upload_burst else None)
        bursts = [row.pop("burst") for row in rows if "burst" in row]
        rows = [row for row in rows if "clients" in row]
        if not args.no_seed:
            try:
                import fastapi  # noqa: F401
                import gunicorn  # noqa: F401
            except ImportError:
                print("seed side skipped: pip install fastapi gunicorn", file=sys.stderr)
            else:
                seed_port = free_port()
                seed_env = {**env, "EDGE_ANIME_SEED_TORCHSCRIPT": str(ensure_torchscript())}
                rows += run_server("seed (FastAPI + TorchScript, gunicorn -w 1)",
                                   [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "uvicorn.workers.UvicornWorker",
                                    "-b", f"127.0.0.1:{seed_port}", "seed_http_app:app"],
                                   seed_env, seed_port, bodies, args.clients, args.seconds)
    for row in rows:
        row["vs bench"] = row["requests_per_s"] / mu
        row["p95 / (c / mu)"] = row["p95_s"] / (row["clients"] / mu)
    columns = ["server", "clients", "requests_per_s", "vs bench", "p50_s", "p95_s", "p99_s", "p95 / (c / mu)",
               "errors", "peak_rss_mb", *(["idle_open"] if args.idle_sockets else [])]
    table = (f"{len(bodies)} photos at {MAX_SIDE_PX} px, {args.seconds:g} s per client count; "
             f"edge-anime bench {mu:.2f} images/s"
             + (f"; {args.idle_sockets} idle sockets held open throughout" if args.idle_sockets else "")
             + "\n\n" + markdown_table(rows, columns)
             + "".join(f"\n\nupload burst: {json.dumps(b)}" for b in bursts))
    print(table)
    write_results("http_load", {"machine": machine(), "bench_images_per_s": mu, "rows": rows, "bursts": bursts,
                                "median_vs_bench": median([r["vs bench"] for r in rows if r["server"] == "edge-anime"
                                                           and r["clients"] >= 2])}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
