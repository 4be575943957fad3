"""What a user gets from every bundled style: issue 27's picture measures, at the default settings, per style.

Why: the issue's targets (contrast, colour cast, palette, texture, vividness) are about what comes out of the
product as a user runs it, so this goes through the real path and measures with the issue's own tool. For
each bundled style (every folder under ``models/`` with a ``manifest.yaml``, or ``--styles toon,cel``):

1. ``edge-anime stylize PHOTOS -o OUT --style NAME`` as a subprocess, with no ``--config`` (the bundled
   default: ``model.variant: auto``, i.e. INT8 where it holds its quality floor, ``max_side`` 1024, the tone
   guard as the style's manifest says). A style the default config does not serve is run with a config
   holding only ``model: {styles: [NAME]}`` (every other key at its default); the JSON says so.
2. ``../shared/tools/look.py PHOTOS OUT --json FILE`` as a subprocess, so the figures are exactly the issue's:
   contrast (L* std out/in), cast (chroma of the output where the photo is neutral), colours (distinct 5-bit
   colours out/in), texture (median |Laplacian| out/in), chroma (mean chroma out/in).
3. PASS/FAIL against the issue's targets: contrast >= 0.8 on every photo, cast <= 6 on every photo, colours
   median <= 0.6, texture median <= 0.35, chroma median >= 1.0; the 5 worst photos by contrast and by cast.

Writes ``benchmarks/results/look_<style>.json`` (the tool's rows and summary, the verdicts, the box) and a
contact sheet ``benchmarks/results/look_<style>_sheet.jpg`` (photo | output pairs, ImageMagick ``montage``),
prints a markdown table; ``--markdown FILE`` also writes it to FILE (for docs). The stylized pictures stay in
``benchmarks/results/look/<style>/`` (gitignored: pictures made from ../shared/photos are never committed).
Skips (exit 0) when ``../shared`` is missing and no ``--photos`` was given.

    nice -n 10 .venv/bin/python benchmarks/look.py                      # every bundled style, 31 photos
    .venv/bin/python benchmarks/look.py --styles toon --limit 4         # a quick look while developing
    .venv/bin/python benchmarks/look.py --photos ~/new-photos --markdown docs/look.md
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, machine, photos_or_skip  # noqa: E402

LOOK_TOOL = REPO.parent / "shared" / "tools" / "look.py"
MODELS_DIR = REPO / "models"
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff"}
MEASURES = ("contrast", "cast", "colours", "texture", "chroma")
# measure -> (statistic the target is on, comparison, bound): issue 27's "Done when".
TARGETS: dict[str, tuple[str, str, float]] = {
    "contrast": ("min", ">=", 0.8),
    "cast": ("max", "<=", 6.0),
    "colours": ("median", "<=", 0.6),
    "texture": ("median", "<=", 0.35),
    "chroma": ("median", ">=", 1.0),
}
WORST_N = 5
SHEET_TILE = "160x160"  # montage cell: the sheet of 31 pairs stays ~1-2 MB
SHEET_PAIRS_PER_ROW = 4


def bundled_styles(models_dir: Path = MODELS_DIR) -> list[str]:
    """Every folder under models/ with a manifest.yaml, sorted: a style added there is picked up as it lands."""
    return sorted(p.parent.name for p in models_dir.glob("*/manifest.yaml"))


def photo_files(folder: Path, limit: int | None) -> list[Path]:
    photos = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES
                    and not p.name.startswith("."))
    return photos[:limit] if limit else photos


def product_env() -> dict[str, str]:
    """The caller's environment without EDGE_ANIME_CONFIG: stylize must read the bundled default config."""
    return {k: v for k, v in os.environ.items() if k != "EDGE_ANIME_CONFIG"}


def edge_anime() -> list[str]:
    exe = Path(sys.executable).with_name("edge-anime")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "edge_anime"]


