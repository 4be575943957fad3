"""PyTorch module -> OpenVINO model with the u8 NHWC RGB in/out contract (docs/contracts.md, section 1).

Why the pre/post-processing lives in the graph: the runtime then moves bytes only, numpy never touches a
float, and the CPU plugin fuses the scale/clamp into the first and last convolutions.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.preprocess import ColorFormat, PrePostProcessor

INPUT_NAME = "image"
OUTPUT_NAME = "stylized"
# Tracing size: any multiple of 4 works; the saved IR has dynamic H and W. training/qat_toon.py traces with it.
TRACE_HW = (256, 256)
# What the converter traces with: small, because the trace runs the generator on it (2.5 s less per graph
# than 256x256 on a busy 2-core box, three graphs per float conversion), and a size no verification uses, so
# a shape the trace baked in as a constant fails verification at both of its sizes instead of passing at one.
EXAMPLE_HW = (64, 64)


def _u8_output(node: ov.Output) -> ov.Output:
    """[-1, 1] float -> round((x + 1) * 127.5) clamped to [0, 255] as u8."""
    scaled = ops.multiply(ops.add(node, np.float32(1.0)), np.float32(127.5))
    rounded = ops.round(scaled, "half_to_even")
    clamped = ops.clamp(rounded, 0.0, 255.0)
    return ops.convert(clamped, ov.Type.u8).output(0)


def with_u8_io(model: ov.Model, *, layout: str = "NCHW", output_layout: str | None = None) -> ov.Model:
    """Wrap a float [-1, 1] model (input ``layout`` NCHW or NHWC; output the same unless ``output_layout``)
    so it takes and gives u8 NHWC RGB. PrePostProcessor inserts a transpose only where a layout is not NHWC."""
    ppp = PrePostProcessor(model)
    inp = ppp.input(0)
    inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_color_format(ColorFormat.RGB)
    inp.model().set_layout(ov.Layout(layout))
    inp.preprocess().convert_element_type(ov.Type.f32).scale(127.5).mean(1.0)
    out = ppp.output(0)
    out.model().set_layout(ov.Layout(output_layout or layout))
    out.tensor().set_layout(ov.Layout("NHWC"))
    out.postprocess().custom(_u8_output)
    model = ppp.build()
    model.input(0).get_tensor().set_names({INPUT_NAME})
    model.output(0).get_tensor().set_names({OUTPUT_NAME})
    return model


def trace_to_ov(module: object, example: tuple[Any, ...], shapes: Sequence[Sequence[int]]) -> ov.Model:
    """``ov.convert_model`` of a torch module traced once on ``example`` (tensors), inputs set to ``shapes``.

    Why the decoder is built here: ``convert_model`` traces with ``torch.jit.trace``'s default
    ``check_trace=True``, which traces and runs the module again to compare: 20 s of a 32 s conversion of the
    generator on a busy 2-core box. That check compares the trace with itself at the example's size; the
    converter verifies every IR it writes against PyTorch at two other sizes, which the check cannot replace
    and which catches all it would.
    """
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    decoder = TorchScriptPythonDecoder(module, example_input=example, trace_kwargs={"check_trace": False})
    return ov.convert_model(decoder, input=[list(shape) for shape in shapes])


def torch_to_float_ov(module: object, *, dynamic_hw: bool = True) -> ov.Model:
    """Convert a torch Generator (NCHW float in/out) to an OpenVINO float model, no u8 wrapping.

    Kept apart from ``torch_to_ov`` because NNCF quantizes this float graph (calibration data in [-1, 1])
    before the u8 pre/post-processing is added.
    """
    import torch  # converters side only

    example_hw = EXAMPLE_HW if dynamic_hw else TRACE_HW
    shape = [1, 3, -1, -1] if dynamic_hw else [1, 3, *TRACE_HW]
    return trace_to_ov(module, (torch.zeros(1, 3, *example_hw),), [shape])


def torch_to_ov(module: object, *, dynamic_hw: bool = True) -> ov.Model:
    """Convert a torch Generator (NCHW float in/out) to an OpenVINO model with the u8 contract."""
    return with_u8_io(torch_to_float_ov(module, dynamic_hw=dynamic_hw))


def with_static_hw(model: ov.Model, size_hw: tuple[int, int]) -> ov.Model:
    """A copy of a u8 NHWC model reshaped to one H x W: static shapes are what the runtime compiles."""
    static = model.clone()
    static.reshape({static.input(0): ov.PartialShape([1, size_hw[0], size_hw[1], 3])})
    return static


def save_ir(model: ov.Model, directory: Path, *, compress_to_fp16: bool) -> tuple[Path, Path]:
    """Write model.xml/model.bin into ``directory`` (which the caller later renames into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    xml = directory / "model.xml"
    ov.save_model(model, xml, compress_to_fp16=compress_to_fp16)
    return xml, xml.with_suffix(".bin")
