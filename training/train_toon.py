"""Train the bundled "toon" style: the AnimeGANv2 generator regressed onto training/target.py's rendering.

Why plain regression and not a GAN: the target is a deterministic function of the photo, so L1 (weighted
up on the target's ink, plus a light L1 on image gradients that keeps band edges crisp) is the whole
objective; it converges within the hour on 2 CPU cores, which a GAN would not.

Reproducible: the pool, the crops and the initial weights come from ``--seed``; the learning-rate schedule
follows the step count, not the clock (``--budget-min`` only stops early as a safety cap, and says so).
The defaults are phase 1 of the shipped model (docs/toon.md has both phases, the refit and the figures):

    nice -n -5 python -m training.train_toon --workdir training/runs/toon_long \
        --pool-cache training/runs/pool_20261129.npz --no-resume
"""
from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edge_anime.imaging.guided import LUMA
from edge_anime_converters.generator import Generator
from training.data import batches, load_or_build_pool
from training.init import passthrough_init

GRAD_LOSS_WEIGHT = 0.5
ADV_RAMP_STEPS = 200  # the adversarial weight ramps up from 0 over these steps (a fresh discriminator knows nothing)
DISC_LR = 2e-4
INK_WEIGHT = 3.0  # extra L1 weight on pixels the target inks (darker than their 5x5 mean); see ink_weight_map
WARMUP_STEPS = 200  # long: Adam's first steps move every weight by ~lr, which would wreck the pass-through init


