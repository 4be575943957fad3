"""Find the device settings this box runs best, within a time budget, and write them as a config.

The full grid (hint x streams x threads x pinning x precision x variant x shape policy) is hundreds of runs of
the whole pipeline; on a 2-core box that is hours. So the sweep is a coordinate descent: measure the
config as given, then change one axis at a time from the best so far, keeping a change only when it beats
the best by at least ``MIN_EFFECT`` (the box is shared; smaller wins are noise).

It must not fool itself (issue 30: it once kept bf16 on a CPU without bf16, because bf16 "won" 1.36 vs 0.79
images/s while the load on the box changed, though its confirmation showed 1.42 vs 1.43). So: only the
precisions the CPU computes natively are tried; a point the plugin would run exactly as an earlier one (same IR,
same effective hint, streams, threads, pinning, precision, shape policy: ``auto`` and 2 streams are one thing on
2 cores) is not run again; and the winner is measured against the config as given in a second round, in the
reverse order, and kept only if it won by ``MIN_EFFECT`` in every round. The report says which. Axes are tried in the
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

MIN_EFFECT = 0.05  # a change must beat the best by 5 % to be kept, and the config as given by 5 % in every round
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
    skipped: str | None = None  # why it was not run: an earlier trial ran it, or its picture is under the floor
    extra: dict[str, Any] = field(default_factory=dict)

    def score(self, goal: str) -> float:
        """Higher is better: images/s, or 1 / p50 latency."""
        if self.report is None or self.report["ok"] == 0:
            return float("-inf")
        if goal == "latency":
            return 1.0 / max(float(self.report["latency_s"]["p50"]), 1e-9)
        return float(self.report["images_per_s"])


def axes(config: Config, model: ModelInfo, *, cores: int, precisions: list[str],
         int8_floor_db: float = QUALITY_FLOOR_DB) -> list[tuple[str, list[Any]]]:
    """The values each axis may take, in the order they are tried. ``precisions``: what the CPU computes
    natively (``timing.native_precisions``); the plugin runs any other as f32, so trying it only times f32 twice.

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
        ("inference_precision", ["auto", *[p for p in PRECISION_CHOICES if p in precisions]]),
        ("performance_hint", ["THROUGHPUT", "LATENCY"]),
        ("num_streams", streams),
        ("shape_policy", ["static", "dynamic"]),
        ("inference_num_threads", threads),
        ("enable_cpu_pinning", ["auto", True, False]),
    ]


def variant_figures(config: Config, model: ModelInfo, *, seconds: float = TIMING_SECONDS) -> list[Timing]:
    """Every variant x every precision this CPU computes natively, timed by the start-up choice's own
    function (``timing.measure_candidates``) at the timing shape: tune's report shows all of them, also
    those the floor keeps out of the sweep."""
    import openvino as ov

    core = ov.Core()
    candidates = [Candidate(v, p) for v in model.variant_names() for p in native_precisions(core)]
    shape = timing_shape(config.image, multiple=model.size_multiple)
    return measure_candidates(model, config.device, candidates, shape, seconds=seconds, core=core)


def variant_quality(model: ModelInfo, timings: list[Timing]) -> dict[tuple[str, str], float]:
    """(variant, precision) -> the quality estimate the start-up choice holds to the floor: the IR's figure vs
    FP32 with the precision's own loss (its picture vs the same IR at f32) added as noise power."""
    from ..runtime.choice import combined_db

    figures = {spec.name: spec.quality_db for spec in model.variants()}
    found = {}
    for t in timings:
        parts = [f for f in (figures.get(t.candidate.variant), t.psnr_vs_f32_db) if f is not None]
        if parts:
            found[(t.candidate.variant, t.candidate.precision)] = combined_db(*parts)
    return found


def variant_table(model: ModelInfo, timings: list[Timing], shape_hw: tuple[int, int]) -> str:
    """The variant figures as a fixed-width table (inference only, no decode/encode)."""
    quality = {spec.name: spec.quality_db for spec in model.variants()}
    lines = [f"variants of {model.name} at {shape_hw[1]}x{shape_hw[0]} (inference only, "
             f"the start-up choice's timing):",
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
          int8_floor_db: float = QUALITY_FLOOR_DB, quality_db: dict[tuple[str, str], float] | None = None
          ) -> list[Trial]:
    """Coordinate descent over ``axes`` within ``budget_s``, then a confirmation round.

    The first trial (the config as given) always runs. A point whose effective settings (``resolved``) are an
    earlier trial's is recorded as the same, not run; so is one whose (variant, precision) the plugin would run
    has a quality estimate (``quality_db``: ``variant_quality``) under ``int8_floor_db``: an INT8 IR at 36.4 dB
    run at bf16 (37.6 dB from its f32 run) is ~34 dB, and speed alone would keep it. When a change won, the
    winner and then the config as
    given are measured once more (the reverse order of the first round), and the winner stays only if it beat
    the config as given by ``MIN_EFFECT`` in both rounds: one lucky run on a shared box is not a win.
    """
    import openvino as ov

    if goal not in GOALS:
        raise UserError(f"--goal: expected one of {', '.join(GOALS)}, got {goal!r}")
    model = resolve_model(config.model.path, search_dirs=config.model.dirs)
    core = ov.Core()
    plan = axes(config, model, cores=usable_cores(), precisions=native_precisions(core, config.device.name),
                int8_floor_db=int8_floor_db)
    first = Trial("as configured", baseline(config, model))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=3 + sum(len(values) - 1 for _, values in plan), unit="trial", dynamic_ncols=True)
    started = time.perf_counter()
    trials = [run_trial(config, files, first, goal=goal)]
    seen = {resolved(config, first.settings, core=core): first.label}
    best = first
    _tick(bar, first)
    try:
        for axis, value in _points(plan, lambda: best):  # noqa: B023 - reads the best so far, on purpose
            estimate = statistics.fmean([t.seconds for t in trials if t.report is not None or t.error])
            if time.perf_counter() - started + 3 * estimate > budget_s:  # room for one trial + the confirmation
                log.info("tune: budget of %.0f s reached after %d trials", budget_s, len(trials))
                break
            trial = Trial(f"{axis}={_short(value)}", {**best.settings, axis: value})
            key = resolved(config, trial.settings, core=core)
            quality = (quality_db or {}).get((str(key[0]), str(key[5])))
            if key in seen:
                trial.skipped = f'the plugin would run it exactly as "{seen[key]}"'
            elif quality is not None and quality < int8_floor_db:
                trial.skipped = (f"{key[0]} at {key[5]} is {quality:.1f} dB from FP32 (estimated), under the "
                                 f"{int8_floor_db:.0f} dB floor")
            else:
                seen[key] = trial.label
                run_trial(config, files, trial, goal=goal)
                if trial.score(goal) >= best.score(goal) * (1 + MIN_EFFECT):
                    best = trial
            trials.append(trial)
            _tick(bar, trial)
        if best is not first:
            trials += _confirm(config, files, first, best, goal=goal, bar=bar)
        else:
            first.kept = True
    finally:
        if bar is not None:
            bar.close()
    return trials


