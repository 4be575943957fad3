"""`edge-anime batch INPUT... -o DIR [--ray ADDRESS|local]`: a backlog, exactly once, on this box or a Ray cluster.

The inputs rule is stylize's (files, folders, globs; photos and clips). Unlike stylize, an output's name is fixed
by its input (``batch.plan``): an output that exists is done, so a re-run, or a Ray batch redone after a lost
node, skips it and says how many it skipped. Without ``--ray`` the work runs on one Stylizer in this process;
with it, as a Ray Data job whose actors each hold one (``batch.on_ray``). Inputs that fail are listed on stderr
and in ``DIR/failed.jsonl`` (one JSON object a line: input, reason, bug), which a later run rewrites (and
removes when nothing failed). Exit statuses as stylize: 0, 1 when an input failed, 70 for a bug, 78 for a bad
config or model.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_FAILURES, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from ..inputs import InputFilter, collect_sources

if TYPE_CHECKING:
    from ..batch.plan import Plan
    from ..batch.work import Outcome
    from ..config import Config

FAILED_LIST = "failed.jsonl"
FAILURES_SHOWN = 20  # failures listed on stderr; all of them are in failed.jsonl


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="image or video files, folders (sub-folders only with -r) or glob patterns (quoted)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                        help="folder for the stylized files (created if missing); with --ray, on a filesystem "
                             "every node mounts at the same path, as the inputs")
    parser.add_argument("--ray", metavar="ADDRESS", default=None,
                        help="run as a Ray Data job on the cluster at ADDRESS (host:port of its head), or 'local' "
                             "to start Ray on this box; needs the ray extra. Without it: this process")
    parser.add_argument("--config", type=Path, metavar="FILE", default=None,
                        help="config file (default: $EDGE_ANIME_CONFIG, else the bundled configs/default.yaml); "
                             "every Ray node uses it as read here")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="descend into sub-folders of folder inputs; their structure is mirrored under DIR")
    parser.add_argument("--style", default=None, metavar="NAME",
                        help="one of the styles the config serves (model.path, model.styles); default: model.path")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar (warnings and errors still show)")


def run(args: argparse.Namespace) -> int:
    from .stylize import console_log

    with console_log(quiet=args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..batch.plan import make_plan, remove_leftovers
    from ..config import load_config
    from .stylize import chosen_style

    config = load_config(args.config)
    style = chosen_style(config, args.style)
    if args.ray:
        from ..batch.on_ray import check_reachable

        check_reachable(args.ray)  # before any folder is made or file planned
    accept = InputFilter(config.watch, also=config.video.extensions)
    sources, problems = collect_sources(args.inputs, recursive=args.recursive, accept=accept)
    out_dir: Path = args.output
    plan = make_plan(sources, out_dir, config, style=style)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for folder in sorted({Path(item.dst).parent for item in plan.todo}):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"edge-anime batch: error: {exc.filename}: cannot create the output folder: {exc.strerror}",
              file=sys.stderr)
        return EXIT_USAGE
    if not plan.items and not problems:
        print("edge-anime batch: no image or video files found in the inputs given", file=sys.stderr)
        return EXIT_FAILURES
    remove_leftovers(plan.items)  # an earlier run's interrupted writes
    if plan.done:
        print(f"{len(plan.done)} of {len(plan.items)} input(s) already done in {out_dir}: skipped")
    started = time.monotonic()
    outcomes = _execute(args, config, plan, style) if plan.todo else []
    elapsed = time.monotonic() - started
    left = remove_leftovers(plan.items)  # what killed attempts left: their items were redone or are listed
    return _report(out_dir, plan, outcomes, problems, elapsed, where=f"on Ray at {args.ray}" if args.ray else "",
                   leftovers=left)


def _execute(args: argparse.Namespace, config: Config, plan: Plan, style: str) -> list[Outcome]:
    from ..batch.on_ray import run_on_ray
    from ..batch.work import run_local

    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(plan.todo), unit="img", dynamic_ncols=True)

    def tick(_outcome: Outcome) -> None:
        if bar is not None:
            bar.update(1)

    try:
        if args.ray:
            return run_on_ray(args.ray, config, plan.todo, style=style, on_outcome=tick)
        return run_local(config, plan.todo, style=style, on_outcome=tick)
    finally:
        if bar is not None:
            bar.close()


def _report(out_dir: Path, plan: Plan, outcomes: list[Outcome], problems: list[str], elapsed: float, *,
            where: str, leftovers: int) -> int:
    """The summary line, the failures (stderr and failed.jsonl) and the exit status."""
    from ..fsutil import write_atomic

    written = [o for o in outcomes if o.status == "written"]
    skipped = len(plan.done) + sum(o.status == "skipped" for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    missing = len(plan.todo) - len(outcomes)  # none, unless the job itself broke off
    rate = f", {len(written) / elapsed:.2f} images/s" if written and elapsed > 0 else ""
    workers = len({o.worker for o in outcomes if o.worker})
    print(f"batch: {len(written)} written, {skipped} already done, {len(failed) + len(problems)} failed, of "
          f"{len(plan.items) + len(problems)} input(s) into {out_dir} in {elapsed:.1f} s{rate}"
          + (f" {where}, {workers} worker process(es)" if where else ""))
    if leftovers:
        print(f"removed {leftovers} temp file(s) of interrupted writes (their inputs were done again)")
    records = [{"input": line.split(":", 1)[0], "reason": line, "bug": False} for line in problems]
    records += [{"input": o.src, "reason": o.reason, "bug": o.bug} for o in failed]
    failed_list = out_dir / FAILED_LIST
    if records:
        write_atomic(failed_list, "".join(json.dumps(r) + "\n" for r in records).encode())
        print(f"{len(records)} failed (listed in {failed_list}):", file=sys.stderr)
        for record in records[:FAILURES_SHOWN]:
            print(f"  {record['reason']}", file=sys.stderr)
        if len(records) > FAILURES_SHOWN:
            print(f"  ... and {len(records) - FAILURES_SHOWN} more", file=sys.stderr)
    else:
        failed_list.unlink(missing_ok=True)  # an earlier run's list: those inputs are done now
    if missing:
        print(f"edge-anime batch: error: {missing} input(s) got no report from the job; run again to finish them",
              file=sys.stderr)
        return EXIT_FAILURES
    if any(o.bug for o in failed):
        return EXIT_INTERNAL
    return EXIT_FAILURES if records else EXIT_OK
