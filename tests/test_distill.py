"""training/distill.py (issue 43): the half-width student of a style, learned from the teacher's pictures.

Tiny real runs: a pool cache of two small pictures, a seeded random teacher, a few steps; the run is stopped
by its step count and started again, and must resume where it stopped."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _pool(path: Path) -> None:
    rng = np.random.default_rng(5)
    pictures = {f"p{i}": rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for i in range(2)}
    np.savez(path, n=np.int64(2), **pictures, **{f"t{i}": p for i, p in enumerate(pictures.values())})


def test_the_student_is_half_width_sliced_from_the_teacher() -> None:
    from edge_anime_converters.generator import Generator, seeded_random_generator
    from training.distill import sliced_init

    teacher = seeded_random_generator(3)
    student = Generator(width=0.5)
    sliced_init(student, teacher)
    assert set(student.state_dict()) == set(teacher.state_dict())  # one key set: one loader, one converter
    weights = sum(p.numel() for p in student.parameters())
    assert weights < 0.3 * sum(p.numel() for p in teacher.parameters())
    first = student.block_a[0][1].weight
    assert torch.equal(first, teacher.block_a[0][1].weight[: first.shape[0]])
    assert student(torch.zeros(1, 3, 40, 56)).shape == (1, 3, 40, 56)


@pytest.mark.slow  # ~20 s: the teacher scored on whole pictures at each evaluation
def test_a_stopped_distillation_resumes_and_exports_a_loadable_student(tmp_path: Path) -> None:
    from edge_anime_converters.generator import seeded_random_generator
    from training.distill import distill, load_generator

    pool, teacher = tmp_path / "pool.npz", tmp_path / "teacher.pt"
    _pool(pool)
    torch.save(seeded_random_generator(4).state_dict(), teacher)
    args = dict(teacher_path=teacher, pool_path=pool, workdir=tmp_path / "run", budget_min=10.0, crop_px=32,
                batch=1, lr=1e-3, seed=1, threads=1, eval_every=2)
    first = distill(steps=4, **args)  # type: ignore[arg-type]
    assert first["steps"] == 4.0 and np.isfinite(first["psnr_vs_teacher_db"])
    second = distill(steps=6, **args)  # type: ignore[arg-type]
    assert second["steps"] == 6.0
    log = (tmp_path / "run" / "distill.log").read_text()
    assert "resumed at step 4" in log and log.count("(sliced init)") == 1
    from edge_anime_converters.sources import width_of

    saved = torch.load(tmp_path / "run" / "student.pt", weights_only=True)
    assert width_of(saved) == 0.5 and all(v.dtype == torch.float16 for v in saved.values())  # a plain state dict
    student = load_generator(tmp_path / "run" / "student.pt")
    assert student(torch.zeros(1, 3, 32, 32)).shape == (1, 3, 32, 32)


def test_a_distillation_can_start_from_an_earlier_student(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a teacher is refit, the student distilled from its previous fit is the starting point
    (``--init``): the run begins with exactly its weights, not the teacher's slices, and says so in the log."""
    from edge_anime_converters.generator import Generator, seeded_random_generator
    from training import distill as module
    from training.distill import distill, load_generator

    monkeypatch.setattr(module, "EVAL_SIDE_PX", 64)  # the scores are logged, not what is tested: small pictures

    pool, teacher, earlier = tmp_path / "pool.npz", tmp_path / "teacher.pt", tmp_path / "earlier.pt"
    _pool(pool)
    torch.save(seeded_random_generator(4, width=0.25).state_dict(), teacher)  # a cheap teacher: not what is tested
    torch.manual_seed(9)
    torch.save({k: v.half() for k, v in Generator(width=0.5).state_dict().items()}, earlier)
    summary = distill(teacher_path=teacher, pool_path=pool, workdir=tmp_path / "run", budget_min=10.0, steps=0,
                      crop_px=32, batch=1, lr=1e-3, seed=1, threads=1, eval_every=0, init_path=earlier)
    assert summary["steps"] == 0.0
    log = (tmp_path / "run" / "distill.log").read_text()
    assert f"(from {earlier})" in log and "(sliced init)" not in log
    want, got = load_generator(earlier).state_dict(), load_generator(tmp_path / "run" / "student.pt").state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