def stylize(inputs: list[Path], out_dir: Path, style: str, *, work_dir: Path) -> dict[str, Any]:
    """Run the product on ``inputs`` (the photo folder, or files) into a fresh ``out_dir``; returns how (config,
    wall time, log tail).

    The output folder is emptied first: the product never overwrites (a clash gets a suffix), and look.py
    takes the first file matching ``<stem>_*``, so a stale picture would be measured instead of the new one.
    """
    if out_dir.exists():
        shutil.rmtree(out_dir)
    base = [*edge_anime(), "stylize", *map(str, inputs), "-o", str(out_dir), "--style", style, "-q"]
    config = "bundled default (no --config)"
    t0 = time.monotonic()
    run = subprocess.run(base, capture_output=True, text=True, env=product_env(), cwd=REPO)
    if run.returncode != 0 and "not served by" in run.stderr:
        # The bundled config lists only its default style in model.path/model.styles: serve this one beside
        # it with nothing else changed, and say so (the figures are still the default settings').
        extra = work_dir / f"serve_{style}.yaml"
        extra.write_text(f"# benchmarks/look.py: the bundled defaults, serving {style} too\n"
                         f"model:\n  styles: [{style}]\n", encoding="utf-8")
        config = f"bundled defaults + model.styles: [{style}] ({style} is not served by the bundled config)"
        print(f"  note: --style {style} is not served by the bundled config; running with {extra}", flush=True)
        t0 = time.monotonic()
        run = subprocess.run([*base, "--config", str(extra)], capture_output=True, text=True, env=product_env(),
                             cwd=REPO)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        # Partial output is still measured (look.py takes what is there), and the failure is reported.
        print(f"  edge-anime stylize --style {style} exited {run.returncode}:\n{run.stderr[-2000:]}", flush=True)
    return {"command": " ".join([*base[:2], "PHOTOS", "-o", str(out_dir), "--style", style]), "config": config,
            "returncode": run.returncode, "wall_s": round(wall, 1),
            "log_tail": (run.stdout + run.stderr)[-3000:]}


