"""Which IR of a style, at which inference precision, runs on this box: pinned in the config, or measured.

Why measured: no rule of CPU flags picks right on the project's boxes. On a 2-vCPU Xeon with AVX512_BF16 but
no AMX the plugin's bf16 ran 0.65x f32 and the INT8 IR 3.4x bf16; on an AMX Xeon bf16 is 3-5x f32 and INT8
~1.3x bf16; on AVX2 f32 is the only float. So at the first start on a box every eligible (variant x
precision) is timed for a few seconds at the configured image size (``probe.measure_candidates``), the
fastest that holds the quality floor is kept, and the decision is written as a small JSON beside the model
cache (``device.cache_dir``), keyed by CPU model + flags, usable cores, OpenVINO version, the style's
digests, the shape and the device settings. A later start with the same key reads it (milliseconds); any
change of key measures again. Settings in the config always win: a pinned axis is not measured.

Quality: a variant is eligible only when its manifest carries its worst-image PSNR against FP32 and that is
at least ``QUALITY_FLOOR_DB`` (the default IR is always eligible: it is what the style is). A lower
precision's own loss (its picture vs the same IR at f32, measured in the probe) is added as independent
noise, so an INT8 IR at 35.0 dB is not run in bf16 if that would take the estimate under the floor.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openvino as ov

from ..config import QUALITY_FLOOR_DB, Config, DeviceSection, ImageSection
from ..fsutil import write_atomic
from ..imaging.geometry import padded_size
from ..models import ModelInfo, resolve_model
from .engine import Engine, ensure_cache_dir
from .host import box_key
from .timing import DEFAULT_SECONDS as TIMING_SECONDS
from .timing import Candidate, OnCandidate, Timing, estimate_seconds, measure_candidates, native_precisions

log = logging.getLogger(__name__)

DECISION_FORMAT = 1
DECISION_PREFIX = "edge-anime-choice-"
LOCK_NAME = ".edge-anime-choice.lock"
LANDSCAPE_RATIO = 0.75  # max_side and keep: camera photos are mostly 4:3, timed as such
# The device settings that change which candidate is fastest; part of the key, so a retuned config re-measures.
KEY_DEVICE_FIELDS = ("performance_hint", "num_requests", "num_streams", "inference_num_threads",
                     "enable_cpu_pinning", "enable_hyper_threading", "scheduling_core_type", "execution_mode",
                     "shape_policy")

_warned: set[tuple[str, str]] = set()  # (style folder, variant) already logged as lacking a quality figure


@dataclass
class Choice:
    """What runs and why: ``how`` is pinned | only | measured | cached; ``figures`` has one row per
    candidate (images/s, quality estimate, eligible or the reason not)."""

    variant: str
    precision: str
    how: str
    shape_hw: tuple[int, int]
    figures: list[dict[str, Any]] = field(default_factory=list)
    probe_s: float = 0.0
    measured_at: str | None = None
    file: Path | None = None

    def summary(self) -> str:
        """One line for the start log, ``config show`` and the status file."""
        head = f"{self.variant} at {self.precision}"
        rows = [f for f in self.figures if f.get("images_per_s")]
        if self.how in ("measured", "cached") and rows:
            speeds = ", ".join(f"{f['variant']}@{f['precision']} {f['images_per_s']:.2f}"
                               + ("" if f["eligible"] else f" ({f['reason']})") for f in rows)
            when = "measured now" if self.how == "measured" else f"measured {self.measured_at}, cached"
            why = f"{when} at {self.shape_hw[1]}x{self.shape_hw[0]}: images/s {speeds}"
        else:
            why = {"pinned": "pinned in the config", "only": "the only candidate"}.get(self.how, self.how)
        return (f"{head} ({why}); pin with model.variant: {self.variant} and device.inference_precision: "
                f"{self.precision}")

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "precision": self.precision, "how": self.how,
                "shape": [self.shape_hw[1], self.shape_hw[0]], "figures": self.figures,
                "probe_s": round(self.probe_s, 2), "measured_at": self.measured_at,
                "file": str(self.file) if self.file else None, "summary": self.summary()}


def timing_shape(image: ImageSection, *, multiple: int) -> tuple[int, int]:
    """(H, W) the service will mostly run at: the fixed size, the centre square, or a 4:3 landscape photo
    at ``max_side`` (``keep`` has no size of its own and is timed like max_side)."""
    if image.resize == "fixed":
        width, height = image.fixed
    elif image.resize == "center_square":
        width = height = image.center_square
    else:
        width, height = image.max_side, round(image.max_side * LANDSCAPE_RATIO)
    padded_width, padded_height = padded_size((width, height), max(multiple, image.multiple))  # what runs
    return padded_height, padded_width


def combined_db(*figures: float) -> float:
    """Independent errors add as noise power: 35.0 dB and 46 dB together are 34.7 dB."""
    return -10 * math.log10(sum(10 ** (-f / 10) for f in figures))


def candidates_for(config: Config, style: ModelInfo, core: ov.Core) -> list[Candidate]:
    """Every (variant x precision) the config leaves open; a pinned axis has its one value."""
    variants = style.variant_names() if config.model.variant == "auto" else [config.model.variant]
    if config.device.inference_precision == "auto":
        precisions = native_precisions(core, config.device.name)
    else:
        precisions = [config.device.inference_precision]
    return [Candidate(v, p) for v in variants for p in precisions]


def eligible_variants(style: ModelInfo, names: list[str]) -> dict[str, str | None]:
    """variant -> None when it may be auto-chosen, else the reason it may not (logged once per process)."""
    verdicts: dict[str, str | None] = {}
    for spec in style.variants():
        if spec.name not in names:
            continue
        reason = None
        if not spec.default and spec.quality_db is None:
            reason = "no quality figure vs FP32 in its manifest"
        elif not spec.default and spec.quality_db is not None and spec.quality_db < QUALITY_FLOOR_DB:
            reason = f"{spec.quality_db:.1f} dB vs FP32 is below the {QUALITY_FLOOR_DB:.0f} dB floor"
        verdicts[spec.name] = reason
        if reason and (str(style.directory), spec.name) not in _warned:
            _warned.add((str(style.directory), spec.name))
            log.warning("choice: %s variant %s is never auto-chosen: %s (model.variant: %s still runs it)",
                        style.name, spec.name, reason, spec.name)
    return verdicts


def decision_key(config: Config, style: ModelInfo, shape_hw: tuple[int, int]) -> dict[str, Any]:
    """Everything that, changed, can change the fastest candidate."""
    digests = sorted(f"{s.name}:{_digest_of(style, s.name)}" for s in style.variants())
    device = config.device
    return {
        **box_key(), "openvino": ov.get_version(), "style": style.name,
        "model_sha256": hashlib.sha256("\n".join(digests).encode()).hexdigest(),
        "shape": [shape_hw[1], shape_hw[0]],
        "device": {k: _config_value(getattr(device, k)) for k in KEY_DEVICE_FIELDS},
        "pinned": {"model.variant": config.model.variant, "device.inference_precision": device.inference_precision},
    }


def choose(config: Config, style: ModelInfo, *, core: ov.Core | None = None,
           seconds: float | None = None) -> Choice:
    """The candidate to run: pinned, the only one, read from a matching cached decision, or measured now."""
    core = core if core is not None else ov.Core()
    candidates, shape, fixed = _without_measuring(config, style, core)
    if fixed is not None:
        return fixed
    key = decision_key(config, style, shape)
    path = decision_path(config, style, shape)
    if path is None:
        log.info("choice: device.cache_dir is null, so the measurement is not kept: every start measures")
        return _measure(config, style, candidates, shape, key, core=core, seconds=seconds)
    with _choice_lock(path.parent):  # workers starting together: one measures, the others read its result
        cached = read_decision(path, key, style)
        if cached is not None:
            return cached
        choice = _measure(config, style, candidates, shape, key, core=core, seconds=seconds)
        choice.file = path
        write_decision(path, key, choice)
        return choice


def _without_measuring(config: Config, style: ModelInfo, core: ov.Core
                       ) -> tuple[list[Candidate], tuple[int, int], Choice | None]:
    """The candidates, the probe's shape, and the choice when there is nothing to measure (pinned or only)."""
    candidates = candidates_for(config, style, core)  # a pinned unknown variant fails here, naming the key
    if config.model.variant != "auto":
        style.with_variant(config.model.variant, verify=False)
    shape = timing_shape(config.image, multiple=style.size_multiple)
    if len(candidates) != 1:
        return candidates, shape, None
    how = "pinned" if config.model.variant != "auto" and config.device.inference_precision != "auto" else "only"
    return candidates, shape, Choice(candidates[0].variant, candidates[0].precision, how, shape)


