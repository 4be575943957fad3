"""The whole pipeline measured on real files: the write-up's layered diagnosis built in.

The published CPU tuning write-up found its time in four layers (I/O, runtime, framework, hardware) with
four tools. ``measure`` gives the same answer in one run: per-stage seconds (read, decode, resize = I/O and
imaging; compile, wait, infer = runtime; tone = the style's tone guard; encode, write = output), the process's
CPU utilisation against all cores (hardware kept busy or not), peak RSS, and the properties the plugin chose.

One core function behind ``edge-anime bench`` and ``edge-anime tune``; the command modules only parse and print.
What is measured is a ``Stylizer``, the very object every entry point runs (the style and variant it chooses,
its pipeline, its encoder, its naming of formats): a bench that assembled its own engine and pipeline measured
something users never run, and drifted from it the first time the Stylizer learnt something new.
"""
from __future__ import annotations

import logging
import math
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil
from pydantic import BaseModel, ValidationError

from ..config import Config, WatchSection, format_validation_error
from ..core.pipeline import STAGES, Job, JobResult, stage_threads
from ..core.stylizer import Stylizer
from ..errors import BYTES_PER_MB, ConfigError, UserError
from ..imaging.encoder import image_extension
from ..inputs import InputFilter
from ..runtime.host import usable_cores

log = logging.getLogger(__name__)
SectionT = TypeVar("SectionT", bound=BaseModel)



