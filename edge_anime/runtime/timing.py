"""Time one (variant x inference precision) of a style at one input size: the one measuring function behind
the start-up choice (``edge_anime.runtime.choice``) and ``edge-anime tune``'s variant table.

What is timed is what the service then sustains: the engine compiled with the configured device settings
(hint, streams, threads) and that precision, its optimal number of requests kept busy through an
``AsyncInferQueue``, on a fixed photo-like picture. Decode and encode are left out on purpose: they cost
the same for every candidate, so they would only add noise to a ranking.

On a shared box one long run per candidate ranks whoever had the quiet moment. So candidates are timed in
``rounds`` short runs in alternating order (A B B A ...), and each candidate's figure is the mean of its runs.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import openvino as ov

from ..config import PRECISION_CHOICES, DeviceSection
from ..errors import EdgeAnimeError
from ..models import ModelInfo
from .engine import Engine

log = logging.getLogger(__name__)

# The precisions the CPU plugin can be asked for, and the OPTIMIZATION_CAPABILITIES word that says the CPU
# computes it natively. Without it the plugin silently runs f32, and timing it would only time f32 twice.
NATIVE_CAPABILITY: dict[str, str] = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}
DEFAULT_SECONDS = 2.0  # per candidate, over all its rounds: "a few seconds" at first start
DEFAULT_ROUNDS = 2
DB_CAP = 100.0  # PSNR of identical pictures, so a figure is always a finite number
# A first guess of how long measuring takes, said before anything is timed (``shortlist.estimate_seconds``): f32 on a
# 2-core box runs ~4-5 s per megapixel (README, Full resolution: 4.2-4.7 on the AMX Xeon, 8.7-12.6 on the EPYC),
# and a compile with its read-back ~2 s. A guess, not a promise: the progress lines re-estimate from
# what each candidate really took.
GUESS_SECONDS_PER_MEGAPIXEL = 4.5
GUESS_COMPILE_SECONDS = 2.0
GUESS_REQUESTS = 2  # THROUGHPUT on 2 cores: two streams, a request each

# Called after each candidate's compile and first round: (its timing so far, how many are done, how many in all).
# A candidate whose round is short has no figure yet (``runs_images_per_s`` empty): it is timed in the rounds.
OnCandidate = Callable[["Timing", int, int], None]


@dataclass(frozen=True)
class Candidate:
    """One way to run the style: which IR, at which inference precision."""

    variant: str
    precision: str  # f32 | bf16 | f16

    @property
    def label(self) -> str:
        return f"{self.variant}@{self.precision}"


@dataclass
class Timing:
    """What one candidate measured; ``error`` is set instead when the plugin refused it."""

    candidate: Candidate
    runs_images_per_s: list[float] = field(default_factory=list)
    inferences: int = 0
    seconds: float = 0.0
    effective_precision: str | None = None  # what the plugin read back
    psnr_vs_f32_db: float | None = None  # this precision's picture against the same IR at f32 (f32: None)
    error: str | None = None

    @property
    def images_per_s(self) -> float:
        return sum(self.runs_images_per_s) / len(self.runs_images_per_s) if self.runs_images_per_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.candidate.variant, "precision": self.candidate.precision,
                "images_per_s": round(self.images_per_s, 3),
                "runs_images_per_s": [round(x, 3) for x in self.runs_images_per_s],
                "inferences": self.inferences, "seconds": round(self.seconds, 2),
                "effective_precision": self.effective_precision,
                "psnr_vs_f32_db": None if self.psnr_vs_f32_db is None else round(self.psnr_vs_f32_db, 2),
                "error": self.error}


def native_precisions(core: ov.Core, device_name: str = "CPU") -> list[str]:
    """f32 first, then bf16/f16 where the CPU computes them natively (``OPTIMIZATION_CAPABILITIES``)."""
    try:
        caps = {str(c).upper() for c in core.get_property(device_name, "OPTIMIZATION_CAPABILITIES")}
    except RuntimeError:
        caps = set()
    return [p for p in PRECISION_CHOICES if p in NATIVE_CAPABILITY and (p == "f32" or NATIVE_CAPABILITY[p] in caps)]


def timing_picture(height: int, width: int) -> np.ndarray:
    """A fixed photo-like u8 RGB picture (smooth gradients, hard edges, mild grain): deterministic, so every
    box and every candidate sees the same work and the precision check compares like with like."""
    rng = np.random.default_rng(2024)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.empty((height, width, 3), np.float32)
    for c in range(3):
        img[..., c] = 128 + 90 * np.sin(xx / width * (2 + c) * np.pi) * np.cos(yy / height * (1 + c) * np.pi)
    img[height // 3: 2 * height // 3, width // 4: width // 2] = (200.0, 60.0, 40.0)  # an edge and a flat colour
    img += rng.normal(0, 5, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def psnr_db(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR of two u8 pictures in dB, capped at ``DB_CAP`` for identical ones."""
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return DB_CAP if mse == 0 else min(DB_CAP, 10 * math.log10(255.0 ** 2 / mse))