def resolved(config: Config, settings: dict[str, Any], *, core: Any) -> tuple[Any, ...]:
    """What the plugin would run for a sweep point: the IR (``auto`` resolved through the start-up choice) and
    the effective hint, streams, threads, pinning and precision it reads back, with the shape policy and
    requests. Two points with the same key are one measurement (a compile from the model cache, ~0.1 s);
    a point the plugin refuses gets a key of its own, so its trial runs and reports the error."""
    from ..runtime.choice import open_engine

    try:
        model, engine = open_engine(apply(config, settings, goal="throughput"), core=core)
    except (EdgeAnimeError, RuntimeError) as exc:
        return ("refused", tuple(sorted(settings.items())), str(exc))
    try:
        eff = engine.effective
        return (model.variant_name, eff.get("PERFORMANCE_HINT"), eff.get("NUM_STREAMS"),
                eff.get("INFERENCE_NUM_THREADS"), eff.get("ENABLE_CPU_PINNING"), eff.get("INFERENCE_PRECISION_HINT"),
                settings["shape_policy"], engine.num_requests)
    finally:
        engine.close()


def _points(plan: list[tuple[str, list[Any]]], best: Any) -> Any:
    """(axis, value) pairs still to try, skipping each axis's value the current best already has."""
    for axis, values in plan:
        for value in values:
            if value != best().settings[axis]:
                yield axis, value


def _confirm(config: Config, files: list[Path], first: Trial, best: Trial, *, goal: str, bar: Any) -> list[Trial]:
    """Round 2, in the reverse order of round 1: the winner, then the config as given. The winner is kept only
    if it beat the config as given by ``MIN_EFFECT`` in both rounds; the verdict and the figures of each round
    go into ``extra["rounds"]`` of the kept trial, for the report."""
    again_best = run_trial(config, files, Trial(f"confirm: {best.label}", dict(best.settings)), goal=goal)
    _tick(bar, again_best)
    again_first = run_trial(config, files, Trial("confirm: as configured", dict(first.settings)), goal=goal)
    _tick(bar, again_first)
    rounds = [(best.score(goal), first.score(goal)), (again_best.score(goal), again_first.score(goal))]
    won = confirmed(rounds)
    winner_trial = again_best if won else again_first
    winner_trial.kept = True
    winner_trial.extra["rounds"] = {"change": best.label, "won": won,
                                    "scores": [[round(b, 3), round(f, 3)] for b, f in rounds]}
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
        if t.skipped is not None:
            lines.append(f"  {t.label[:28]:28} not run: {t.skipped}")
            continue
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
    lines.append(f"goal: {goal}; * = the setting kept (a change must beat the config as given by "
                 f"{MIN_EFFECT:.0%} in each of two rounds, the second in the reverse order)")
    lines += [verdict(t.extra["rounds"], goal=goal) for t in trials if "rounds" in t.extra]
    return "\n".join(lines)


def confirmed(rounds: list[tuple[float, float]]) -> bool:
    """(change, as configured) scores per round: the change wins only by ``MIN_EFFECT`` in every one."""
    return bool(rounds) and all(change >= given * (1 + MIN_EFFECT) for change, given in rounds)


def verdict(rounds: dict[str, Any], *, goal: str) -> str:
    """One line: what was kept or what lost, with each round's figures."""
    unit = "images/s" if goal == "throughput" else "1/s of p50 latency"
    figures = "; ".join(f"round {n}: {b:.2f} vs {f:.2f} {unit} ({(b / f - 1) * 100 if f > 0 else 0:+.0f} %)"
                        for n, (b, f) in enumerate(rounds["scores"], start=1))
    if rounds["won"]:
        return f"kept {rounds['change']}: it beat the config as given in every round ({figures})"
    return (f"lost: {rounds['change']} did not beat the config as given by {MIN_EFFECT:.0%} in every round "
            f"({figures}); the config as given is kept")


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