def to_tensor(u8: np.ndarray) -> torch.Tensor:
    """[B, H, W, 3] u8 -> [B, 3, H, W] float in [-1, 1], the generator's input range."""
    return torch.from_numpy(np.ascontiguousarray(u8)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def to_u8(t: torch.Tensor) -> np.ndarray:
    return ((t.detach().clamp(-1, 1) + 1.0) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()


def cpu_has_bf16() -> bool:
    """True where the CPU multiplies bf16 natively (AMX or AVX512-BF16): there autocast trains ~2.5x faster.

    On an AVX2-only CPU bf16 is emulated and slower than f32, so ``--precision auto`` stays f32 there.
    """
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def ink_weight_map(target: torch.Tensor, weight: float) -> torch.Tensor:
    """1 + weight where the target is darker than its 5x5 neighbourhood (its ink lines), else 1.

    Why: ink covers a few percent of the pixels, so plain L1 is nearly satisfied by a blurred copy of the
    photo; weighting the lines makes drawing them worth as much as the flat regions around them.
    """
    luma = target.mean(dim=1, keepdim=True)
    darker = (F.avg_pool2d(luma, 5, stride=1, padding=2, count_include_pad=False) - luma).clamp(min=0.0)
    return 1.0 + weight * (darker / 0.1).clamp(max=1.0)


def toon_loss(pred: torch.Tensor, target: torch.Tensor, *, ink_weight: float = INK_WEIGHT,
              grad_weight: float = GRAD_LOSS_WEIGHT) -> tuple[torch.Tensor, float]:
    """Weighted L1 + GRAD_LOSS_WEIGHT * L1 of horizontal/vertical differences; returns (loss, plain L1)."""
    pred, target = pred.float(), target.float()
    diff = (pred - target).abs()
    l1_plain = diff.mean()
    l1 = (diff * ink_weight_map(target, ink_weight)).mean() if ink_weight else l1_plain
    gx = F.l1_loss(pred[..., :, 1:] - pred[..., :, :-1], target[..., :, 1:] - target[..., :, :-1])
    gy = F.l1_loss(pred[..., 1:, :] - pred[..., :-1, :], target[..., 1:, :] - target[..., :-1, :])
    return l1 + grad_weight * (gx + gy), float(l1_plain.detach())


class PatchDiscriminator(torch.nn.Module):
    """pix2pix's conditional PatchGAN, small: (photo, picture) -> a map of real/fake scores, ~34 px patches.

    Why: L1 onto the target is minimised in expectation by a blurred compromise wherever the target is not
    a sharp function of the input (where exactly a line falls, how a texture is flattened), and the network
    paints that blur (issue 41: castles and streets out of focus). A discriminator that sees the photo and
    the picture side by side penalises exactly that: a blurred line or a smeared fill is easy to tell from
    the target's crisp ones, while L1 keeps the colours and positions the target's. Spectral norm on every
    layer keeps it Lipschitz, so a small weight beside L1 trains stably on CPU with batch 4.
    """

    def __init__(self, channels: int = 32, in_channels: int = 6) -> None:
        super().__init__()
        sn = torch.nn.utils.parametrizations.spectral_norm
        c = channels
        self.net = torch.nn.Sequential(
            sn(torch.nn.Conv2d(in_channels, c, 4, stride=2, padding=1)), torch.nn.LeakyReLU(0.2),
            sn(torch.nn.Conv2d(c, 2 * c, 4, stride=2, padding=1)), torch.nn.LeakyReLU(0.2),
            sn(torch.nn.Conv2d(2 * c, 4 * c, 4, stride=1, padding=1)), torch.nn.LeakyReLU(0.2),
            sn(torch.nn.Conv2d(4 * c, 1, 4, stride=1, padding=1)),
        )

    def forward(self, photo: torch.Tensor, picture: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([photo, picture], dim=1))


def disc_loss(disc: PatchDiscriminator, photo: torch.Tensor, target: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Hinge loss of the discriminator: targets score >= 1, the generator's pictures <= -1."""
    real = disc(photo, target)
    fake = disc(photo, pred.detach())
    return F.relu(1.0 - real).mean() + F.relu(1.0 + fake).mean()


def adv_loss(disc: PatchDiscriminator, photo: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """The generator's hinge term: raise the discriminator's score of its picture."""
    return -disc(photo, pred).float().mean()


class AnimeCritic(torch.nn.Module):
    """An unconditional critic: is this patch drawn (training/illustrations.py) or the generator's? (issue 41)

    Why: the conditional critic above only knows the target, a filter of the photo, and raters called what it
    taught "a sharper painted photo". This one has seen an animator's drawing. It sees luma only, as AnimeGAN's
    gray style loss does: twenty pictures of a few characters would otherwise teach it their palette (blue
    jackets, green dresses) and pull every photo's colours there, while what tells drawing from a photo is in
    the luma (flat fills, clean lines, no grain). As in AnimeGAN, the illustrations blurred are shown to it as
    not drawn, so a soft edge is what it learns to catch.
    """

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.net = PatchDiscriminator(channels, in_channels=1).net

    def forward(self, picture: torch.Tensor) -> torch.Tensor:
        return self.net(luma(picture))


def luma(picture: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] -> [B, 1, H, W] with the runtime's Rec. 601 weights (``LUMA``)."""
    weights = torch.from_numpy(LUMA).to(picture.dtype).view(1, 3, 1, 1)
    return (picture * weights).sum(dim=1, keepdim=True)


def softened(picture: torch.Tensor) -> torch.Tensor:
    """A 5x5 binomial blur: an illustration with its edges gone soft, AnimeGAN's "smoothed anime" negative."""
    k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0], dtype=picture.dtype)
    kernel = (k[:, None] * k[None, :] / 256.0).expand(picture.shape[1], 1, 5, 5)
    return F.conv2d(F.pad(picture, (2, 2, 2, 2), mode="reflect"), kernel, groups=picture.shape[1])


def anime_critic_loss(critic: AnimeCritic, drawn: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Hinge loss: illustrations score >= 1; the generator's pictures and the softened illustrations <= -1."""
    real = critic(drawn)
    fake = critic(pred.detach())
    soft = critic(softened(drawn))
    return F.relu(1.0 - real).mean() + 0.5 * (F.relu(1.0 + fake).mean() + F.relu(1.0 + soft).mean())


def anime_loss(critic: AnimeCritic, pred: torch.Tensor) -> torch.Tensor:
    """The generator's hinge term against the anime critic: raise its score of the picture."""
    return -critic(pred).float().mean()


def critic_step(critic: torch.nn.Module, opt: torch.optim.Optimizer, own_loss: torch.Tensor,
                term: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    """One step of a critic on its own loss, then the generator's term from it computed with the critic frozen,
    so the generator's step moves the generator only. Returns the critic's loss and that term."""
    opt.zero_grad(set_to_none=True)
    own_loss.backward()
    opt.step()
    for prm in critic.parameters():
        prm.requires_grad_(False)
    out = term()
    for prm in critic.parameters():
        prm.requires_grad_(True)
    return float(own_loss.detach()), out


def lr_at(step: int, *, steps: int, peak_lr: float, time_frac: float = 0.0, warmup: int = WARMUP_STEPS) -> float:
    """Linear warm-up, then cosine down to 2% of the peak at ``steps``.

    ``time_frac`` (elapsed / wall budget) moves the schedule on when the clock, not the step count, will
    end the run (a busy shared machine), so the run still ends at a low learning rate; when the step count
    binds, the schedule and therefore the weights are reproducible.
    """
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    frac = min(1.0, max((step - warmup) / max(1, steps - warmup), time_frac))
    return peak_lr * (0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def save_atomic(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def export_state_dict(model: Generator, path: Path) -> None:
    """The published format: a flat state dict, stored fp16 to halve the shipped size (load with .float())."""
    save_atomic({k: v.detach().contiguous().half() for k, v in model.state_dict().items()}, path)


def write_preview(model: Generator, photos: np.ndarray, targets: np.ndarray, path: Path) -> None:
    """Rows of photo | target | model, so progress can be judged by eye while training runs."""
    from PIL import Image

    model.eval()
    with torch.no_grad():
        preds = to_u8(model(to_tensor(photos)))
    model.train()
    rows = [np.concatenate([p, t, m], axis=1) for p, t, m in zip(photos, targets, preds)]
    tmp = path.with_name(f".{path.name}.tmp.png")
    Image.fromarray(np.concatenate(rows, axis=0)).save(tmp)
    tmp.replace(path)


def train(*, workdir: Path, steps: int, budget_min: float, crop_px: int, batch: int, lr: float, seed: int,
          threads: int, ckpt_every: int, preview_every: int, pool_cache: Path | None,
          out: Path | None, resume: bool = True, pool_kwargs: dict[str, object] | None = None,
          init: str = "passthrough", warmup_steps: int = WARMUP_STEPS, precision: str = "auto",
          ink_weight: float = INK_WEIGHT, init_from: Path | None = None,
          grad_weight: float = GRAD_LOSS_WEIGHT, adv_weight: float = 0.0, anime_weight: float = 0.0,
          drawn: Iterator[np.ndarray] | None = None) -> dict[str, float]:
    """Run (or resume) a training run; returns the final figures also written to ``workdir/summary.json``.

    ``precision``: "bf16" trains under CPU autocast with channels-last tensors (weights and optimizer stay
    f32), "f32" without, "auto" picks bf16 where the CPU has it natively.
    ``init_from``: start from these weights (a ckpt.pt or a state dict) with a fresh optimizer and schedule;
    the second, large-crop phase uses it (docs/toon.md: GroupNorm statistics of small crops are not those
    of whole photos).
    ``adv_weight``: > 0 adds the conditional PatchGAN term (``PatchDiscriminator``, hinge loss) beside the
    L1 and gradient loss, ramped up over ``ADV_RAMP_STEPS``; the discriminator and its optimizer are saved
    in ckpt.pt with the generator (a resume continues them), and taken from ``init_from`` when it has one.
    0 (the default) trains exactly as before.
    ``anime_weight``: > 0 adds the unconditional ``AnimeCritic`` term, its real examples the u8 batches of
    ``drawn`` (training/illustrations.py), ramped and saved like the conditional one (ckpt.pt's "anime").
    """
    if anime_weight > 0 and drawn is None:
        raise ValueError("anime_weight > 0 needs drawn: batches of illustrations (training/illustrations.py)")
    torch.set_num_threads(threads)
    bf16 = precision == "bf16" or (precision == "auto" and cpu_has_bf16())
    memory_format = torch.channels_last if bf16 else torch.contiguous_format
    torch.manual_seed(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "train.log").open("a", buffering=1)
    started = time.monotonic()
    pool = load_or_build_pool(pool_cache, seed=seed, **(pool_kwargs or {}))
    log.write(f"pool: {len(pool)} pairs in {time.monotonic() - started:.0f} s; "
              f"precision {'bf16 autocast, channels-last' if bf16 else 'f32'}; ink weight {ink_weight}\n")
    model = Generator(upsample_align=True)
    disc = PatchDiscriminator() if adv_weight > 0 else None
    critic = AnimeCritic() if anime_weight > 0 else None
    if init_from is not None:
        state = torch.load(init_from, weights_only=True)
        model.load_state_dict({k: v.float() for k, v in state.get("model", state).items()}, strict=True)
        log.write(f"weights from {init_from}\n")
        if disc is not None and "disc" in state:
            disc.load_state_dict(state["disc"])
            log.write(f"discriminator from {init_from}\n")
        if critic is not None and "anime" in state:
            critic.load_state_dict(state["anime"])
            log.write(f"anime critic from {init_from}\n")
    elif init == "passthrough":
        calib_x, _ = next(batches(pool, crop_px=crop_px, batch=8, seed=seed + 20_000))
        passthrough_init(model, seed=seed, photos=to_tensor(calib_x))
    model = model.to(memory_format=memory_format)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.99))
    disc_opt = torch.optim.Adam(disc.parameters(), lr=DISC_LR, betas=(0.5, 0.99)) if disc is not None else None
    critic_opt = torch.optim.Adam(critic.parameters(), lr=DISC_LR, betas=(0.5, 0.99)) if critic is not None else None
    step = 0
    ckpt = workdir / "ckpt.pt"
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        if disc is not None and disc_opt is not None and "disc" in state:
            disc.load_state_dict(state["disc"])
            disc_opt.load_state_dict(state["disc_opt"])
        if critic is not None and critic_opt is not None and "anime" in state:
            critic.load_state_dict(state["anime"])
            critic_opt.load_state_dict(state["anime_opt"])
        step = int(state["step"])
        log.write(f"resumed at step {step}\n")

    def checkpoint() -> dict[str, object]:
        out: dict[str, object] = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
        if disc is not None and disc_opt is not None:
            out |= {"disc": disc.state_dict(), "disc_opt": disc_opt.state_dict()}
        if critic is not None and critic_opt is not None:
            out |= {"anime": critic.state_dict(), "anime_opt": critic_opt.state_dict()}
        return out

    data = batches(pool, crop_px=crop_px, batch=batch, seed=seed + step)
    preview_x, preview_y = next(batches(pool, crop_px=crop_px, batch=4, seed=seed + 10_000))
    budget_s = budget_min * 60.0
    train_start = time.monotonic()  # the schedule's clock starts after the pool is built
    train_budget_s = max(1.0, budget_s - (train_start - started))
    ema_l1 = float("nan")
    while step < steps:
        if time.monotonic() - started > budget_s:
            log.write(f"wall budget of {budget_min} min reached at step {step} (of {steps})\n")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps=steps, peak_lr=lr, time_frac=(time.monotonic() - train_start) / train_budget_s,
                                 warmup=warmup_steps)
        x, y = next(data)
        photo_t, target_t = to_tensor(x), to_tensor(y)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            pred = model(photo_t.contiguous(memory_format=memory_format))
        loss, l1 = toon_loss(pred, target_t, ink_weight=ink_weight, grad_weight=grad_weight)
        d_loss = g_adv = a_loss = g_anime = float("nan")
        ramp = min(1.0, (step + 1) / ADV_RAMP_STEPS)
        pred_f = pred.float()  # the critics score the picture in f32 (under bf16 autocast it comes out bf16)
        if disc is not None and disc_opt is not None:
            d_loss, adv = critic_step(disc, disc_opt, disc_loss(disc, photo_t, target_t, pred_f),
                                      partial(adv_loss, disc, photo_t, pred_f))
            g_adv = float(adv.detach())
            loss = loss + adv_weight * ramp * adv
        if critic is not None and critic_opt is not None and drawn is not None:
            a_loss, anime = critic_step(critic, critic_opt, anime_critic_loss(critic, to_tensor(next(drawn)), pred_f),
                                        partial(anime_loss, critic, pred_f))
            g_anime = float(anime.detach())
            loss = loss + anime_weight * ramp * anime
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        ema_l1 = l1 if math.isnan(ema_l1) else 0.98 * ema_l1 + 0.02 * l1
        if step % 10 == 0:
            adv_text = f" d {d_loss:.3f} g_adv {g_adv:.3f}" if disc is not None else ""
            adv_text += f" critic {a_loss:.3f} g_anime {g_anime:.3f}" if critic is not None else ""
            log.write(f"step {step} loss {float(loss.detach()):.4f} l1 {l1:.4f} ema_l1 {ema_l1:.4f}{adv_text} "
                      f"lr {opt.param_groups[0]['lr']:.2e} t {time.monotonic() - started:.0f}s\n")
        if step % ckpt_every == 0 or step == steps:
            save_atomic(checkpoint(), ckpt)
        if preview_every and step % preview_every == 0:
            write_preview(model, preview_x, preview_y, workdir / "preview.png")
    save_atomic(checkpoint(), ckpt)
    if out is not None:
        export_state_dict(model, out)
    summary = {"steps": float(step), "ema_l1": ema_l1, "wall_s": time.monotonic() - started}
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    log.write(f"done: {summary}\n")
    log.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, required=True, help="checkpoints, log, previews")
    p.add_argument("--steps", type=int, default=13_000)
    p.add_argument("--budget-min", type=float, default=58.0, help="wall-clock cap (minutes)")
    p.add_argument("--crop", type=int, default=96, help="square crop side (px, multiple of 4)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=6e-4, help="peak Adam learning rate")
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--preview-every", type=int, default=100)
    p.add_argument("--pool-cache", type=Path, default=None, help="npz cache of the rendered pool")
    p.add_argument("--out", type=Path, default=None, help="write the fp16 state dict here at the end")
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS)
    p.add_argument("--init", choices=("passthrough", "default"), default="passthrough",
                   help="passthrough: start as a softened copy of the input (training/init.py)")
    p.add_argument("--precision", choices=("auto", "bf16", "f32"), default="auto",
                   help="auto: bf16 autocast where the CPU has AMX/AVX512-BF16, else f32")
    p.add_argument("--scene-jitters", type=int, default=0,
                   help="extra pool pairs per photo and scale with a strong cast at low contrast (data.scene_jitter)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="start from these weights (ckpt.pt or state dict), fresh optimizer and schedule")
    p.add_argument("--adv-weight", type=float, default=0.0,
                   help="weight of the conditional PatchGAN term beside L1 (0: none, the shipped toon; ~0.02)")
    p.add_argument("--ink-weight", type=float, default=INK_WEIGHT,
                   help="extra L1 weight on the target's ink pixels (0: plain L1)")
    a = p.parse_args(argv)
    if a.crop % 4:
        p.error(f"--crop must be a multiple of 4, got {a.crop}")
    train(workdir=a.workdir, steps=a.steps, budget_min=a.budget_min, crop_px=a.crop, batch=a.batch, lr=a.lr,
          seed=a.seed, threads=a.threads, ckpt_every=a.ckpt_every, preview_every=a.preview_every,
          pool_cache=a.pool_cache, out=a.out, resume=not a.no_resume, init=a.init,
          pool_kwargs={"scene_jitters": a.scene_jitters} if a.scene_jitters else None,
          warmup_steps=a.warmup_steps, precision=a.precision, ink_weight=a.ink_weight,
          init_from=a.init_from, adv_weight=a.adv_weight)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