def run_for(engine: Engine, picture: np.ndarray, *, seconds: float) -> tuple[int, float, np.ndarray]:
    """Keep ``engine.num_requests`` requests busy on ``picture`` for about ``seconds`` (at least one round
    of requests); returns (inferences finished, wall seconds, one output picture)."""
    # Plain requests waited on in turn, not an AsyncInferQueue with a Python callback: a queue made and
    # dropped per call deadlocked about one tune run in three (its destructor waiting, GIL held, on a
    # callback that needs the GIL), and round-robin waits keep every request just as busy.
    compiled = engine.compiled(*picture.shape[:2])
    requests = [compiled.create_infer_request() for _ in range(engine.num_requests)]
    tensor = {0: np.ascontiguousarray(picture)[None]}
    started = time.perf_counter()
    for request in requests:
        request.start_async(tensor, share_inputs=True)
    done = 0
    kept: np.ndarray | None = None
    active = requests
    while active:  # every request runs at least once; each goes again while time is left
        still = []
        for request in active:
            request.wait()
            done += 1
            if kept is None:
                kept = np.array(request.get_output_tensor(0).data[0], copy=True)
            if time.perf_counter() - started < seconds:
                request.start_async(tensor, share_inputs=True)
                still.append(request)
        active = still
    assert kept is not None
    return done, time.perf_counter() - started, kept


def _record(timing: Timing, done: int, wall: float) -> None:
    timing.runs_images_per_s.append(done / wall if wall > 0 else 0.0)
    timing.inferences += done
    timing.seconds += wall


def measure_candidates(style: ModelInfo, device: DeviceSection, candidates: Sequence[Candidate],
                       shape_hw: tuple[int, int], *, seconds: float = DEFAULT_SECONDS,
                       rounds: int = DEFAULT_ROUNDS, core: ov.Core | None = None,
                       on_candidate: OnCandidate | None = None) -> list[Timing]:
    """Time every candidate at ``shape_hw`` (H, W) for ``seconds`` each, in ``rounds`` alternating runs.

    Each candidate's engine is built once (compile, then one untimed round of requests: the first
    inference of a shape allocates and is not what a service sustains) and kept for its later rounds.
    Every run is at least one round of requests, so a candidate whose round outlasts ``seconds / rounds``
    (1024 px on 2 cores: ~10 s) gets one timed run, made at once, and its engine is dropped before the
    next is built: candidates that slow differ by far more than the noise, the first start does not take
    minutes, and only one candidate's activations are alive at a time.
    A bf16/f16 candidate's picture is compared with the same IR's at f32 (``psnr_vs_f32_db``), so the
    quality floor can count what the precision costs, not only what the IR's manifest says.
    ``on_candidate`` hears of each candidate as it is done with (compiled, warmed, timed at once when slow):
    at 1024 px on a busy 2-core box that is every 10-20 s, where the whole measurement takes minutes."""
    core = core if core is not None else ov.Core()
    picture = timing_picture(*shape_hw)
    timings = {c: Timing(c) for c in candidates}
    engines: dict[Candidate, Engine] = {}  # kept for the alternating rounds
    outputs: dict[Candidate, np.ndarray] = {}
    for number, candidate in enumerate(candidates, start=1):
        engine = _build(style, device, candidate, timings[candidate], picture, outputs, core=core,
                        seconds=seconds / max(1, rounds))
        if engine is not None:
            engine.release_idle(math.inf)  # its buffers come back in its first round (the kept ones add up)
            engines[candidate] = engine
        if on_candidate is not None:
            on_candidate(timings[candidate], number, len(candidates))
    for index in range(rounds):
        order = list(engines) if index % 2 == 0 else list(reversed(engines))
        for candidate in order:
            _record(timings[candidate], *run_for(engines[candidate], picture, seconds=seconds / rounds)[:2])
            if len(engines) > 1:  # only the candidate running holds activations: the first start's peak is
                engines[candidate].release_idle(math.inf)  # one candidate's, not the sum of all of them
    for candidate, output in outputs.items():
        reference = outputs.get(Candidate(candidate.variant, "f32"))
        if candidate.precision != "f32" and reference is not None:
            timings[candidate].psnr_vs_f32_db = psnr_db(output, reference)
    engines.clear()
    return [timings[c] for c in candidates]


def _build(style: ModelInfo, device: DeviceSection, candidate: Candidate, timing: Timing, picture: np.ndarray,
           outputs: dict[Candidate, np.ndarray], *, core: ov.Core, seconds: float) -> Engine | None:
    """Compile ``candidate`` and run one untimed round; returns its engine to keep for the alternating rounds,
    or None when it was refused (``timing.error``) or was slow enough to be timed here and dropped."""
    try:
        model = style.with_variant(candidate.variant)
        engine = Engine(model, device.model_copy(update={"inference_precision": candidate.precision}), core=core,
                        first_shape=picture.shape[:2])
        _, wall, outputs[candidate] = run_for(engine, picture, seconds=0.0)  # compile, warm every request
    except (EdgeAnimeError, RuntimeError) as exc:  # a candidate the plugin refuses is a row, not the end
        timing.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None
    timing.effective_precision = str(engine.effective.get("INFERENCE_PRECISION_HINT"))
    if wall > seconds:
        # One round outlasts a run's share: time it once now and let its memory go (at 1024 px each
        # stream holds ~1 GB of f32 activations; several candidates alive at once would not fit a box).
        _record(timing, *run_for(engine, picture, seconds=0.0)[:2])
        return None
    return engine
