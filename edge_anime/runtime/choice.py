"""Which IR of a style, at which inference precision, runs on this box: pinned in the config, or measured.

Why measured: no rule of CPU flags picks right on the project's boxes. On a 2-vCPU Xeon with AVX512_BF16 but
no AMX the plugin's bf16 ran 0.65x f32 and the INT8 IR 3.4x bf16; on an AMX Xeon bf16 is 3-5x f32 and INT8
~1.3x bf16; on AVX2 f32 is the only float. So at the first start on a box every eligible (variant x
precision) is screened on a small picture and the close ones timed at the shape the image policy gives a
typical photo (``runtime.shortlist``: seconds, not minutes, and one engine's memory at that shape); the
fastest that holds the quality floor is kept (the better picture among near-ties, ``TIE_SHARE``), and the
decision is written as a small JSON beside the model
cache (``device.cache_dir``), keyed by CPU model + flags, usable cores, OpenVINO version, the style's
digests, the shape and the device settings. A later start with the same key reads it (milliseconds); any
change of key measures again. Settings in the config always win: a pinned axis is not measured.

Quality: a variant is eligible only when its manifest carries its worst-image PSNR against FP32 and that is
at least ``QUALITY_FLOOR_DB`` (the default IR is always eligible: it is what the style is). A lower
precision's own loss (its picture vs the same IR at f32, measured at the screen) is added as independent
noise, so an INT8 IR at 35.0 dB is not run in bf16 if that would take the estimate under the floor.
"""
from __future__ import annotations

import contextlib
import datetime as dt
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

from ..config import LIVE_QUALITY_FLOOR_DB, QUALITY_FLOOR_DB, Config, DeviceSection, ImageSection
from ..fsutil import locked, write_atomic
from ..imaging.fullres import plan_full
from ..imaging.geometry import fit_budget, padded_size, policy_size
from ..imaging.target import target_size
from ..models import ModelInfo, resolve_model
from .engine import Engine, ensure_cache_dir
from .host import box_key
from .shortlist import FINAL_SECONDS, Contest, duration, estimate_seconds, run_contest
from .timing import Candidate, Timing, native_precisions

log = logging.getLogger(__name__)

DECISION_FORMAT = 2  # 2: screened (``screen``), timed at the policy's shape; a format-1 file is measured again
DECISION_PREFIX = "edge-anime-choice-"
LOCK_NAME = ".edge-anime-choice.lock"
# The photo the image policy is asked to size for the timing: a phone camera's 12 MP, 4:3 landscape. Under
# max_side it comes out at max_side x 3/4 of it; under a memory budget smaller than that (max_side 2048 with the
# default 1024 MB) at what the budget lets through, as every real photo of that size does.
TYPICAL_PHOTO = (4032, 3024)
# Among candidates this close to the fastest at the real shape, the better picture is kept: a difference this
# small is within a 2-core box's noise, and the quality estimate is not.
TIE_SHARE = 0.05
# The device settings that change which candidate is fastest; part of the key, so a retuned config re-measures.
KEY_DEVICE_FIELDS = ("performance_hint", "num_requests", "num_streams", "inference_num_threads",
                     "enable_cpu_pinning", "enable_hyper_threading", "scheduling_core_type", "execution_mode",
                     "shape_policy")

_warned: set[tuple[str, str]] = set()  # (style folder, variant) already logged as lacking a quality figure


