"""Quantization-aware fine-tuning (QAT) of the toon INT8 model, distilled from its own FP32 outputs.

Why distillation and not the toon target: INT8 is judged by PSNR against the FP32 IR (docs/toon.md, "INT8
quality"), so the loss is exactly that gap: MSE between the fake-quantized student and the float teacher
on the same photo. No target rendering is needed, so the pool is just the training photos (scikit-image's
wheel-bundled ones, ``training/data.py``) at the 400/512/640 px scales, colour-jittered; ``../shared/photos``
is never touched here (it is the held-out set the figure is measured on).

The student starts from NNCF's post-training quantization of the torch model with the converter's default
setup (MIXED preset, GroupNorm and the first/last convolutions in float, MINMAX ranges), calibrated on the
same pool; then weights and quantizer scales are fine-tuned with Adam at a small learning rate. The result
is exported through ``ov.convert_model`` (FakeQuantize nodes) and wrapped with the u8 contract.

    nice -n 5 python -m training.qat_toon --out training/runs/qat --steps 300 --budget-min 10
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.data import COLOUR_PHOTOS, GREY_PHOTOS, LONG_SIDES_PX, jitter, load_photo
from training.target import resize_long_side

# torch NNCF node names of the layers the converter's default keeps float (converters/quantize.py).
FLOAT_CONVS = ("block_a/0/1/conv2d/0", "out_layer/0/conv2d/0")


def photo_pool(*, seed: int, jitters: int = 3) -> list[np.ndarray]:
    """Training photos at each long side, the original plus ``jitters`` colour variants (grey ones tinted)."""
    rng = np.random.default_rng(seed)
    pool: list[np.ndarray] = []
    for name in [*COLOUR_PHOTOS, *GREY_PHOTOS]:
        base = load_photo(name)
        grey = name in GREY_PHOTOS
        for side in LONG_SIDES_PX:
            scaled = resize_long_side(base, side)
            if not grey:
                pool.append(scaled)
            pool.extend(jitter(scaled, rng, tint=grey) for _ in range(jitters))
    return pool


def to_tensor(u8: np.ndarray) -> torch.Tensor:
    """[B, H, W, 3] u8 -> [B, 3, H, W] float in [-1, 1] (the IR's preprocessing arithmetic)."""
    return torch.from_numpy(np.ascontiguousarray(u8)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def crops(pool: list[np.ndarray], *, crop_px: int, batch: int, rng: np.random.Generator) -> torch.Tensor:
    """One batch of random crops (h-flipped half the time) from pool images at least ``crop_px`` wide."""
    out = []
    usable = [p for p in pool if min(p.shape[:2]) >= crop_px]
    for _ in range(batch):
        img = usable[int(rng.integers(len(usable)))]
        h, w = img.shape[:2]
        y, x = int(rng.integers(h - crop_px + 1)), int(rng.integers(w - crop_px + 1))
        c = img[y:y + crop_px, x:x + crop_px]
        out.append(c[:, ::-1] if rng.random() < 0.5 else c)
    return to_tensor(np.stack(out))


def use_reference_quantizer_ops() -> None:
    """Run NNCF's fake-quantize in plain torch ops instead of its C++ extension.

    Why: NNCF builds that extension with g++ on first use, which took over its 60 s timeout on a busy 2-core
    box and then failed the run; the reference functions are NNCF's own torch implementation of the same
    forward/backward. Called eagerly: NNCF's wrapper runs them under torch.compile, which recompiled for every
    quantizer's shape (dynamo's recompile limit) and took 30 s a step.
    """
    from nncf.torch.quantization import extensions
    from nncf.torch.quantization.reference import torch_executor

    class EagerReference:
        Quantize_forward = staticmethod(torch_executor.forward)
        Quantize_backward = staticmethod(torch_executor.backward)

    extensions.QuantizedFunctionsCPU._loaded_namespace = EagerReference


def quantize_torch(model: torch.nn.Module, calibration: list[torch.Tensor]) -> torch.nn.Module:
    """NNCF PTQ of the torch model with the converter's default setup: the QAT starting point."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    return nncf.quantize(
        model, nncf.Dataset(calibration), preset=nncf.QuantizationPreset.MIXED, subset_size=len(calibration),
        ignored_scope=nncf.IgnoredScope(names=list(FLOAT_CONVS), types=["group_norm"]),
        advanced_parameters=AdvancedQuantizationParameters(
            activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX),
    )


def finetune(student: torch.nn.Module, teacher: torch.nn.Module, pool: list[np.ndarray], *, steps: int,
             crop_px: int, batch: int, lr: float, seed: int, budget_s: float, log: Any) -> dict[str, Any]:
    """Adam on MSE(student, teacher), cosine-decayed; stops at ``steps`` or ``budget_s`` (logged)."""
    rng = np.random.default_rng(seed)
    teacher.eval()
    student.train()
    opt = torch.optim.Adam([p for p in student.parameters() if p.requires_grad], lr=lr)
    start = time.perf_counter()
    running = None
    done = 0
    for step in range(steps):
        elapsed = time.perf_counter() - start
        if elapsed > budget_s:
            break
        frac = max(step / steps, elapsed / budget_s)
        for group in opt.param_groups:
            group["lr"] = lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        x = crops(pool, crop_px=crop_px, batch=batch, rng=rng)
        with torch.no_grad():
            want = teacher(x)
        loss = F.mse_loss(student(x), want)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = float(loss.detach())
        running = value if running is None else 0.95 * running + 0.05 * value
        done = step + 1
        if step % 10 == 0:
            psnr = 10 * math.log10(4.0 / max(running, 1e-12))  # [-1, 1] range: peak-to-peak 2
            log(f"step {step} loss {value:.3e} running {running:.3e} (~{psnr:.1f} dB) {elapsed:.0f}s")
    student.eval()
    return {"steps": done, "seconds": round(time.perf_counter() - start, 1), "final_running_mse": running}


def export_ir(student: torch.nn.Module) -> Any:
    """The fake-quantized torch model -> OpenVINO (FakeQuantize ops) with the u8 NHWC contract."""
    import openvino as ov

    from edge_anime_converters.ir import TRACE_HW, with_u8_io

    with torch.no_grad():
        model = ov.convert_model(student, example_input=torch.zeros(1, 3, *TRACE_HW), input=[[1, 3, -1, -1]])
    return with_u8_io(model)


def qat(checkpoint: Path, *, steps: int, crop_px: int, batch: int, lr: float, seed: int, threads: int,
        budget_min: float, calib_count: int, log: Any = print) -> tuple[Any, dict[str, Any]]:
    """Quantize ``checkpoint`` (a toon state dict), fine-tune, and return (OpenVINO model, run summary)."""
    from edge_anime_converters.sources import load_torch_source

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    use_reference_quantizer_ops()
    teacher = load_torch_source(checkpoint, upsample_align=True, name=checkpoint.stem).module.eval()
    pool = photo_pool(seed=seed)
    rng = np.random.default_rng(seed + 1)
    calibration = [crops(pool, crop_px=256, batch=1, rng=rng) for _ in range(calib_count)]
    start = time.perf_counter()
    student = quantize_torch(copy.deepcopy(teacher), calibration)
    log(f"PTQ start point in {time.perf_counter() - start:.0f}s; pool {len(pool)} images")
    summary = finetune(student, teacher, pool, steps=steps, crop_px=crop_px, batch=batch, lr=lr, seed=seed,
                       budget_s=budget_min * 60, log=log)
    summary.update(steps_planned=steps, crop_px=crop_px, batch=batch, lr=lr, seed=seed, calib_count=calib_count,
                   pool_images=len(pool))
    return export_ir(student), summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=Path("training/checkpoints/toon.pt"))
    p.add_argument("--out", type=Path, required=True, help="folder for model_int8.xml/.bin and qat.json")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--budget-min", type=float, default=10.0, help="wall-clock cap on fine-tuning")
    p.add_argument("--crop", type=int, default=160)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calib-count", type=int, default=64)
    a = p.parse_args(argv)
    import openvino as ov

    model, summary = qat(a.checkpoint, steps=a.steps, crop_px=a.crop, batch=a.batch, lr=a.lr, seed=a.seed,
                         threads=a.threads, budget_min=a.budget_min, calib_count=a.calib_count)
    a.out.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, a.out / "model_int8.xml", compress_to_fp16=False)
    (a.out / "qat.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {a.out / 'model_int8.xml'}: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
