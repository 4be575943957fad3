"""Find the device settings this box runs best, within a time budget, and write them as a config.

The full grid (hint x streams x threads x pinning x precision x variant x shape policy) is hundreds of runs of
the whole pipeline; on a 2-core box that is hours. So the sweep is a coordinate descent: measure the
config as given, then change one axis at a time from the best so far, keeping a change only when it beats
the best by more than ``NOISE_MARGIN`` (the box is shared; smaller wins are noise). Axes are tried in the
order of the effect measured on this hardware (variant/precision first, then hint, streams, shape policy,
threads, pinning), so a short budget still covers what matters. Each trial is ``bench.measure`` on the
same files: real decode, inference, encode and write.
"""
from __future__ import annotations

import io
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config import PRECISION_CHOICES, QUALITY_FLOOR_DB, Config, effective_yaml, load_config
from ..errors import EdgeAnimeError, UserError
from ..fsutil import write_atomic
from ..models import ModelInfo, resolve_model
from ..runtime.choice import timing_shape
from ..runtime.host import usable_cores
from ..runtime.timing import DEFAULT_SECONDS as TIMING_SECONDS
from ..runtime.timing import Candidate, Timing, measure_candidates, native_precisions
from .throughput import measure

log = logging.getLogger(__name__)

NOISE_MARGIN = 0.03  # a change must beat the best by 3% to be kept
GOALS = ("throughput", "latency")


@dataclass
class Trial:
    """One point of the sweep and what it measured."""

    label: str
    settings: dict[str, Any]  # axis -> value, the full point (not only the change)
    report: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    kept: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def score(self, goal: str) -> float:
        """Higher is better: images/s, or 1 / p50 latency."""
        if self.report is None or self.report["ok"] == 0:
            return float("-inf")
        if goal == "latency":
            return 1.0 / max(float(self.report["latency_s"]["p50"]), 1e-9)
        return float(self.report["images_per_s"])


def axes(config: Config, model: ModelInfo, *, cores: int,
         int8_floor_db: float = QUALITY_FLOOR_DB) -> list[tuple[str, list[Any]]]:
    """The values each axis may take, in the order they are tried.

    ``variant`` is the style's IRs (``auto`` = the start-up measurement's pick); an IR other than the
    default whose manifest shows less than ``int8_floor_db`` against FP32, or no figure, is not swept:
    speed alone would pick a model that visibly changes the style."""
    variants: list[Any] = ["auto"]
    for spec in model.variants():
        if spec.default or (spec.quality_db is not None and spec.quality_db >= int8_floor_db):
            variants.append(spec.name)
        else:
            figure = "no figure" if spec.quality_db is None else f"{spec.quality_db:.1f} dB"
            print(f"tune: skipping variant {spec.name}: PSNR vs FP32 {figure} is below the "
                  f"{int8_floor_db:.0f} dB floor (--int8-floor-db 0 sweeps it anyway)")
    streams: list[Any] = ["auto", *range(1, cores + 1)]
    threads: list[Any] = ["auto", *range(1, cores + 1)]
    return [
        ("variant", variants),
        ("inference_precision", list(PRECISION_CHOICES)),
        ("performance_hint", ["THROUGHPUT", "LATENCY"]),
        ("num_streams", streams),
        ("shape_policy", ["static", "dynamic"]),
        ("inference_num_threads", threads),
        ("enable_cpu_pinning", ["auto", True, False]),
    ]


def variant_figures(config: Config, model: ModelInfo, *, seconds: float = TIMING_SECONDS) -> list[Timing]:
    """Every variant x every precision this CPU computes natively, timed by the start-up probe's own
    function (``probe.measure_candidates``) at the configured size: tune's report shows all of them, also
    those the floor keeps out of the sweep."""
    import openvino as ov

    core = ov.Core()
    candidates = [Candidate(v, p) for v in model.variant_names() for p in native_precisions(core)]
    shape = timing_shape(config.image, multiple=model.size_multiple)
    return measure_candidates(model, config.device, candidates, shape, seconds=seconds, core=core)


