"""Refit the output layer on whole training images, at the size the model is used at.

Why: the generator's GroupNorm(1) layers normalise over the whole picture, so features computed on a
96 px training crop and on a 512 px photo have different statistics; a model trained only on crops comes
out washed out and colour cast on whole photos. Refitting just the last 1x1 conv (32 -> 3, 96 weights) on
features of whole 512 px pool images fixes most of that in seconds: the features are computed once, and
the fit is an L1 regression through the tanh on a subsample of pixels. Training photos only (the pool);
never ../shared/photos.

    python -m training.refit --ckpt training/runs/toon/ckpt.pt --out training/runs/toon/toon.pt
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edge_anime_converters.generator import Generator
from training.data import load_or_build_pool
from training.train_toon import export_state_dict, to_tensor

REFIT_LONG_SIDE_PX = 512
PIXELS_PER_IMAGE = 20_000
REFIT_STEPS = 300
REFIT_LR = 1e-2


def _features(model: Generator, x: torch.Tensor) -> torch.Tensor:
    """The generator's forward up to (not including) the output layer."""
    out = model.block_a(x)
    half = out.shape[-2:]
    out = model.block_c(model.block_b(out))
    out = model.block_d(model._upsample(out, half))
    return model.block_e(model._upsample(out, x.shape[-2:]))


def refit_output_layer(model: Generator, pool: list, *, seed: int,
                       long_side_px: int | tuple[int, ...] = REFIT_LONG_SIDE_PX,
                       max_images: int | None = None) -> tuple[float, float]:
    """Fit ``model.out_layer`` in place on whole pool images of ``long_side_px``; returns L1 before, after.

    ``max_images``: an even subsample of the matching pictures (a 1024 px forward pass costs seconds on CPU).
    """
    rng = np.random.default_rng(seed)
    sides = (long_side_px,) if isinstance(long_side_px, int) else long_side_px
    chosen = [pair for pair in pool if max(pair.photo.shape[:2]) in sides]
    if not chosen:  # the pool never enlarges a photo, so a small pool may hold no picture of these sizes
        raise ValueError(f"no pool picture has a long side of {', '.join(map(str, sides))} px to refit on")
    if max_images is not None and len(chosen) > max_images:
        chosen = [chosen[i] for i in np.linspace(0, len(chosen) - 1, max_images).round().astype(int)]
    feats, goals = [], []
    model.eval()
    with torch.no_grad():
        for pair in chosen:
            h, w = (s - s % 4 for s in pair.photo.shape[:2])
            f = _features(model, to_tensor(pair.photo[None, :h, :w]))[0].reshape(f_ch := model.out_layer[0].in_channels, -1)
            y = to_tensor(pair.target[None, :h, :w])[0].reshape(3, -1)
            idx = torch.from_numpy(rng.choice(h * w, size=min(PIXELS_PER_IMAGE, h * w), replace=False))
            feats.append(f[:, idx])
            goals.append(y[:, idx])
    feat = torch.cat(feats, 1).T  # [N, 32]
    goal = torch.cat(goals, 1).T  # [N, 3]
    weight = model.out_layer[0].weight.detach().reshape(3, f_ch).clone().requires_grad_(True)
    before = float(F.l1_loss(torch.tanh(feat @ weight.T), goal).detach())
    opt = torch.optim.Adam([weight], lr=REFIT_LR)
    for step in range(REFIT_STEPS):
        for group in opt.param_groups:
            group["lr"] = REFIT_LR * 0.5 * (1 + np.cos(np.pi * step / REFIT_STEPS))
        loss = F.l1_loss(torch.tanh(feat @ weight.T), goal)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = float(F.l1_loss(torch.tanh(feat @ weight.T), goal).detach())
    with torch.no_grad():
        model.out_layer[0].weight.copy_(weight.detach().reshape_as(model.out_layer[0].weight))
    return before, after


def refit_file(ckpt: Path, *, pool_cache: Path, out: Path, seed: int,
               long_sides_px: tuple[int, ...] = (512, 1024), max_images: int | None = 60) -> tuple[float, float]:
    """Refit a train_toon ckpt.pt on a cached pool's whole pictures and export the fp16 state dict."""
    torch.manual_seed(seed)
    model = Generator(upsample_align=True)
    model.load_state_dict(torch.load(ckpt, weights_only=True)["model"])
    pool = load_or_build_pool(pool_cache, seed=seed)
    before, after = refit_output_layer(model, pool, seed=seed, long_side_px=long_sides_px, max_images=max_images)
    export_state_dict(model, out)
    (out.parent / f"{out.stem}_refit.json").write_text(f'{{"l1_before": {before:.5f}, "l1_after": {after:.5f}}}\n')
    return before, after


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", type=Path, required=True, help="train_toon's ckpt.pt")
    p.add_argument("--pool-cache", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="fp16 state dict to write (toon.pt)")
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    before, after = refit_file(a.ckpt, pool_cache=a.pool_cache, out=a.out, seed=a.seed,
                               long_sides_px=(REFIT_LONG_SIDE_PX,), max_images=None)
    print(f"output layer refit on whole {REFIT_LONG_SIDE_PX} px images: L1 {before:.4f} -> {after:.4f}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
