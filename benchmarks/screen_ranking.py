"""Does a small picture rank a style's candidates (IR x inference precision) as the shape that runs does?

The first start screens every candidate on a small picture and times only the close ones at the real shape
(``edge_anime.runtime.shortlist``). This times every candidate, at length, at each ``--shapes`` (the
last is the real one), in alternating order, and prints images/s and seconds per megapixel per shape with
each candidate's rank: the screen's size is right when the real shape's winner is near the top of it.

    python benchmarks/screen_ranking.py [--model models/toon] [--shapes 96x128 192x256 768x1024] [--seconds 6]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _common import REPO, machine, markdown_table, write_results

sys.path.insert(0, str(REPO))


def main() -> int:
    import openvino as ov

    from edge_anime.config import DeviceSection
    from edge_anime.models import resolve_model
    from edge_anime.runtime.timing import Candidate, measure_candidates, native_precisions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "toon")
    parser.add_argument("--shapes", nargs="+", default=["96x128", "192x256", "768x1024"], help="HxW, the real one last")
    parser.add_argument("--seconds", type=float, default=6.0, help="per candidate and shape, over its rounds")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    core = ov.Core()
    style = resolve_model(str(args.model), search_dirs=[])
    device = DeviceSection()
    candidates = [Candidate(v, p) for v in style.variant_names() for p in native_precisions(core)]
    table: dict[str, dict[str, Any]] = {c.label: {"candidate": c.label} for c in candidates}
    for text in args.shapes:
        height, width = (int(x) for x in text.split("x"))
        timings = measure_candidates(style, device, candidates, (height, width), seconds=args.seconds,
                                     rounds=args.rounds, core=core)
        ranked = sorted(timings, key=lambda t: -t.images_per_s)
        for timing in timings:
            row = table[timing.candidate.label]
            row[f"{width}x{height} images/s"] = round(timing.images_per_s, 3)
            row[f"{width}x{height} s/MP"] = round(1e6 / (timing.images_per_s * height * width), 2) if timing.images_per_s else None
            row[f"{width}x{height} rank"] = ranked.index(timing) + 1
            row[f"{width}x{height} runs"] = [round(x, 3) for x in timing.runs_images_per_s]
        print(f"{width}x{height}: " + ", ".join(f"{t.candidate.label} {t.images_per_s:.2f}" for t in ranked), flush=True)
    rows = list(table.values())
    columns = ["candidate"] + [k for k in rows[0] if k != "candidate" and not k.endswith("runs")]
    text = (f"Every candidate of {style.name} timed {args.seconds} s in {args.rounds} alternating rounds per shape "
            f"(THROUGHPUT, default device settings)\n\n" + markdown_table(rows, columns))
    write_results("screen_ranking", {"machine": machine(), "rows": rows, "shapes": args.shapes}, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
