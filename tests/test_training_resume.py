"""A style's training survives kill -9: the next run of the same command resumes from the last checkpoint.

Issue 27 asks that one command trains a style, resumable after any stop. ``training.train_style`` runs its
phases through ``training.train_toon``'s loop, so that loop is killed here for real, mid-run, and rerun.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled

REPO_ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = scaled(240.0)


def _wait_for(predicate: object, what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_training_killed_mid_run_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("skimage")
    from training.data import load_or_build_pool

    pool = tmp_path / "pool.npz"
    load_or_build_pool(pool, seed=7, names=["chelsea"], long_sides_px=(64,), jitters=2)  # tiny, cached
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "training.train_toon", "--workdir", str(workdir), "--pool-cache", str(pool),
           "--crop", "32", "--batch", "1", "--threads", "1", "--ckpt-every", "5", "--preview-every", "0",
           "--budget-min", "10", "--warmup-steps", "2", "--precision", "f32"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.Popen([*cmd, "--steps", "100000"], cwd=REPO_ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log = workdir / "train.log"
        # The log line of a step comes before its checkpoint is written: once step 30 is logged, the checkpoint
        # of step 25 is surely on disk (killed right after "step 20" it could still hold step 15).
        _wait_for(lambda: log.is_file() and "step 30 " in log.read_text(), "30 training steps")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=scaled(30))
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == -signal.SIGKILL
    saved = int(torch.load(workdir / "ckpt.pt", weights_only=True)["step"])
    assert saved >= 25, f"no checkpoint of the 30 steps run before the kill (saved at {saved})"

    done = subprocess.run([*cmd, "--steps", str(saved + 5)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr[-2000:]
    text = log.read_text()
    assert f"resumed at step {saved}" in text
    assert f"'steps': {float(saved + 5)}" in text.splitlines()[-1], text.splitlines()[-1]


def test_adversarial_term_is_checkpointed_and_resumed(tmp_path: Path) -> None:
    """The PatchGAN term (issue 41): its discriminator and optimizer live in ckpt.pt and a resume picks them up."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("skimage")
    from training.data import load_or_build_pool
    from training.train_toon import train

    pool = tmp_path / "pool.npz"
    load_or_build_pool(pool, seed=7, names=["chelsea"], long_sides_px=(64,), jitters=1)
    workdir = tmp_path / "run"
    kwargs: dict[str, object] = dict(workdir=workdir, budget_min=5.0, crop_px=32, batch=1, lr=1e-4, seed=7,
                                     threads=1, ckpt_every=3, preview_every=0, pool_cache=pool, out=None,
                                     warmup_steps=1, precision="f32", adv_weight=0.05)
    train(steps=3, **kwargs)  # type: ignore[arg-type]
    state = torch.load(workdir / "ckpt.pt", weights_only=True)
    assert {"model", "opt", "disc", "disc_opt"} <= set(state) and int(state["step"]) == 3
    disc_before = {k: v.clone() for k, v in state["disc"].items()}
    train(steps=5, **kwargs)  # type: ignore[arg-type]
    text = (workdir / "train.log").read_text()
    assert "resumed at step 3" in text
    after = torch.load(workdir / "ckpt.pt", weights_only=True)
    assert int(after["step"]) == 5
    assert any(not torch.equal(disc_before[k], v) for k, v in after["disc"].items()), "the discriminator trained on"


def test_anime_critic_is_checkpointed_and_resumed(tmp_path: Path) -> None:
    """The anime critic (issue 41) lives in ckpt.pt beside the generator and a resume trains it on."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("skimage")
    import numpy as np

    from training.data import load_or_build_pool
    from training.train_toon import train

    pool = tmp_path / "pool.npz"
    load_or_build_pool(pool, seed=7, names=["chelsea"], long_sides_px=(64,), jitters=1)

    def drawn() -> Iterator[np.ndarray]:  # flat fills with one clean line: what the illustrations look like
        rng = np.random.default_rng(3)
        while True:
            batch = np.repeat(rng.integers(0, 256, (1, 1, 1, 3), dtype=np.uint8), 32, axis=1).repeat(32, axis=2)
            batch[:, 15:17] = 20
            yield batch

    workdir = tmp_path / "run"
    kwargs: dict[str, object] = dict(workdir=workdir, budget_min=5.0, crop_px=32, batch=1, lr=1e-4, seed=7,
                                     threads=1, ckpt_every=3, preview_every=0, pool_cache=pool, out=None,
                                     warmup_steps=1, precision="f32", anime_weight=0.1)
    with pytest.raises(ValueError, match="drawn"):
        train(steps=3, **kwargs)  # type: ignore[arg-type]
    train(steps=3, drawn=drawn(), **kwargs)  # type: ignore[arg-type]
    state = torch.load(workdir / "ckpt.pt", weights_only=True)
    assert {"model", "opt", "anime", "anime_opt"} <= set(state) and "disc" not in state
    before = {k: v.clone() for k, v in state["anime"].items()}
    train(steps=5, drawn=drawn(), **kwargs)  # type: ignore[arg-type]
    assert "resumed at step 3" in (workdir / "train.log").read_text()
    after = torch.load(workdir / "ckpt.pt", weights_only=True)
    assert int(after["step"]) == 5
    assert any(not torch.equal(before[k], v) for k, v in after["anime"].items()), "the critic trained on"


def test_softened_illustration_loses_its_edges_only() -> None:
    """The critic's negative example: a flat fill stays as it is, a hard edge is spread over a few pixels."""
    torch = pytest.importorskip("torch")
    from training.train_toon import luma, softened

    flat = torch.full((1, 3, 16, 16), 0.25)
    assert torch.allclose(softened(flat), flat, atol=1e-6)
    edge = torch.zeros((1, 3, 16, 16))
    edge[..., 8:] = 1.0
    step = lambda t: float((t[..., 1:] - t[..., :-1]).abs().max())  # noqa: E731
    assert step(edge) == 1.0 and step(softened(edge)) < 0.4
    assert torch.allclose(luma(torch.ones((1, 3, 2, 2))), torch.ones((1, 1, 2, 2)))
