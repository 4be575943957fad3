"""`batch` on Ray vs `stylize` on the same photos: Ray's overhead, two nodes on one box, actors x streams.

Each setting is the real command in a subprocess over the same photos (``--copies`` of each held-out photo under
other names, so a run is long enough to see a steady rate), into a fresh output folder, with a warm model cache
(one untimed run first). A Ray setting gets a fresh cluster on 127.0.0.1 (tests/raycluster.py), started before
the clock. Figures per run: the whole command's images/s (start-up included: joining Ray, actors, compiling),
the steady images/s (outputs between the first and the last output's mtime), seconds to the first output, and
the peak RSS of the process that stylizes (the command itself, or each Ray actor: sampled every 0.2 s).
Settings run in alternating rounds (forward, then reversed) so a drift of the shared box hits each alike.

    python benchmarks/batch.py [--copies 3] [--max-side 512] [--rounds 2] [--settings stylize batch ray1 ray2 ray1x2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import psutil
import yaml

from _common import PHOTOS_DIR, REPO, RESULTS_DIR, alternating_rounds, machine, markdown_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from raycluster import RayCluster  # the tests' own cluster helper: one way to start a cluster

# setting -> (command, Ray nodes x CPUs each or None, config overrides)
SETTINGS: dict[str, tuple[str, tuple[int, int] | None, dict[str, Any]]] = {
    "stylize": ("stylize", None, {}),
    "batch": ("batch", None, {}),
    "ray1": ("batch", (1, 2), {}),  # one node with both cores: one actor, the engine's own streams
    "ray2": ("batch", (2, 1), {}),  # two nodes of one CPU each on the same box: the overhead of a second node
    # one node, two actors of one stream and one thread each: the sizing question of issue 31
    "ray1x2": ("batch", (1, 2), {"device": {"num_streams": 1, "inference_num_threads": 1},
                                  "ray": {"batch": {"actors": 2, "actor_cpus": 1}}}),
}


class PeakRss:
    """The peak RSS of the processes doing the work: the command's tree, or Ray's map actors."""

    def __init__(self, root: int, actors: bool) -> None:
        self.root, self.actors, self.peak_mb = root, actors, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _processes(self) -> Iterator[psutil.Process]:
        if not self.actors:
            try:
                yield psutil.Process(self.root)
            except psutil.NoSuchProcess:
                return
            return
        for proc in psutil.process_iter(["name"]):
            if "MapWorker" in (proc.info["name"] or ""):
                yield proc

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            for proc in self._processes():
                try:
                    self.peak_mb = max(self.peak_mb, proc.memory_info().rss / 2**20)
                except psutil.NoSuchProcess:
                    continue

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def prepare(folder: Path, copies: int, max_side: int) -> tuple[Path, Path]:
    inbox = folder / "in"
    inbox.mkdir(parents=True)
    for path in sorted(PHOTOS_DIR.glob("*.jpg")):
        for copy in range(copies):
            target = inbox / f"{path.stem}-{copy}.jpg"
            try:  # a hard link: a symlink resolves to the one photo, and an input is taken once per real file
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({"device": {"cache_dir": str(RESULTS_DIR / "ovcache")},
                                      "image": {"resize": "max_side", "max_side": max_side}}), encoding="utf-8")
    return inbox, config


def run_setting(name: str, inbox: Path, base_config: Path, folder: Path) -> dict[str, Any]:
    command_name, nodes, overrides = SETTINGS[name]
    raw = yaml.safe_load(base_config.read_text(encoding="utf-8"))
    for section, values in overrides.items():
        raw.setdefault(section, {}).update(values)
    config = folder / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = folder / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    cluster = RayCluster(nodes_wanted=nodes[0], cpus=nodes[1]) if nodes else None
    with cluster if cluster is not None else nullcontext():
        command = [sys.executable, "-m", "edge_anime", command_name, str(inbox), "-o", str(out),
                   "--config", str(config), "-q"]
        if cluster is not None:
            command += ["--ray", cluster.address]
        env = cluster.client_env() if cluster is not None else None
        started = time.time()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        rss = PeakRss(proc.pid, actors=cluster is not None)
        stdout, stderr = proc.communicate()
        elapsed = time.time() - started
        peak = rss.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: exit {proc.returncode}: {stderr[-2000:]}")
    mtimes = sorted(p.stat().st_mtime for p in out.glob("*.jpg"))
    steady = (len(mtimes) - 1) / (mtimes[-1] - mtimes[0]) if len(mtimes) > 1 else 0.0
    return {"setting": name, "images": len(mtimes), "command_s": round(elapsed, 1),
            "images_per_s": round(len(mtimes) / elapsed, 3), "steady_images_per_s": round(steady, 3),
            "first_output_s": round(mtimes[0] - started, 1), "peak_rss_mb": round(peak), "summary": stdout.strip()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edge-anime-batch-bench-") as tmp:
        folder = Path(tmp)
        inbox, config = prepare(folder, args.copies, args.max_side)
        print("warming the model cache ...", flush=True)
        run_setting("batch", inbox, config, folder)
        rounds = alternating_rounds(args.settings, args.rounds,
                                    lambda name: run_setting(name, inbox, config, folder))
    rows = [{"round": number + 1, **row} for number, found in enumerate(rounds) for row in found.values()]
    for row in rows:
        print({k: v for k, v in row.items() if k != "summary"}, flush=True)
    table = markdown_table(rows, ["round", "setting", "images", "command_s", "images_per_s", "steady_images_per_s",
                                  "first_output_s", "peak_rss_mb"])
    text = (f"batch vs stylize, {args.copies} copies of each photo in ../shared/photos at max_side {args.max_side}, "
            f"bundled toon, warm model cache; {machine()['cpu_model']}\n\n{table}")
    write_results("batch", {"machine": machine(), "rows": rows}, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
