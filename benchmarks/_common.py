"""Shared plumbing for the benchmark scripts: the seeded-random IR they all time, and JSON + markdown output.

The seeded-random checkpoint is used because the architecture, not the weights, sets the speed, and it
needs nothing downloaded. Results go to ``benchmarks/results/`` (gitignored): figures from a shared 2-core
box are evidence for a report, not something to commit.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
SEEDED_MODEL_DIR = RESULTS_DIR / "models" / "randgen"
PHOTOS_DIR = REPO.parent / "shared" / "photos"
SEED = 1234


def ensure_seeded_ir(folder: Path = SEEDED_MODEL_DIR, *, seed: int = SEED) -> Path:
    """An fp32 model folder (model.xml/.bin + manifest.yaml) from the seeded-random generator, built once; its
    style is the folder's name (benchmarks/styles.py makes several from several seeds)."""
    if (folder / "manifest.yaml").is_file():
        return folder
    sys.path.insert(0, str(REPO))
    import yaml

    from edge_anime_converters.generator import seeded_random_generator
    from edge_anime_converters.ir import save_ir, torch_to_ov

    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    xml_path, bin_path = save_ir(torch_to_ov(seeded_random_generator(seed).eval()), tmp, compress_to_fp16=False)
    manifest = {"format": 1, "name": folder.name, "precision": "fp32",
                "ir": {"xml": "model.xml", "bin": "model.bin",
                       "xml_sha256": hashlib.sha256(xml_path.read_bytes()).hexdigest(),
                       "bin_sha256": hashlib.sha256(bin_path.read_bytes()).hexdigest()},
                "input": {"size_multiple": 4}}
    (tmp / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, folder)
    return folder


@contextmanager
def other_load(processes: int) -> Iterator[None]:
    """``processes`` single-thread spinning processes for the duration: the shop PC or kiosk whose other
    programs take a core now and then, made repeatable (``--busy N`` in the scripts)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def run_worker(script: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``python script args...`` (a benchmark's own ``--worker`` mode) and return the JSON it printed last.

    Every side runs in a fresh process so no thread pool, allocator or cache of one touches another; a
    failing worker raises with the end of its stderr.
    """
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"worker {Path(script).name} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternating_rounds(names: list[str], rounds: int, run: Callable[[str], dict[str, Any]], *,
                       label: str = "") -> list[dict[str, dict[str, Any]]]:
    """``run(name)`` for every name, ``rounds`` times, the order reversed every other round (ABC, CBA, ...):
    load from other processes on the shared box then hits every side alike, and ratios are taken per round."""
    results: list[dict[str, dict[str, Any]]] = []
    for r in range(rounds):
        row: dict[str, dict[str, Any]] = {}
        for name in names if r % 2 == 0 else list(reversed(names)):
            row[name] = run(name)
            print(f"{label}round {r + 1}: {name}: {row[name]['images_per_s']:.3f} images/s", flush=True)
        results.append(row)
    return results


def product_environment() -> dict[str, str]:
    """The environment ``edge-anime`` re-executes itself with (glibc's huge-page tunable where the box
    supports it): benchmark workers that call the runtime directly get it so they time what ships."""
    sys.path.insert(0, str(REPO))
    from edge_anime.runtime.host import huge_pages_environment

    return huge_pages_environment() or dict(os.environ)


def machine() -> dict[str, Any]:
    """Enough about the box to read the figures: CPU, cores, load at the time, versions."""
    import openvino as ov

    load = os.getloadavg()
    return {"cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "loadavg_1m": round(load[0], 2), "openvino": ov.get_version(), "python": platform.python_version(),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def cpu_model() -> str:
    """The CPU's model name and whether it has AMX (bf16 at several times the f32 rate): figures differ a lot."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return f"{name}{', AMX' if 'amx_bf16' in info else ''}"


def run_static(compiled_for: dict[tuple[int, int], Any], core: Any, model: Any, rgb: Any) -> Any:
    """u8 [H, W, 3] -> u8 [H, W, 3] through an IR read with ``core``, compiled once per static shape and kept
    in ``compiled_for`` (the caller's cache, so scripts that score many photos compile each size once)."""
    h, w = rgb.shape[:2]
    if (h, w) not in compiled_for:
        reshaped = model.clone()
        reshaped.reshape({0: [1, h, w, 3]})
        compiled_for[(h, w)] = core.compile_model(reshaped, "CPU")
    return compiled_for[(h, w)]({0: rgb[None]})[0][0]


def photos_or_skip(parser: Any, given: Path | None) -> Path | None:
    """The photo folder to use, or None after printing a skip line when ../shared is missing and none was given.

    Why skip instead of fail: the benchmarks run on a checkout without ../shared (CI's copy may lack it), and a
    folder the user named but that is not there is their error, said through argparse.
    """
    photos_dir = given if given is not None else PHOTOS_DIR
    if photos_dir.is_dir():
        return photos_dir
    if given is None:
        print(f"skip: {PHOTOS_DIR} not found (../shared beside the checkout; or give --photos DIR)")
        return None
    parser.error(f"--photos: {photos_dir} is not a folder")
    return None


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def write_results(name: str, data: dict[str, Any], table: str, *, out_dir: Path = RESULTS_DIR) -> Path:
    """``<name>.json`` and ``<name>.md`` under ``out_dir``, each written temp-then-rename."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    for path, text in ((json_path, json.dumps(data, indent=2, default=str)), (out_dir / f"{name}.md", table)):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    print(table)
    print(f"wrote {json_path} and {json_path.with_suffix('.md')}")
    return json_path


def timed_call(call: Callable[[], Any], runs: int) -> tuple[float, float]:
    """(median wall ms, median ms of this thread's CPU) over ``runs`` calls, after one untimed call that takes
    page faults and lazily built tables out of the figure. The thread's CPU time is what other processes'
    load changes least on these shared boxes."""
    call()
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.thread_time()
        call()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return median(wall) * 1000, median(cpu) * 1000
