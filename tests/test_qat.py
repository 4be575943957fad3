"""QAT of the toon INT8 model (training/qat_toon.py): a real NNCF fake-quantized model, fine-tuned a step
against its FP32 teacher and exported to an OpenVINO IR that keeps the u8 contract and runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("nncf")
pytest.importorskip("skimage")

import openvino as ov

from training.qat_toon import crops, qat


def test_crops_are_the_generator_range_and_size() -> None:
    pool = [np.full((40, 50, 3), 255, np.uint8), np.zeros((20, 20, 3), np.uint8)]  # the 20 px one is too small
    batch = crops(pool, crop_px=32, batch=3, rng=np.random.default_rng(0))
    assert tuple(batch.shape) == (3, 3, 32, 32) and float(batch.min()) == float(batch.max()) == 1.0


@pytest.mark.slow
def test_qat_exports_a_fake_quantized_u8_ir_that_runs(narrow_checkpoint: Path) -> None:
    """On the quarter-width generator: the same layers (and NNCF node names) as the toon's, at ~1/16 of the
    arithmetic of NNCF's torch statistics over 256 px calibration crops."""
    model, summary = qat(narrow_checkpoint, steps=2, crop_px=32, batch=1, lr=1e-5, seed=0, threads=1,
                         budget_min=5.0, calib_count=2, log=lambda _: None)
    assert summary["steps"] == 2 and summary["final_running_mse"] > 0.0
    assert sum(op.get_type_name() == "FakeQuantize" for op in model.get_ordered_ops()) >= 10
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    photo = np.random.default_rng(1).integers(0, 256, size=(1, 64, 96, 3), dtype=np.uint8)
    out = compiled(photo)[0]
    assert out.dtype == np.uint8 and out.shape == photo.shape and int(out.max()) > int(out.min())