def cached_choice(config: Config, style: ModelInfo, *, core: ov.Core | None = None) -> Choice | str:
    """What a start would run without measuring anything: the pinned or only candidate, or the cached
    decision for this box; else a sentence saying the next start measures (for ``config show``/``status``)."""
    core = core if core is not None else ov.Core()
    candidates, shape, fixed = _without_measuring(config, style, core)
    if fixed is not None:
        return fixed
    path = decision_path(config, style, shape)
    found = read_decision(path, decision_key(config, style, shape), style) if path is not None else None
    if found is not None:
        return found
    labels = ", ".join(c.label for c in candidates)
    about = _duration(estimate_seconds(len(candidates), shape))
    return (f"not measured on this box yet: the next start times {labels} at {shape[1]}x{shape[0]}, about "
            f"{about} in all, and keeps the fastest (pin model.variant and device.inference_precision to skip it)")


def decision_path(config: Config, style: ModelInfo, shape: tuple[int, int]) -> Path | None:
    """Where the decision for this key lives (None when ``device.cache_dir`` is null)."""
    if config.device.cache_dir is None:
        return None
    key = decision_key(config, style, shape)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(config.device.cache_dir) / f"{DECISION_PREFIX}{style.name}-{digest[:16]}.json"


def _measure(config: Config, style: ModelInfo, candidates: list[Candidate], shape: tuple[int, int],
             key: dict[str, Any], *, core: ov.Core, seconds: float | None) -> Choice:
    if config.model.variant == "auto":
        verdicts = eligible_variants(style, sorted({c.variant for c in candidates}))
    else:  # the operator's pin outranks the manifest's quality gate: only the precision is measured, each
        verdicts = {config.model.variant: None}  # still held to the floor by its own loss (``_row``)
    timed = [c for c in candidates if verdicts.get(c.variant) is None]
    seconds = seconds if seconds is not None else TIMING_SECONDS
    log.info("choice: measuring which variant of %s runs fastest on this box: %s at %dx%d, about %s (first start "
             "with this CPU, OpenVINO, model, size and settings only; pin model.variant and "
             "device.inference_precision to skip it)", style.name, ", ".join(c.label for c in timed), shape[1],
             shape[0], _duration(estimate_seconds(len(timed), shape, seconds=seconds)))
    started = time.perf_counter()
    timings = measure_candidates(style, config.device, timed, shape, core=core, seconds=seconds,
                                 on_candidate=_progress_line(started, seconds))
    figures = [_row(style, t, verdicts) for t in timings]
    figures += [{"variant": c.variant, "precision": c.precision, "images_per_s": None, "eligible": False,
                 "reason": verdicts[c.variant]} for c in candidates if c not in timed]
    fit = [f for f in figures if f["eligible"]]
    if not fit:  # nothing timed well: the first candidate (the pinned variant, else the style's default) at
        best = {"variant": candidates[0].variant, "precision": candidates[0].precision}  # the first precision
    else:
        best = max(fit, key=lambda f: float(f["images_per_s"]))
    choice = Choice(str(best["variant"]), str(best["precision"]), "measured", shape, figures,
                    probe_s=time.perf_counter() - started, measured_at=_now())
    log.info("choice: measured in %s: %s", _duration(choice.probe_s), choice.summary())
    return choice


