"""A lighter generator per style, distilled from the shipped one (issue 43: the live booth's mirror needs ~2x
the frames a second of today's default on 2 cores).

The student is the same graph at half the width (``Generator(width=0.5)``: 0.54 M weights against 2.14 M,
~4x fewer MACs), trained to reproduce the teacher's pictures: the teacher is our own MIT weights, so the
student is MIT too. Why plain output distillation (L1 and L1 of image gradients, the toon's own loss, against
the teacher's output on the same crop) and not a GAN: the goal is the teacher's look, measured as PSNR
against it (>= 30 dB), and the teacher gives a target for every crop at no cost; GAN Compression (Li et al.,
CVPR 2020) adds feature maps matched through 1x1 convs, which is the next step if output L1 stalls.

Why initialised by slicing the teacher (each weight's first channels): the student starts from the
teacher's filters instead of noise, and the first CPU-hour goes to adapting them, not to learning edges.

Data: the photos of a training pool (``training/data.py``'s cache, e.g. the toon2 run's ``pool_full.npz``;
the pool's targets are not used), random crops, teacher outputs computed on the fly (no grad, bf16 where the
CPU has it). Checkpointed every 50 steps (``WORKDIR/ckpt.pt``); a rerun resumes there, so a stop loses a
minute. The schedule follows the wall clock (``--budget-min``), as train_toon's does, so a busy box still
ends at a low learning rate. Every ``--eval-every`` steps the student is scored against the teacher on fixed
whole pictures (PSNR, dB), in the log.

    python -m training.distill --teacher training/checkpoints/toon.pt --pool /work/runs/toon2/pool_full.npz \\
        --workdir /work/runs/distill_toon [--budget-min 240] [--threads 1]

The result is ``WORKDIR/student.pt``, a plain fp16 state dict: ``edge-anime convert`` takes it as it takes any
AnimeGANv2 checkpoint (its width read from the shapes).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from edge_anime_converters.generator import Generator
from training.data import batches, load_or_build_pool
from training.train_toon import cpu_has_bf16, lr_at, save_atomic, to_tensor, toon_loss

STUDENT_WIDTH = 0.5
EVAL_PICTURES = 6
EVAL_SIDE_PX = 384  # the live mirror's size


def sliced_init(student: Generator, teacher: Generator) -> None:
    """Each student weight from the teacher's: the leading slice along every dimension (conv filters, their
    input channels, GroupNorm affines). Depthwise convs keep their own channels' filters."""
    teacher_state = teacher.state_dict()
    with torch.no_grad():
        for name, tensor in student.state_dict().items():
            source = teacher_state[name]
            tensor.copy_(source[tuple(slice(0, n) for n in tensor.shape)])


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of two pictures in [-1, 1] (as u8 pictures would have it: the range is 2)."""
    mse = float(torch.mean((a.float() - b.float()) ** 2))
    return 10 * math.log10(4.0 / max(mse, 1e-12))


def eval_pictures(pool: list, *, side: int, count: int, seed: int) -> list[torch.Tensor]:  # type: ignore[type-arg]
    """Fixed whole pictures of the pool, shrunk to ``side`` (multiples of 8), as [-1, 1] tensors."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    picks = rng.choice(len(pool), size=min(count, len(pool)), replace=False)
    out = []
    for i in picks:
        photo = Image.fromarray(pool[int(i)].photo)
        scale = side / max(photo.size)
        size = (max(8, round(photo.width * scale / 8) * 8), max(8, round(photo.height * scale / 8) * 8))
        out.append(to_tensor(np.asarray(photo.resize(size, Image.Resampling.LANCZOS))[None]))
    return out


def teacher_outputs(teacher: Generator, pictures: list[torch.Tensor]) -> list[torch.Tensor]:
    """The teacher's pictures for ``pictures`` (f32): the frozen teacher gives the same ones at every evaluation,
    so a run computes them once (at 384 px a teacher's forward pass costs ~4x the student's)."""
    with torch.no_grad():
        return [teacher(x) for x in pictures]


def evaluate(student: Generator, targets: list[torch.Tensor], pictures: list[torch.Tensor]) -> float:
    """Mean PSNR of the student against the teacher's ``targets`` on ``pictures`` (f32, whole pictures)."""
    student.eval()
    with torch.no_grad():
        scores = [psnr(student(x), want) for x, want in zip(pictures, targets, strict=True)]
    student.train()
    return float(np.mean(scores))


def load_generator(path: Path) -> Generator:
    """A checkpoint's generator at the width its shapes say (a teacher, a student, or a ckpt.pt)."""
    from edge_anime_converters.sources import width_of

    state = torch.load(path, weights_only=True)
    model = Generator(upsample_align=True, width=width_of(state.get("model", state)))
    model.load_state_dict({k: v.float() for k, v in state.get("model", state).items()}, strict=True)
    return model