@dataclass
class Choice:
    """What runs and why: ``how`` is pinned | only | measured | cached | failed; ``figures`` has one row per
    candidate (images/s, quality estimate, eligible or the reason not)."""

    variant: str
    precision: str
    how: str
    shape_hw: tuple[int, int]
    figures: list[dict[str, Any]] = field(default_factory=list)
    measure_s: float = 0.0
    measured_at: str | None = None
    file: Path | None = None
    screen_hw: tuple[int, int] | None = None  # the screen's picture (``runtime.shortlist``), when there was one

    def summary(self) -> str:
        """One line for the start log, ``config show`` and the status file."""
        head = f"{self.variant} at {self.precision}"
        rows = [f for f in self.figures if f.get("images_per_s")]
        if self.how in ("measured", "cached") and rows:
            speeds = ", ".join(f"{f['variant']}@{f['precision']} {f['images_per_s']:.2f}"
                               + ("" if f["eligible"] else f" ({f['reason']})") for f in rows)
            when = "measured now" if self.how == "measured" else f"measured {self.measured_at}, cached"
            why = f"{when} at {self.shape_hw[1]}x{self.shape_hw[0]}: images/s {speeds}"
            left_out = [f for f in self.figures if f.get("screen_images_per_s") and not f.get("images_per_s")]
            slower = [f for f in left_out if f["eligible"]]
            under = [f for f in left_out if not f["eligible"]]  # maybe the screen's fastest: not "slower"
            screen = f"the {self.screen_hw[1]}x{self.screen_hw[0]} screen" if self.screen_hw else "the screen"
            if slower:
                why += (f"; {len(slower)} more slower at {screen} ("
                        + ", ".join(f"{f['variant']}@{f['precision']}" for f in slower) + ")")
            if under:
                why += (f"; {len(under)} left out at {screen}: "
                        + ", ".join(f"{f['variant']}@{f['precision']} {f['screen_images_per_s']:.2f} ({f['reason']})"
                                    for f in under))
        else:
            why = {"pinned": "pinned in the config", "only": "the only candidate",
                   "failed": "the measurement failed, so the first candidate runs; the next start measures again"
                   }.get(self.how, self.how)
        return (f"{head} ({why}); pin with model.variant: {self.variant} and device.inference_precision: "
                f"{self.precision}")

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "precision": self.precision, "how": self.how,
                "shape": [self.shape_hw[1], self.shape_hw[0]], "figures": self.figures,
                "measure_s": round(self.measure_s, 2), "measured_at": self.measured_at,
                "screen": None if self.screen_hw is None else [self.screen_hw[1], self.screen_hw[0]],
                "file": str(self.file) if self.file else None, "summary": self.summary()}


def timing_shape(image: ImageSection, *, multiple: int) -> tuple[int, int]:
    """(H, W) the service will mostly run at: what the image policy (resize, max_side, the memory budget) makes
    of a typical camera photo (``TYPICAL_PHOTO``), padded to the multiple as it runs. ``full`` is timed at its
    tile when the photo runs in tiles."""
    step = max(multiple, image.multiple)
    if image.resize == "full":
        plan = plan_full(TYPICAL_PHOTO, image)
        size = (plan.tile_px, plan.tile_px) if plan is not None and plan.tiled else (
            plan.size if plan is not None else TYPICAL_PHOTO)
    else:  # a budget that refuses the photo still runs the largest that fits it: time that
        size = (target_size(TYPICAL_PHOTO, image, multiple=step)
                or fit_budget(policy_size(TYPICAL_PHOTO, image), image.memory_budget_mb, multiple=step)
                or policy_size(TYPICAL_PHOTO, image))
    padded_width, padded_height = padded_size(size, step)  # what runs
    return padded_height, padded_width


def combined_db(*figures: float) -> float:
    """Independent errors add as noise power: 35.0 dB and 46 dB together are 34.7 dB."""
    return -10 * math.log10(sum(10 ** (-f / 10) for f in figures))


def candidates_for(config: Config, style: ModelInfo, core: ov.Core) -> list[Candidate]:
    """Every (variant x precision) the config leaves open; a pinned axis has its one value."""
    # auto: the IRs made for pictures; one made for live frames only (``uses: [live]``, a distilled student) is
    # not the same picture at 35 dB and runs where a config names it (http.live.variant does), never by measure
    variants = ([v.name for v in style.variants() if "pictures" in v.uses] if config.model.variant == "auto"
                else [config.model.variant])
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
        if choice.how == "measured":  # a failed measurement is not kept: the next start tries again
            choice.file = path
            write_decision(path, key, choice)
        return choice