@dataclass(frozen=True)
class PassFigures:
    """One timed pass over the input files."""

    wall_s: float
    results: list[JobResult]
    cpu_s: float  # user + system CPU seconds of this process during the pass
    system_cpu_pct: float  # whole-machine CPU busy during the pass (other processes included): the noise

    @property
    def ok(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def images_per_s(self) -> float:
        return self.ok / self.wall_s if self.wall_s > 0 else 0.0


def input_files(folder: Path, watch: WatchSection) -> list[Path]:
    """The images directly in ``folder`` that the watch folder would take (``inputs.InputFilter``: no hidden,
    partial or temp files), sorted for repeatable runs."""
    if not folder.is_dir():
        raise UserError(f"INPUT_DIR: {folder} is not a folder")
    accept = InputFilter(watch)
    files = accept.files_in(folder, recursive=False)
    if not files:
        raise UserError(f"INPUT_DIR: no images ({', '.join(sorted(accept.extensions))}) in {folder}")
    return files


def with_overrides(config: Config, *, model: str | None = None, max_side: int | None = None,
                   variant: str | None = None, precision: str | None = None) -> Config:
    """``--model``, ``--variant``, ``--precision`` and ``--max-side`` on top of the config file (max_side also
    selects that resize mode). The result is validated like a config file, so a bad value names its key."""
    updates: dict[str, Any] = {}
    model_updates: dict[str, Any] = {}
    if model is not None:
        spec = model
        if "/" in spec or spec.endswith(".xml"):
            spec = str(Path(spec).expanduser().resolve())
        model_updates["path"] = spec
    if variant is not None:
        model_updates["variant"] = variant
    if model_updates:
        updates["model"] = _revalidated(config.model, "model", model_updates)
    if precision is not None:
        updates["device"] = _revalidated(config.device, "device", {"inference_precision": precision})
    if max_side is not None:
        updates["image"] = config.image.model_copy(update={"resize": "max_side", "max_side": max_side})
    return config.model_copy(update=updates) if updates else config


def _revalidated(section: SectionT, name: str, changes: dict[str, Any]) -> SectionT:
    """``section`` with ``changes``, checked like the config file, errors naming ``name.key``."""
    try:
        return type(section).model_validate({**section.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(f"{name}.{format_validation_error(exc)}") from None


def timed_pass(stylizer: Stylizer, files: list[Path], out_dir: Path) -> PassFigures:
    """Run every file through the Stylizer once (its default style), writing real outputs into ``out_dir``."""
    config = stylizer.config
    jobs = [Job(src=f, dst=out_dir / f"{i:04d}_{f.stem}.{image_extension(config.output, f)}")
            for i, f in enumerate(files)]
    proc = psutil.Process()
    psutil.cpu_percent(None)  # start the machine-wide interval
    before = proc.cpu_times()
    start = time.perf_counter()
    results = [r for r in stylizer.run_jobs(jobs) if isinstance(r, JobResult)]  # its files are photos
    wall = time.perf_counter() - start
    after = proc.cpu_times()
    system_pct = psutil.cpu_percent(None)
    cpu = (after.user - before.user) + (after.system - before.system)
    for job in jobs:
        if job.dst is not None:
            job.dst.unlink(missing_ok=True)
    return PassFigures(wall_s=wall, results=results, cpu_s=cpu, system_cpu_pct=system_pct)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile; enough for tens of images and has no numpy float work in the hot path."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1))
    return ordered[rank]


def summarise(passes: list[PassFigures], *, cores: int, requests: int = 1) -> dict[str, Any]:
    """The figures of the median pass (by images/s), plus every pass's images/s.

    ``infer_busy_pct`` is the share of the pass during which the infer requests were running: near 100%
    means decode/encode/I/O never left inference waiting, whatever else the machine was doing, which is
    the pipeline's own part of "keep the cores on inference"; ``cpu_utilisation_pct`` then says how much
    of the cores the process actually got."""
    best = sorted(passes, key=lambda p: p.images_per_s)[len(passes) // 2]
    ok = [r for r in best.results if r.ok]
    latencies = [r.timings_s["total"] for r in ok]
    stages = {s: sum(r.timings_s.get(s, 0.0) for r in ok) for s in STAGES}
    errors = [f"{r.job.src.name}: {type(r.error).__name__}: {r.error}" for r in best.results if not r.ok]
    return {
        "images_per_s": best.images_per_s,
        "images": len(best.results),
        "ok": best.ok,
        "failed": len(best.results) - best.ok,
        "errors": errors[:20],
        "wall_s": best.wall_s,
        "latency_s": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                      "mean": statistics.fmean(latencies) if latencies else float("nan")},
        "stages_s_total": stages,
        "stages_s_per_image": {s: v / len(ok) if ok else 0.0 for s, v in stages.items()},
        "cpu_utilisation_pct": 100.0 * best.cpu_s / (best.wall_s * cores) if best.wall_s > 0 else 0.0,
        "infer_busy_pct": 100.0 * stages["infer"] / (best.wall_s * requests) if best.wall_s > 0 else 0.0,
        "machine_cpu_busy_pct": best.system_cpu_pct,
        "sizes": sorted({f"{r.out_size[0]}x{r.out_size[1]}" for r in ok if r.out_size}),
        # wall seconds per output megapixel: the figure that compares resize modes (full vs max_side vs guided)
        "s_per_mp": best.wall_s / megapixels if (megapixels := sum(
            r.out_size[0] * r.out_size[1] for r in ok if r.out_size) / 1e6) else float("nan"),
        "passes_images_per_s": [p.images_per_s for p in passes],
    }


def measure(config: Config, files: list[Path], *, repeat: int = 1, warmup: int = 1,
            stylizer: Stylizer | None = None) -> dict[str, Any]:
    """Start a Stylizer for ``config`` (timed: the variant choice and the compile a start pays), run
    ``warmup`` untimed and ``repeat`` timed passes, and report. ``stylizer``: one already started (then its
    config is the one measured and the start-up figure is 0).

    Warm-up passes compile every static shape the files need and run each stream's first inference, which
    a long-running service pays once; ``repeat`` passes are what it then sustains.
    """
    if repeat < 1:
        raise UserError(f"--repeat: expected an integer >= 1, got {repeat}")
    started = time.perf_counter()
    owned = stylizer is None
    if stylizer is None:
        stylizer = Stylizer(config)  # the variant and precision a start would run (pinned or measured)
    startup_s = time.perf_counter() - started if owned else 0.0
    try:
        report = _measure_passes(stylizer, files, repeat=repeat, warmup=warmup)
    finally:
        if owned:
            stylizer.close()
    report["engine_startup_s"] = startup_s
    return report


def _measure_passes(stylizer: Stylizer, files: list[Path], *, repeat: int, warmup: int) -> dict[str, Any]:
    config, engine = stylizer.config, stylizer.engine
    cores = usable_cores()
    decode_threads, encode_threads = stage_threads(config, cores=cores)
    with tempfile.TemporaryDirectory(prefix="edge-anime-bench-") as tmp:
        out_dir = Path(tmp)
        for _ in range(warmup):
            timed_pass(stylizer, files, out_dir)
        passes = [timed_pass(stylizer, files, out_dir) for _ in range(repeat)]
    report = summarise(passes, cores=cores, requests=engine.num_requests)
    report.update({
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / BYTES_PER_MB,
        "cores": cores,
        "input_dir": str(files[0].parent),
        "repeat": repeat,
        "warmup": warmup,
        "pipeline": {"max_in_flight": stylizer.max_in_flight,
                     "decode_threads": decode_threads, "encode_threads": encode_threads},
        "image": {"resize": config.image.resize, "max_side": config.image.max_side,
                  "upscale_to_original": config.image.upscale_to_original,
                  "upscale_method": config.image.upscale_method,
                  "memory_budget_mb": config.image.memory_budget_mb},
        "plugin": engine.describe(),
        "compiled_shapes": [f"{w}x{h}" for h, w in engine.cached_shapes()],
    })
    return report


def format_report(report: dict[str, Any]) -> str:
    """The human summary `edge-anime bench` prints: throughput, latency, where the time went."""
    eff = report["plugin"]["effective"]
    per = report["stages_s_per_image"]
    lines = [
        f"images/s {report['images_per_s']:.3f}   ({report['ok']} ok, {report['failed']} failed, "
        f"{report['wall_s']:.2f} s, passes {', '.join(f'{x:.3f}' for x in report['passes_images_per_s'])})",
        f"latency  p50 {report['latency_s']['p50']:.3f} s   p95 {report['latency_s']['p95']:.3f} s",
        f"CPU      {report['cpu_utilisation_pct']:.0f}% of {report['cores']} cores by this process "
        f"(machine busy {report['machine_cpu_busy_pct']:.0f}%)   infer requests busy {report['infer_busy_pct']:.0f}%"
        f"   peak RSS {report['peak_rss_mb']:.0f} MB",
        f"size     {report['s_per_mp']:.2f} s per output megapixel   resize {report['image']['resize']}"
        + (f", upscale {report['image']['upscale_method']}" if report["image"].get("upscale_to_original") else ""),
        f"plugin   hint {eff.get('PERFORMANCE_HINT')}  streams {eff.get('NUM_STREAMS')}  threads "
        f"{eff.get('INFERENCE_NUM_THREADS')}  precision {eff.get('INFERENCE_PRECISION_HINT')}  requests "
        f"{report['plugin']['num_requests']}  variant {report['plugin'].get('variant')}  "
        f"pinning {eff.get('ENABLE_CPU_PINNING')}  shapes "
        f"{report['plugin']['shape_policy']} ({', '.join(report['compiled_shapes']) or 'dynamic'})",
        f"start    engine ready in {report['engine_startup_s']:.2f} s   huge pages "
        f"{'on' if report['plugin'].get('huge_pages') else 'off'}",
        "stage    " + "  ".join(f"{s} {per[s] * 1000:.0f}" for s in STAGES) + "   (ms per image; "
        "infer overlaps the other stages)",
    ]
    choice = report["plugin"].get("choice") or {}
    if choice.get("summary"):
        lines.append(f"variant  {choice['summary']}")
    for note in report["plugin"].get("ignored", []):
        lines.append(f"note     {note}")
    for err in report["errors"]:
        lines.append(f"failed   {err}")
    return "\n".join(lines)