def variant_table(model: ModelInfo, timings: list[Timing], shape_hw: tuple[int, int]) -> str:
    """The variant figures as a fixed-width table (inference only, no decode/encode)."""
    quality = {spec.name: spec.quality_db for spec in model.variants()}
    lines = [f"variants of {model.name} at {shape_hw[1]}x{shape_hw[0]} (inference only, "
             f"the start-up probe's measurement):",
             f"  {'variant':10} {'prec':5} {'img/s':>7} {'dB vs FP32':>10} {'dB vs f32 run':>13}"]
    for t in timings:
        figure = quality.get(t.candidate.variant)
        vs_f32 = "-" if t.psnr_vs_f32_db is None else f"{t.psnr_vs_f32_db:.1f}"
        speed = f"{t.images_per_s:7.2f}" if t.error is None else f"failed: {t.error}"
        lines.append(f"  {t.candidate.variant:10} {t.candidate.precision:5} {speed} "
                     f"{'-' if figure is None else f'{figure:.1f}':>10} {vs_f32:>13}")
    return "\n".join(lines)


def apply(config: Config, settings: dict[str, Any], *, goal: str) -> Config:
    """``config`` with a sweep point's settings; the latency goal measures one job in flight at a time."""
    device = config.device.model_copy(update={k: v for k, v in settings.items() if k != "variant"})
    updates: dict[str, Any] = {"device": device,
                               "model": config.model.model_copy(update={"variant": settings["variant"]})}
    if goal == "latency":
        updates["pipeline"] = config.pipeline.model_copy(update={"max_in_flight": 1})
    return config.model_copy(update=updates)


def baseline(config: Config, model: ModelInfo) -> dict[str, Any]:
    device = config.device
    return {"variant": config.model.variant, "inference_precision": device.inference_precision,
            "performance_hint": device.performance_hint, "num_streams": device.num_streams,
            "shape_policy": device.shape_policy, "inference_num_threads": device.inference_num_threads,
            "enable_cpu_pinning": device.enable_cpu_pinning}


def run_trial(config: Config, files: list[Path], trial: Trial, *, goal: str) -> Trial:
    start = time.perf_counter()
    try:
        trial.report = measure(apply(config, trial.settings, goal=goal), files, repeat=1, warmup=1)
    except (EdgeAnimeError, RuntimeError) as exc:  # a setting the plugin refuses is a row, not the end
        trial.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    trial.seconds = time.perf_counter() - start
    return trial


def sweep(config: Config, files: list[Path], *, budget_s: float, goal: str, progress: bool = True,
          int8_floor_db: float = QUALITY_FLOOR_DB) -> list[Trial]:
    """Coordinate descent over ``axes`` within ``budget_s``, then a confirmation round.

    The first trial (the config as given) always runs. When a change won, the config as given and the
    winner are measured once more, in the reverse order, and the winner stays only if the mean of its two
    runs still beats the baseline's mean by ``NOISE_MARGIN``: one lucky run on a shared box is not a win.
    """
    if goal not in GOALS:
        raise UserError(f"--goal: expected one of {', '.join(GOALS)}, got {goal!r}")
    model = resolve_model(config.model.path, search_dirs=config.model.dirs)
    plan = axes(config, model, cores=usable_cores(), int8_floor_db=int8_floor_db)
    first = Trial("as configured", baseline(config, model))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=3 + sum(len(values) - 1 for _, values in plan), unit="trial", dynamic_ncols=True)
    started = time.perf_counter()
    trials = [run_trial(config, files, first, goal=goal)]
    best = first
    _tick(bar, first)
    try:
        for axis, value in _points(plan, lambda: best):  # noqa: B023 - reads the best so far, on purpose
            estimate = statistics.fmean([t.seconds for t in trials])
            if time.perf_counter() - started + 3 * estimate > budget_s:  # room for one trial + the confirmation
                log.info("tune: budget of %.0f s reached after %d trials", budget_s, len(trials))
                break
            trial = run_trial(config, files, Trial(f"{axis}={_short(value)}", {**best.settings, axis: value}),
                              goal=goal)
            trials.append(trial)
            if trial.score(goal) > best.score(goal) * (1 + NOISE_MARGIN):
                best = trial
            _tick(bar, trial)
        if best is not first:
            trials += _confirm(config, files, first, best, goal=goal, bar=bar)
        else:
            first.kept = True
    finally:
        if bar is not None:
            bar.close()
    return trials


def _points(plan: list[tuple[str, list[Any]]], best: Any) -> Any:
    """(axis, value) pairs still to try, skipping each axis's value the current best already has."""
    for axis, values in plan:
        for value in values:
            if value != best().settings[axis]:
                yield axis, value