def _without_measuring(config: Config, style: ModelInfo, core: ov.Core
                       ) -> tuple[list[Candidate], tuple[int, int], Choice | None]:
    """The candidates, the timing shape, and the choice when there is nothing to measure (pinned or only)."""
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
    about = duration(estimate_seconds(len(candidates), shape, multiple=style.size_multiple))
    return (f"not measured on this box yet: the next start times {labels} at {shape[1]}x{shape[0]}, up to about "
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
    log.info("choice: measuring which variant of %s runs fastest on this box: %s for %dx%d pictures, up to "
             "about %s "
             "(first start with this CPU, OpenVINO, model, size and settings only; pin model.variant and "
             "device.inference_precision to skip it)", style.name, ", ".join(c.label for c in timed), shape[1],
             shape[0], duration(estimate_seconds(len(timed), shape, multiple=style.size_multiple)))
    started = time.perf_counter()
    contest = run_contest(style, config.device, timed, shape, core=core,
                          fits=lambda t: bool(_row(style, t, verdicts)["eligible"]),
                          final_seconds=seconds if seconds is not None else FINAL_SECONDS)
    figures = _figures(style, contest, verdicts)
    figures += [{"variant": c.variant, "precision": c.precision, "images_per_s": None, "eligible": False,
                 "reason": verdicts[c.variant]} for c in candidates if c not in timed]
    best = pick([f for f in figures if f["eligible"] and f["images_per_s"]])
    if best is None:  # nothing timed well: the first candidate (the pinned variant, else the style's default) at
        best = {"variant": candidates[0].variant, "precision": candidates[0].precision}  # the first precision
    choice = Choice(str(best["variant"]), str(best["precision"]), "failed" if contest.failed else "measured", shape,
                    figures, measure_s=time.perf_counter() - started, measured_at=_now(), screen_hw=contest.screen_hw)
    log.info("choice: measured in %s: %s", duration(choice.measure_s), choice.summary())
    return choice


def pick(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row to run: the fastest, or among those within ``TIE_SHARE`` of it, the best quality estimate (the
    bundled INT8 IRs run at one speed and differ by 3 dB: the better one should win, not the luckier)."""
    if not rows:
        return None
    fastest = max(float(r["images_per_s"]) for r in rows)
    close = [r for r in rows if float(r["images_per_s"]) >= (1 - TIE_SHARE) * fastest]
    return max(close, key=lambda r: (r.get("quality_db") or 0.0, float(r["images_per_s"])))


def _figures(style: ModelInfo, contest: Contest, verdicts: dict[str, str | None]) -> list[dict[str, Any]]:
    """One row per timed candidate: ``images_per_s`` at the real shape (None for one the screen left out),
    ``screen_images_per_s`` at the screen's picture when there was one."""
    if contest.screen_hw is None:
        return [_row(style, t, verdicts) for t in contest.final]
    final = {t.candidate: t for t in contest.final}
    rows = []
    for screened in contest.screen:
        row = _row(style, final.get(screened.candidate, screened), verdicts)
        row["screen_images_per_s"] = round(screened.images_per_s, 3)
        if screened.candidate not in final:
            row["images_per_s"], row["runs_images_per_s"] = None, []
        rows.append(row)
    return rows


def _row(style: ModelInfo, timing: Timing, verdicts: dict[str, str | None]) -> dict[str, Any]:
    """One figure row: speed, the quality estimate (IR figure with the precision's own loss added)."""
    row = timing.to_dict()
    spec = next(s for s in style.variants() if s.name == timing.candidate.variant)
    # a live variant is held to its mean against its teacher (LIVE_QUALITY_FLOOR_DB), a picture's IR to its worst
    live = "pictures" not in spec.uses
    floor, figure = (LIVE_QUALITY_FLOOR_DB, spec.quality_mean_db) if live else (QUALITY_FLOOR_DB, spec.quality_db)
    parts = [f for f in (figure, timing.psnr_vs_f32_db) if f is not None]
    row["quality_db"] = round(combined_db(*parts), 2) if parts else None
    reason = verdicts.get(timing.candidate.variant)
    if timing.error:
        reason = timing.error
    elif row["quality_db"] is not None and row["quality_db"] < floor and not (
            spec.default and timing.candidate.precision == "f32"):
        reason = f"{row['quality_db']:.1f} dB estimated vs {'its teacher' if live else 'FP32'}, under {floor:.0f} dB"
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
                        measure_s=float(chosen["measure_s"]), measured_at=str(chosen["measured_at"]), file=path,
                        screen_hw=None if not chosen.get("screen") else (int(chosen["screen"][1]),
                                                                          int(chosen["screen"][0])))
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
    """Temp then rename (``fsutil.write_atomic``): a killed measurement leaves the old file or none, never half."""
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
    with locked(cache_dir / LOCK_NAME):
        yield


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
