"""Train one bundled style end to end, resumable: ``python -m training.train_style --style cel``.

The style is a set of target knobs (training/target.py ``STYLES``); the generator is the unchanged
AnimeGANv2 architecture, so the runtime, INT8 and the tiling pair work on it as on any style.

Phases, each a training run of training/train_toon.py in its own folder under ``--workdir`` (a phase that
wrote its summary.json is done and skipped; one cut short resumes from its ckpt.pt, so a stop at any point
loses at most ``--ckpt-every`` steps):

1. ``base``: 128 px crops of the scikit-image photos and their scene jitters at 512/768/1024 px long side,
   starting from the first toon's weights (training/checkpoints/toon_20261130.pt, docs/toon.md: it already
   carries a picture through the bottleneck and draws outlines, which from scratch costs a CPU-hour);
2. ``full``: the same on the whole pool: plus the Debian photos (training/sources.py) and the procedural
   skies, seas, snow, night and skin tones (training/synth.py) that the first toon never saw;
3. ``large``: 256 px crops, so GroupNorm sees statistics closer to a whole picture's;
4. ``refit``: the output layer refitted on whole pool pictures at 512 and 1024 px (training/refit.py).

``--style toon2`` (issue 41) has its own phases (``TOON2_PHASES``): ``full`` and ``large`` on the v2 target
with the conditional PatchGAN term, starting from the shipped toon (training/checkpoints/toon.pt).

The photo sizes follow the runtime's default ``image.max_side: 1024``: the target draws the same flat
areas at any size and lines as wide as the size asks (target.ToonParams), so the look holds at 1024 px.
The result is ``WORKDIR/STYLE.pt`` (fp16 state dict), shipped by ``python -m training.ship_style``.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from training.target import STYLES

FIRST_TOON = Path(__file__).resolve().parent / "checkpoints" / "toon_20261130.pt"
LONG_SIDES_PX = (512, 768, 1024)
# The whole pool renders ~170 targets (2-3 s each on a busy 2-core box): two sizes around the default are enough
FULL_LONG_SIDES_PX = (640, 1024)


@dataclass(frozen=True)
class Phase:
    name: str
    pool: str  # "base" or "full"
    steps: int
    crop_px: int
    batch: int
    lr: float
    warmup: int
    budget_min: float
    grad_weight: float = 0.5  # L1 of image gradients; the last phase raises it against the blur L1 settles for
    adv_weight: float = 0.0  # the conditional PatchGAN term (train_toon.PatchDiscriminator); 0: plain L1
    anime_weight: float = 0.0  # the anime critic's term (train_toon.AnimeCritic, training/illustrations.py)


PHASES = (
    Phase("base", "base", steps=2500, crop_px=128, batch=4, lr=4e-4, warmup=100, budget_min=20.0),
    Phase("full", "full", steps=4000, crop_px=128, batch=4, lr=3e-4, warmup=50, budget_min=50.0),
    # 1.5: at step 1,800 of "full" the toon drew skies and faces at 1024 px as a soft blur, lines missing
    Phase("large", "full", steps=300, crop_px=256, batch=2, lr=8e-5, warmup=20, budget_min=10.0, grad_weight=1.5),
)


# toon2 (issue 41): the v2 target (flow lines, superpixel fills, no ink on foliage) from the shipped toon's
# weights, with the PatchGAN term against the blur L1 settles for; no base phase (the shipped toon has it).
TOON2_PHASES = (
    Phase("full", "full", steps=4000, crop_px=128, batch=4, lr=1.5e-4, warmup=50, budget_min=70.0, adv_weight=0.02),
    Phase("large", "full", steps=400, crop_px=256, batch=2, lr=6e-5, warmup=20, budget_min=15.0, grad_weight=1.5,
          adv_weight=0.02),
)
# toon3: the same v2 target, trained on from toon2's first run. That run's critic stayed near chance (hinge
# loss 1.4-2.1 at weight 0.02) and its pictures kept the photo's texture (look.py 0.38 against the target's
# own 0.16): a 3x heavier critic and a heavier gradient term from the start, for twice as long.
TOON3_PHASES = (
    Phase("full", "full", steps=6000, crop_px=128, batch=4, lr=1.2e-4, warmup=50, budget_min=110.0,
          grad_weight=1.0, adv_weight=0.06),
    Phase("large", "full", steps=500, crop_px=256, batch=2, lr=5e-5, warmup=20, budget_min=20.0, grad_weight=1.5,
          adv_weight=0.06),
)
# toon4 (issue 41; shipped as toon since 2026-12-05): toon3 trained on with the anime critic beside its L1 and conditional
# critic: the first term in any style's loss that has seen drawing rather than a filter of the photo. Its real
# examples are the cel-shaded sprites and concert pictures only (``illustrations.collect(backgrounds=False)``):
# with the textured backgrounds too, at 0.1 and 0.3, raters saw grit (docs/styles.md, toon4: runs A-D).
TOON4_PHASES = (
    Phase("anime", "full", steps=3000, crop_px=128, batch=4, lr=8e-5, warmup=50, budget_min=70.0,
          grad_weight=1.0, adv_weight=0.06, anime_weight=0.1),
)
SHIPPED_TOON = Path(__file__).resolve().parent / "checkpoints" / "toon.pt"
TOON2_WIP = Path(__file__).resolve().parent / "checkpoints" / "toon2_wip.pt"
# toon3, the toon shipped from add8a00 until toon4 took its place, is where toon4 starts. toon2 started from the
# toon shipped in bd3e7d3 (`git show bd3e7d3:training/checkpoints/toon.pt`); run today it starts from toon4.
TOON3 = Path(__file__).resolve().parent / "checkpoints" / "toon3.pt"
STYLE_PHASES: dict[str, tuple[tuple[Phase, ...], Path]] = {"toon2": (TOON2_PHASES, SHIPPED_TOON),
                                                         "toon3": (TOON3_PHASES, TOON2_WIP),
                                                         "toon4": (TOON4_PHASES, TOON3)}


def extra_photos(cache_dir: Path, *, seed: int) -> list[tuple[str, NDArray[np.uint8]]]:
    """The Debian photos and the procedural scenes, as (name, RGB u8); never ../shared/photos.

    Grey photos come back with three equal channels and stay grey (the scikit-image textures are the
    tinted ones); training/DATA.md lists every source and its licence.
    """
    from training import sources, synth

    # scikit-image's photos come from data.build_pool itself (wheels=False: not twice); holdout() never trains
    photos = [(src.name, sources.load_rgb(src, long_side=1400)) for src in sources.collect(cache_dir, wheels=False)]
    rng = np.random.default_rng(seed)
    for i, kind in enumerate(k for k in synth.KINDS for _ in range(SYNTH_PER_KIND)):
        w, h = (1024, 768) if i % 3 else (768, 1024) if i % 2 else (1024, 576)
        photos.append((f"synth_{kind}_{i}", synth.scene(kind, rng, (h, w))))
    return photos


SYNTH_PER_KIND = 2


def run(style: str, *, workdir: Path, seed: int, threads: int, sources_cache: Path, scale: float = 1.0) -> Path:
    """Run every phase not yet done and the refit; returns the exported ``STYLE.pt``."""
    from training.refit import refit_file
    from training.train_toon import train

    params = STYLES[style]
    workdir.mkdir(parents=True, exist_ok=True)
    phases, previous = STYLE_PHASES.get(style, (PHASES, FIRST_TOON))
    for phase in phases:
        folder = workdir / phase.name
        if not (folder / "summary.json").exists():
            kwargs: dict[str, object] = {"params": params, "long_sides_px": LONG_SIDES_PX, "jitters": 3,
                                         "scene_jitters": 1}
            if phase.pool == "full" and not (workdir / "pool_full.npz").exists():
                kwargs |= {"long_sides_px": FULL_LONG_SIDES_PX, "jitters": 2, "scene_jitters": 0,
                           "extra": extra_photos(sources_cache, seed=seed)}
            drawn = None
            if phase.anime_weight > 0:
                from training import illustrations
                drawn = illustrations.patches(illustrations.collect(sources_cache, backgrounds=False),
                                              crop_px=phase.crop_px, batch=phase.batch, seed=seed)
            train(workdir=folder, steps=max(1, round(phase.steps * scale)), budget_min=phase.budget_min * scale,
                  crop_px=phase.crop_px, batch=phase.batch, lr=phase.lr, seed=seed, threads=threads,
                  ckpt_every=50, preview_every=200, pool_cache=workdir / f"pool_{phase.pool}.npz", out=None,
                  resume=True, pool_kwargs=kwargs, warmup_steps=phase.warmup, init_from=previous,
                  grad_weight=phase.grad_weight, adv_weight=phase.adv_weight, anime_weight=phase.anime_weight,
                  drawn=drawn)
        previous = folder / "ckpt.pt"
    out = workdir / f"{style}.pt"
    if not out.exists():
        refit_file(previous, pool_cache=workdir / "pool_full.npz", out=out, seed=seed)
    (workdir / "done.json").write_text(json.dumps({"style": style, "checkpoint": str(out)}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--style", choices=sorted(STYLES), required=True)
    p.add_argument("--workdir", type=Path, default=None, help="default: training/runs/STYLE")
    p.add_argument("--sources-cache", type=Path, default=Path("training/runs/sources"))
    p.add_argument("--seed", type=int, default=20261202)
    p.add_argument("--threads", type=int, default=1, help="torch threads (two styles train side by side on 2 cores)")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every phase's steps and budget (0.01: a smoke run of the whole recipe)")
    a = p.parse_args(argv)
    out = run(a.style, workdir=a.workdir or Path("training/runs") / a.style, seed=a.seed, threads=a.threads,
              sources_cache=a.sources_cache, scale=a.scale)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
