"""Estimating the whole picture's GroupNorm statistics for tiles (issue #17): the shipped estimate against the
cheap refinements that were designed to beat it, in PyTorch on the bundled toon checkpoint.

    python benchmarks/stats_estimates.py [--size 1156x868] [--photos 0 5 17 11] [--downscales 2 4]

Pass 2 runs every tile with one set of statistics; the runtime takes them from pass 1, a downscaled copy
(``twopass.TwoPass.statistics``). At 12-24 MP pass 1 is 4.9-6.9x smaller than the photo, and on photos with
real detail the tiles then drift from the whole picture (docs/fullres.md, Limits). Each candidate here is
judged as the runtime would use it: the whole picture run with those statistics in every GroupNorm, against
the whole picture with its own (which is what tiles with exact statistics give, to 58-63 dB). Candidates,
at each pass-1 downscale ``d``:

- ``pass1``: the statistics of the copy downscaled by ``d`` (what ships);
- ``sweep_full``: one sweep over the full picture with ``pass1``'s statistics in, each GroupNorm's input
  measured (what tiles returning their sums would give, at full size);
- ``sweep_full_x2``: two such sweeps;
- ``sweep_2x``: one sweep at a 2x downscale with ``pass1``'s statistics in (the design docs/fullres.md once
  proposed: pass-2 tiles that return their sums, run over a 2x copy);
- ``extrapolated``: linear in ``d`` from the copies at ``d`` and ``2d`` to ``d = 1``;
- ``last_exact``: ``pass1`` with the last GroupNorm's statistics replaced by the whole picture's own, the best
  that any fix of the last GroupNorm alone could reach (it drives most of the drift on some photos and has no
  GroupNorm after it to disturb).

It needs torch (the converter's side): ``pip install -e '.[convert]'``. PSNR rows go to the terminal and
benchmarks/results/stats_estimates.json (untracked).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np
from fullres import photo_at, photo_name, psnr

from _common import REPO, machine, markdown_table, write_results

sys.path.insert(0, str(REPO))


class Probe:
    """The split toon generator, run with its own statistics or with given ones (recording what each
    GroupNorm's input really had)."""

    def __init__(self) -> None:
        import torch

        from edge_anime_converters import two_pass
        from edge_anime_converters.sources import load_torch_source

        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        source = load_torch_source(REPO / "training" / "checkpoints" / "toon.pt", name="toon", upsample_align=None)
        self.torch = torch
        self.model, self.hub, _ = two_pass.split_norms(source.module.eval())

    def run(self, rgb: np.ndarray, given: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(output u8, the statistics every GroupNorm's input had [1, K, 2])."""
        torch, hub = self.torch, self.hub
        hub.given = None if given is None else torch.from_numpy(given.astype(np.float32))
        hub.record, hub.collected = True, []
        try:
            with torch.no_grad():
                out = self.model(torch.from_numpy(rgb.astype(np.float32).transpose(2, 0, 1)[None] / 127.5 - 1))
            seen = torch.stack(hub.collected, dim=1).numpy().astype(np.float64)
        finally:
            hub.given, hub.record, hub.collected = None, False, []
        u8 = np.clip(np.rint((out[0].numpy().transpose(1, 2, 0) + 1) * 127.5), 0, 255).astype(np.uint8)
        return u8, seen


def downscaled(rgb: np.ndarray, factor: float) -> np.ndarray:
    """The runtime's pass-1 resize (``imaging.planner.resize_image``) to sides on the network's multiple of 4."""
    from PIL import Image

    from edge_anime.imaging.planner import resize_image

    height, width = rgb.shape[:2]
    size = (max(4, round(width / factor / 4) * 4), max(4, round(height / factor / 4) * 4))
    return np.asarray(resize_image(Image.fromarray(rgb), size))


def estimates(probe: Probe, rgb: np.ndarray, factor: float, exact: np.ndarray) -> dict[str, np.ndarray]:
    _, first = probe.run(downscaled(rgb, factor))
    _, halved = probe.run(downscaled(rgb, 2 * factor))
    _, swept = probe.run(rgb, first)
    _, swept_twice = probe.run(rgb, swept)
    _, swept_small = probe.run(downscaled(rgb, 2.0), first)
    extrapolated = first + (first - halved) * (factor - 1) / factor
    extrapolated[..., 1] = np.maximum(extrapolated[..., 1], 1e-6)
    last_exact = first.copy()
    last_exact[:, -1] = exact[:, -1]
    return {"pass1": first, "sweep_full": swept, "sweep_full_x2": swept_twice, "sweep_2x": swept_small,
            "extrapolated": extrapolated, "last_exact": last_exact}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1156x868", help="W x H every photo is resized to (Lanczos)")
    parser.add_argument("--photos", nargs="+", type=int, default=[0, 5, 17, 11],
                        help="indices into ../shared/photos' scene photos, sorted by name")
    parser.add_argument("--downscales", nargs="+", type=float, default=[2.0, 4.0])
    args = parser.parse_args()
    width, height = map(int, args.size.split("x"))
    probe = Probe()
    rows: list[dict[str, Any]] = []
    for index in args.photos:
        rgb = photo_at((width, height), index)
        whole, exact = probe.run(rgb)
        for factor in args.downscales:
            row: dict[str, Any] = {"photo": photo_name(index), "size": args.size, "downscale": factor}
            for name, stats in estimates(probe, rgb, factor, exact).items():
                row[name] = round(psnr(probe.run(rgb, stats)[0], whole), 2)
            rows.append(row)
            print(row, flush=True)
    data = {"machine": machine(), "rows": rows}
    columns = ["photo", "size", "downscale", "pass1", "sweep_full", "sweep_full_x2", "sweep_2x", "extrapolated",
               "last_exact"]
    write_results("stats_estimates", data, markdown_table(rows, columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