def measure(look_tool: Path, photos_dir: Path, out_dir: Path, json_path: Path) -> dict[str, Any]:
    """The issue's own tool, as a subprocess; returns its JSON ({"summary": ..., "rows": {stem: {...}}})."""
    run = subprocess.run([sys.executable, str(look_tool), str(photos_dir), str(out_dir), "--json", str(json_path)],
                         capture_output=True, text=True, cwd=REPO)
    if run.returncode != 0:
        raise RuntimeError(f"{look_tool} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    return json.loads(json_path.read_text(encoding="utf-8"))


def verdicts(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per measure: min/median/max over the photos that have it, the target and PASS/FAIL."""
    out: dict[str, dict[str, Any]] = {}
    for m in MEASURES:
        values = [r[m] for r in rows.values() if r.get(m) is not None]
        stat, op, bound = TARGETS[m]
        if not values:
            out[m] = {"n": 0, "min": None, "median": None, "max": None, "target": f"{stat} {op} {bound:g}",
                      "pass": None}
            continue
        figures = {"min": min(values), "median": statistics.median(values), "max": max(values)}
        value = figures[stat]
        ok = value >= bound if op == ">=" else value <= bound
        out[m] = {"n": len(values), **figures, "target": f"{stat} {op} {bound:g}", "pass": ok}
    return out


def worst(rows: dict[str, dict[str, Any]], measure_name: str, *, low_is_bad: bool) -> list[tuple[str, float]]:
    have = [(s, float(r[measure_name])) for s, r in rows.items() if r.get(measure_name) is not None]
    have.sort(key=lambda x: x[1], reverse=not low_is_bad)
    return have[:WORST_N]


def contact_sheet(photos: list[Path], out_dir: Path, sheet: Path) -> str | None:
    """photo | output pairs, SHEET_PAIRS_PER_ROW pairs a row, small labelled tiles, with ImageMagick montage.

    Returns None, or why there is no sheet (montage missing or failing: the figures do not depend on it).
    """
    montage = shutil.which("montage")
    if montage is None:
        return "ImageMagick `montage` not found (apt-get install -y imagemagick)"
    args: list[str] = []
    for photo in photos:
        outputs = sorted(q for q in out_dir.glob(f"{photo.stem}_*") if q.suffix != ".json")
        if not outputs:
            continue
        args += ["-label", photo.stem, str(photo), "-label", outputs[0].stem, str(outputs[0])]
    if not args:
        return "no outputs to show"
    tmp = sheet.with_name(f".{sheet.stem}.tmp{sheet.suffix}")
    run = subprocess.run([montage, "-auto-orient", *args, "-tile", f"{2 * SHEET_PAIRS_PER_ROW}x",
                          "-geometry", f"{SHEET_TILE}+2+2", "-pointsize", "11", "-quality", "85", str(tmp)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        tmp.unlink(missing_ok=True)
        return f"montage failed: {run.stderr.strip()[-500:]}"
    os.replace(tmp, sheet)
    return None


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "PASS" if value else "FAIL"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def table(results: dict[str, dict[str, Any]], photos_dir: Path) -> str:
    lines = [f"Photos: `{photos_dir}`; `edge-anime stylize` at the default settings; measured with "
             f"`../shared/tools/look.py` (issue 27).", "",
             "| style | measure | n | min | median | max | target | result |", "|---|---|---|---|---|---|---|---|"]
    for style, res in results.items():
        for m in MEASURES:
            v = res["verdicts"][m]
            lines.append(f"| {style} | {m} | {v['n']} | {fmt(v['min'])} | {fmt(v['median'])} | {fmt(v['max'])} "
                         f"| {v['target']} | {fmt(v['pass'])} |")
    lines.append("")
    for style, res in results.items():
        status = "PASS" if res["pass"] else "FAIL"
        lines.append(f"**{style}**: {status} ({res['photos_measured']} of {res['photos']} photos measured; "
                     f"{res['stylize']['config']}, stylize {res['stylize']['wall_s']} s)  ")
        lines.append("worst contrast: " + ", ".join(f"{s} {v:.2f}" for s, v in res["worst_contrast"]) + "  ")
        lines.append("worst cast: " + ", ".join(f"{s} {v:.1f}" for s, v in res["worst_cast"]) + "  ")
        if res.get("sheet"):
            lines.append(f"contact sheet: `{res['sheet']}`  ")
        lines.append("")
    return "\n".join(lines)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--styles", default=None,
                   help="comma-separated styles (default: every folder under models/ with a manifest.yaml)")
    p.add_argument("--photos", type=Path, default=None, help="photo folder (default: ../shared/photos)")
    p.add_argument("--limit", type=int, default=None, help="only the first N photos (sorted by name)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the table to this file")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default: benchmarks/results)")
    p.add_argument("--look-tool", type=Path, default=LOOK_TOOL, help="default: ../shared/tools/look.py")
    p.add_argument("--no-sheet", action="store_true", help="skip the montage contact sheets")
    a = p.parse_args(argv)

    found = photos_or_skip(p, a.photos)
    if found is None:
        return 0
    photos_dir: Path = found
    if not a.look_tool.is_file():
        if a.look_tool == LOOK_TOOL:
            print(f"skip: {LOOK_TOOL} not found (../shared beside the checkout)")
            return 0
        p.error(f"--look-tool: {a.look_tool} not found")
    available = bundled_styles()
    styles = [s.strip() for s in a.styles.split(",") if s.strip()] if a.styles else available
    unknown = [s for s in styles if s not in available]
    if unknown:
        p.error(f"--styles: {', '.join(unknown)} not under models/ (bundled: {', '.join(available) or 'none'})")
    photos = photo_files(photos_dir, a.limit)
    if not photos:
        p.error(f"no photos in {photos_dir}")

    out_root: Path = a.out
    out_root.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="look-", dir=out_root) as tmp:
        work = Path(tmp)
        # look.py measures every photo of its folder that has an output; with --limit the rest have none.
        for style in styles:
            out_dir = out_root / "look" / style
            print(f"{style}: stylizing {len(photos)} photos from {photos_dir} ...", flush=True)
            how = stylize([photos_dir] if a.limit is None else photos, out_dir, style, work_dir=work)
            print(f"{style}: stylized in {how['wall_s']} s; measuring with {a.look_tool.name} ...", flush=True)
            tool = measure(a.look_tool, photos_dir, out_dir, work / f"look_{style}.json")
            rows: dict[str, dict[str, Any]] = tool["rows"]
            v = verdicts(rows)
            res: dict[str, Any] = {
                "style": style, "photos_dir": str(photos_dir), "photos": len(photos), "photos_measured": len(rows),
                "missing": sorted(ph.stem for ph in photos if ph.stem not in rows),
                "stylize": how, "verdicts": v, "pass": all(x["pass"] is True for x in v.values()),
                "worst_contrast": worst(rows, "contrast", low_is_bad=True),
                "worst_cast": worst(rows, "cast", low_is_bad=False),
                "look_tool": {"summary": tool["summary"], "rows": rows},
                "machine": machine(),
            }
            if not a.no_sheet:
                sheet = out_root / f"look_{style}_sheet.jpg"
                why = contact_sheet(photos, out_dir, sheet)
                res["sheet"] = None if why else str(sheet.relative_to(REPO) if sheet.is_relative_to(REPO) else sheet)
                if why:
                    print(f"  no contact sheet: {why}", flush=True)
            write_atomic(out_root / f"look_{style}.json", json.dumps(res, indent=1, default=str))
            results[style] = res
    text = table(results, photos_dir)
    print()
    print(text)
    for style in results:
        print(f"wrote {out_root / f'look_{style}.json'}")
    if a.markdown:
        write_atomic(a.markdown, text)
        print(f"wrote {a.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