def _confirm(config: Config, files: list[Path], first: Trial, best: Trial, *, goal: str, bar: Any) -> list[Trial]:
    """Re-measure the winner, then the baseline, and keep whichever has the better mean of its two runs."""
    again_best = run_trial(config, files, Trial(f"confirm: {best.label}", dict(best.settings)), goal=goal)
    _tick(bar, again_best)
    again_first = run_trial(config, files, Trial("confirm: as configured", dict(first.settings)), goal=goal)
    _tick(bar, again_first)
    best_mean = statistics.fmean([best.score(goal), again_best.score(goal)])
    first_mean = statistics.fmean([first.score(goal), again_first.score(goal)])
    winner_trial = again_best if best_mean > first_mean * (1 + NOISE_MARGIN) else again_first
    winner_trial.kept = True
    winner_trial.extra["mean_score"] = max(best_mean, first_mean)
    return [again_best, again_first]


def _short(value: Any) -> str:
    text = str(value)
    return Path(text).parent.name if text.endswith(".xml") else text


def _tick(bar: Any, trial: Trial) -> None:
    if bar is None:
        return
    if trial.report is not None:
        bar.set_postfix_str(f"{trial.label}: {trial.report['images_per_s']:.2f} img/s")
    bar.update(1)


def winner(trials: list[Trial]) -> Trial:
    """The trial marked kept: the confirmed winner, or the config as given when nothing beat it."""
    kept = [t for t in trials if t.kept]
    if not kept or kept[-1].report is None:
        raise UserError("tune: no setting produced a result; see the errors in the table")
    return kept[-1]


def table(trials: list[Trial], *, goal: str) -> str:
    """A fixed-width table of every trial; the kept one is starred."""
    header = (f"{'':1} {'trial':28} {'hint':10} {'str':>3} {'thr':>3} {'pin':>5} {'prec':>5} {'variant':10} "
              f"{'shape':7} {'img/s':>6} {'p50 s':>6} {'cpu%':>5}")
    lines = [header, "-" * len(header)]
    for t in trials:
        s = t.settings
        if t.report is None:
            lines.append(f"  {t.label:28} failed: {t.error}")
            continue
        eff = t.report["plugin"]["effective"]
        lines.append(
            f"{'*' if t.kept else ' '} {t.label[:28]:28} {eff.get('PERFORMANCE_HINT', '?'):10} "
            f"{eff.get('NUM_STREAMS', '?'):>3} {eff.get('INFERENCE_NUM_THREADS', '?'):>3} "
            f"{eff.get('ENABLE_CPU_PINNING', '?')!s:>5} {eff.get('INFERENCE_PRECISION_HINT', '?'):>5} "
            f"{str(t.report['plugin'].get('variant', s['variant']))[:10]:10} {s['shape_policy']:7} "
            f"{t.report['images_per_s']:6.2f} "
            f"{t.report['latency_s']['p50']:6.2f} {t.report['cpu_utilisation_pct']:5.0f}")
    lines.append(f"goal: {goal}; * = the setting kept (a change must win by {NOISE_MARGIN:.0%}, "
                 "and again on the mean of a second, reversed-order run)")
    return "\n".join(lines)


def write_config(config: Config, best: Trial, path: Path, *, goal: str, summary: str) -> Config:
    """The full effective config with the winning device settings, as YAML (temp then rename), checked by
    loading it back: a file ``tune`` writes is always one ``run`` accepts."""
    chosen = apply(config, best.settings, goal="throughput")  # the pipeline section stays as configured
    eff = best.report["plugin"]["effective"] if best.report else {}
    header = [f"# Written by `edge-anime tune` ({goal}) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
              f"# Plugin chose: {yaml.safe_dump(eff, default_flow_style=True, width=1000).strip()}",
              *[f"# {line}" for line in summary.splitlines()], ""]
    text = "\n".join(header) + effective_yaml(chosen)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))
    return load_config(path)


def chart(trials: list[Trial], path: Path, *, goal: str) -> bool:
    """A bar chart of the sweep (PNG, temp then rename); False, with a message, when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tune: matplotlib is not installed, so no chart (pip install matplotlib)")
        return False
    done = [t for t in trials if t.report is not None]
    values = [t.report["images_per_s"] if goal == "throughput" else t.report["latency_s"]["p50"]
              for t in done if t.report is not None]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(done) + 1.5))
    ax.barh([t.label for t in done], values, color=["tab:orange" if t.kept else "tab:blue" for t in done])
    ax.invert_yaxis()
    ax.set_xlabel("images/s (higher is better)" if goal == "throughput" else "p50 latency s (lower is better)")
    ax.set_title(f"edge-anime tune: {goal}; orange = kept")
    fig.tight_layout()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buffer.getvalue())
    return True
