"""`edge-anime batch INPUT... -o DIR [--ray ADDRESS|local]`: a backlog, exactly once, on this box or a Ray cluster.

The inputs rule is stylize's (files, folders, globs; photos and clips). Unlike stylize, an output's name is fixed
by its input (``batch.plan``): an output that exists is done, so a re-run, or a Ray batch redone after a lost
node, skips it and says how many it skipped. Without ``--ray`` the work runs on one Stylizer in this process;
with it, as a Ray Data job whose actors each hold one (``batch.on_ray``). Inputs that fail are listed on stderr
and in ``DIR/failed.jsonl`` (one JSON object a line: input, reason, bug), which a later run rewrites (and
removes when nothing failed). Exit statuses as stylize: 0, 1 when an input failed, 70 for a bug, 73 when the
output folder cannot be made or written (checked before any work), 74 when writes failed during the run for
the box's storage (a disk that filled), 78 for a bad config or model.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_CANTCREAT, EXIT_FAILURES
from ..inputs import InputFilter, collect_sources
from . import add_config_option

if TYPE_CHECKING:
    from ..batch.plan import Plan
    from ..batch.work import Outcome
    from ..config import Config
    from ..inputs import Problem

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
    add_config_option(parser, more="; every Ray node uses it as read here")
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
    from .stylize import chosen_style, make_output_folders, output_skip, without_own_outputs

    config = load_config(args.config)
    style = chosen_style(config, args.style)
    if args.ray:
        from ..batch.on_ray import check_reachable

        check_reachable(args.ray)  # before any folder is made or file planned
    out_dir: Path = args.output
    accept = InputFilter(config.watch, also=config.video.extensions)
    skip = output_skip(out_dir, config)
    sources, problems = collect_sources(args.inputs, recursive=args.recursive, accept=accept, skip=skip)
    if (line := skip.said()) is not None:
        print(line)
    sources = without_own_outputs(sources, out_dir, config, style=style, accept=accept)
    plan = make_plan(sources, out_dir, config, style=style, accept=accept)
    if plan.todo or problems:  # a run that writes nothing needs no writable folder (a finished archive)
        error = make_output_folders(out_dir, [Path(item.dst).parent for item in plan.todo], os_mkdir)
        if error is not None:
            print(f"edge-anime batch: error: {error}", file=sys.stderr)
            return EXIT_CANTCREAT
    if not plan.items and not problems:
        print("edge-anime batch: no image or video files found in the inputs given", file=sys.stderr)
        return EXIT_FAILURES
    remove_leftovers(plan.items)  # an earlier run's interrupted writes
    if plan.done:
        print(f"{len(plan.done)} of {len(plan.items)} input(s) already done in {out_dir}: skipped")
    if plan.left:
        print(f"left as they were: {', '.join(str(p) for p in plan.left)}: written by an earlier run under a "
              "name that two inputs of one folder now share; each of those is written under its own name "
              "(its extension added)")
    started = time.monotonic()
    outcomes = _execute(args, config, plan, style) if plan.todo else []
    elapsed = time.monotonic() - started
    left = remove_leftovers(plan.items)  # what killed attempts left: their items were redone or are listed
    return _report(out_dir, plan, outcomes, problems, elapsed, where=f"on Ray at {args.ray}" if args.ray else "",
                   leftovers=left)


def os_mkdir(folder: Path) -> None:
    """``mkdir -p``: batch keeps the folders it makes (an output folder left empty says the run happened)."""
    folder.mkdir(parents=True, exist_ok=True)


def _execute(args: argparse.Namespace, config: Config, plan: Plan, style: str) -> list[Outcome]:
    from ..batch.on_ray import run_on_ray
    from ..batch.work import run_local
    from ..progressbar import TerminalBar

    bar = TerminalBar(len(plan.todo), unit="img") if not args.quiet and sys.stderr.isatty() else None

    def tick(_outcome: Outcome) -> None:
        if bar is not None:
            bar.bar.update(1)

    try:
        if args.ray:
            return run_on_ray(args.ray, config, plan.todo, style=style, on_outcome=tick)
        return run_local(config, plan.todo, style=style, on_outcome=tick)
    finally:
        if bar is not None:
            bar.close()


def _report(out_dir: Path, plan: Plan, outcomes: list[Outcome], problems: list[Problem], elapsed: float, *,
            where: str, leftovers: int) -> int:
    """The summary line, the failures (stderr and failed.jsonl) and the exit status.

    Every failure's reason is printed before failed.jsonl is written, and a list that cannot be written (the
    folder went read-only, the disk filled: the same fault that failed the items) is said, not raised: it
    used to end the run as "internal error (a bug)", exit 70, with no item's reason shown."""
    from ..fsutil import write_atomic
    from .stylize import failures_status

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
    records = [{"input": line.input, "reason": str(line), "bug": False} for line in problems]
    records += [{"input": o.src, "reason": o.reason, "bug": o.bug} for o in failed]
    failed_list = out_dir / FAILED_LIST
    box = [o.reason for o in failed if o.box]
    try:
        if records:
            write_atomic(failed_list, "".join(json.dumps(r) + "\n" for r in records).encode())
            where_listed = f"listed in {failed_list}"
        else:
            failed_list.unlink(missing_ok=True)  # an earlier run's list: those inputs are done now
    except OSError as exc:
        where_listed = f"not listed: {failed_list} could not be written: {exc.strerror or exc}"
        box.append(f"{failed_list}: {exc.strerror or exc}")
    if records:
        print(f"{len(records)} failed ({where_listed}):", file=sys.stderr)
        for record in records[:FAILURES_SHOWN]:
            print(f"  {record['reason']}", file=sys.stderr)
        if len(records) > FAILURES_SHOWN:
            print(f"  ... and {len(records) - FAILURES_SHOWN} more", file=sys.stderr)
    if missing:
        print(f"edge-anime batch: error: {missing} input(s) got no report from the job; run again to finish them",
              file=sys.stderr)
        return EXIT_FAILURES
    return failures_status("batch", out_dir, failures=len(records), bugs=sum(o.bug for o in failed), box=box)