def _progress_line(started: float, seconds: float) -> OnCandidate:
    """One log line per candidate as it is done with, and what is left: the first start measures for minutes
    at 1024 px on 2 cores, and a line every 10-20 s is what tells a person it is working, not hung. What is
    left is re-estimated from what the candidates so far took (builds) and the rounds still owed (``seconds``
    per candidate whose round was short enough to keep for them)."""
    kept = 0

    def say(timing: Timing, done: int, total: int) -> None:
        nonlocal kept
        label = timing.candidate.label
        if timing.error:
            what = f"{label} refused by the plugin ({timing.error})"
        elif timing.runs_images_per_s:
            what = f"{label} {timing.images_per_s:.2f} images/s"
        else:
            kept += 1
            what = f"{label} compiled and warmed, timed in the rounds at the end"
        elapsed = time.perf_counter() - started
        left = elapsed / done * (total - done) + seconds * kept * total / done
        log.info("choice: %d of %d: %s (%s so far, about %s left)", done, total, what, _duration(elapsed),
                 _duration(left))

    return say


def _duration(seconds: float) -> str:
    """``8 s``, ``95 s``, ``3 min``: a person's reading of a wait, not a measurement."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _row(style: ModelInfo, timing: Timing, verdicts: dict[str, str | None]) -> dict[str, Any]:
    """One figure row: speed, the quality estimate (IR figure with the precision's own loss added)."""
    row = timing.to_dict()
    spec = next(s for s in style.variants() if s.name == timing.candidate.variant)
    parts = [f for f in (spec.quality_db, timing.psnr_vs_f32_db) if f is not None]
    row["quality_db"] = round(combined_db(*parts), 2) if parts else None
    reason = verdicts.get(timing.candidate.variant)
    if timing.error:
        reason = timing.error
    elif row["quality_db"] is not None and row["quality_db"] < QUALITY_FLOOR_DB and not (
            spec.default and timing.candidate.precision == "f32"):
        reason = f"{row['quality_db']:.1f} dB estimated vs FP32, under {QUALITY_FLOOR_DB:.0f} dB"
    row["eligible"], row["reason"] = reason is None, reason
    return row


def read_decision(path: Path, key: dict[str, Any], style: ModelInfo) -> Choice | None:
    """A cached decision for exactly ``key``; None when there is none, and None with a warning when the file
    is damaged or names a candidate the style no longer has (then it is measured again and rewritten)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("choice: %s: cannot read it (%s); measuring again", path, exc.strerror)
        return None
    try:
        data = json.loads(text)
        if data["format"] != DECISION_FORMAT or data["key"] != key:
            return None
        chosen = data["choice"]
        choice = Choice(str(chosen["variant"]), str(chosen["precision"]), "cached",
                        (int(chosen["shape"][1]), int(chosen["shape"][0])), list(chosen["figures"]),
                        probe_s=float(chosen["probe_s"]), measured_at=str(chosen["measured_at"]), file=path)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("choice: %s is damaged (%s: %s); ignoring it and measuring again", path,
                    type(exc).__name__, exc)
        return None
    if choice.variant not in style.variant_names():
        log.warning("choice: %s names variant %s, which %s does not have; measuring again", path,
                    choice.variant, style.name)
        return None
    return choice


def write_decision(path: Path, key: dict[str, Any], choice: Choice) -> None:
    """Temp then rename (``fsutil.write_atomic``): a killed probe leaves the old file or none, never half."""
    data = {"format": DECISION_FORMAT, "key": key, "choice": choice.to_dict()}
    try:
        write_atomic(path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs a re-measure, not the start
        log.warning("choice: cannot keep the decision in %s (%s); the next start measures again", path, exc)


def open_engine(config: Config, *, core: ov.Core | None = None) -> tuple[ModelInfo, Engine]:
    """The style of ``config.model``, its chosen variant and precision, compiled: what ``run``, ``stylize``
    and ``bench`` start with. Returns (the variant's ModelInfo, the engine), as the service's loader does."""
    core = core if core is not None else ov.Core()
    style = resolve_model(config.model.path, search_dirs=list(config.model.dirs), verify=False)
    pinned = config.model.variant != "auto" or bool(style.variant)  # model.path may name a variant's .xml
    if style.variant and config.model.variant == "auto":
        config = config.model_copy(update={"model": config.model.model_copy(update={"variant": style.variant})})
    choice = choose(config, style, core=core)
    if pinned and choice.how == "only":
        choice.how = "pinned"
    model = style.with_variant(choice.variant)
    log.info("engine: compiling %s (%s at %s) for %dx%d pictures", style.name, choice.variant, choice.precision,
             choice.shape_hw[1], choice.shape_hw[0])
    engine = Engine(model, device_for(choice, config.device), core=core, choice=choice.to_dict())
    return model, engine


@contextlib.contextmanager
def _choice_lock(cache_dir: Path) -> Iterator[None]:
    ensure_cache_dir(cache_dir)
    with open(cache_dir / LOCK_NAME, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _digest_of(style: ModelInfo, name: str) -> str:
    base = style.style_manifest or style.manifest
    entry = base if name == str(base["precision"]) else base["variants"][name]
    return f"{entry['ir']['xml_sha256']}:{entry['ir']['bin_sha256']}"


def _config_value(value: Any) -> Any:
    """A config field as it goes into the decision's JSON key: scalars as they are, anything else as text."""
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_for(choice: Choice, device: DeviceSection) -> DeviceSection:
    """``device`` with the chosen precision filled in (what the engine compiles with)."""
    return device.model_copy(update={"inference_precision": choice.precision})