def distill(*, teacher_path: Path, pool_path: Path, workdir: Path, budget_min: float, steps: int, crop_px: int,
            batch: int, lr: float, seed: int, threads: int, eval_every: int,
            init_path: Path | None = None) -> dict[str, float]:
    """Run (or resume) the distillation; writes ``student.pt`` and ``summary.json`` and returns the summary.

    ``init_path``: start from an earlier student instead of the teacher's sliced weights. Why: after a teacher is
    refit (toon -> toon3: the same network trained further), the student distilled from the old teacher is
    already close to the new one, and picking up from there costs a fraction of a distillation from scratch
    (2.6 CPU-hours here for the first student)."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    bf16 = cpu_has_bf16()
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "distill.log").open("a", buffering=1)
    started = time.monotonic()
    pool = load_or_build_pool(pool_path, seed=seed)
    teacher = load_generator(teacher_path).eval()
    for prm in teacher.parameters():
        prm.requires_grad_(False)
    student = Generator(upsample_align=True, width=STUDENT_WIDTH)
    if init_path is None:
        sliced_init(student, teacher)
    else:
        init = load_generator(init_path)
        student.load_state_dict(init.state_dict(), strict=True)
    opt = torch.optim.Adam(student.parameters(), lr=lr, betas=(0.9, 0.99))
    step = 0
    ckpt = workdir / "ckpt.pt"
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        student.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        started -= float(state.get("elapsed_s", 0.0))  # the wall-clock schedule goes on where it stopped
        log.write(f"resumed at step {step}, {float(state.get('elapsed_s', 0.0)) / 60:.0f} min in\n")
    else:
        log.write(f"teacher {teacher_path}; student width {STUDENT_WIDTH}: "
                  f"{sum(p.numel() for p in student.parameters()):,} weights against "
                  f"{sum(p.numel() for p in teacher.parameters()):,}; pool {pool_path} ({len(pool)} pictures); "
                  f"{'bf16 autocast' if bf16 else 'f32'}\n")
    pictures = eval_pictures(pool, side=EVAL_SIDE_PX, count=EVAL_PICTURES, seed=seed + 1)
    targets = teacher_outputs(teacher, pictures)
    if step == 0:
        start = "sliced init" if init_path is None else f"from {init_path}"
        log.write(f"step 0 psnr_vs_teacher {evaluate(student, targets, pictures):.2f} dB ({start})\n")
    data = batches(pool, crop_px=crop_px, batch=batch, seed=seed + step)
    budget_s = budget_min * 60.0
    ema = float("nan")
    best = float("-inf")
    while step < steps and time.monotonic() - started < budget_s:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps=steps, peak_lr=lr, time_frac=(time.monotonic() - started) / budget_s)
        x, _ = next(data)
        photo = to_tensor(x)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            target = teacher(photo).float()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            pred = student(photo)
        loss, l1 = toon_loss(pred, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        ema = l1 if math.isnan(ema) else 0.98 * ema + 0.02 * l1
        if step % 10 == 0:
            log.write(f"step {step} l1 {l1:.4f} ema_l1 {ema:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                      f"t {time.monotonic() - started:.0f}s\n")
        if step % 50 == 0:
            save_atomic({"model": student.state_dict(), "opt": opt.state_dict(), "step": step,
                         "elapsed_s": time.monotonic() - started}, ckpt)
        if eval_every and step % eval_every == 0:
            score = evaluate(student, targets, pictures)
            log.write(f"step {step} psnr_vs_teacher {score:.2f} dB\n")
            if score > best:
                best = score
                _export(student, workdir / "student.pt")
    save_atomic({"model": student.state_dict(), "opt": opt.state_dict(), "step": step,
                 "elapsed_s": time.monotonic() - started}, ckpt)
    final = evaluate(student, targets, pictures)
    if final >= best:
        best = final
        _export(student, workdir / "student.pt")
    summary = {"steps": float(step), "ema_l1": ema, "psnr_vs_teacher_db": final, "best_db": best,
               "wall_s": time.monotonic() - started, "width": STUDENT_WIDTH}
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    log.write(f"done: {summary}\n")
    log.close()
    return summary


def _export(model: Generator, path: Path) -> None:
    """A plain fp16 state dict, as the shipped styles' checkpoints are: ``edge-anime convert`` takes it as it
    is (the width is read from the shapes: converters.sources.width_of)."""
    save_atomic({k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", type=Path, default=Path("training/checkpoints/toon.pt"))
    p.add_argument("--pool", type=Path, required=True, help="a training pool cache (pool_*.npz)")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--budget-min", type=float, default=240.0)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--crop", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=20261203)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--init", type=Path, default=None,
                   help="start from this student (e.g. the one distilled from the teacher's previous fit)")
    a = p.parse_args(argv)
    summary = distill(teacher_path=a.teacher, pool_path=a.pool, workdir=a.workdir, budget_min=a.budget_min,
                      steps=a.steps, crop_px=a.crop, batch=a.batch, lr=a.lr, seed=a.seed, threads=a.threads,
                      eval_every=a.eval_every, init_path=a.init)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
