"""``normlab report class | similarity | canvas``: the instructor's views of a graded class.

One table of sub-commands (the CLI and the docs read it); each runs a function of its own
module, imported only when it runs.
"""

from __future__ import annotations

import argparse


def _run(module: str):
    def run(args) -> int:
        import importlib

        return importlib.import_module(f"normlab.instructor.{module}").run(args)

    return run


def add_commands(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    summary = kinds.add_parser(
        "class",
        help="per check the pass rate, per misconception the students, the scores, who is "
        "missing: class-report.{json,md,html} from `normlab grade --json` (nothing regraded)",
    )
    summary.add_argument("results", metavar="RESULTS.json", help="normlab grade --json")
    summary.add_argument("out", metavar="OUTDIR", help="class-report.{json,md,html} go here")
    summary.add_argument("--roster", metavar="FILE.csv", help="the ids expected (a column id)")
    summary.set_defaults(run=_run("classreport"))

    similar = kinds.add_parser(
        "similarity",
        help="rank pairs of answers that share unusual code (flags for review, no verdict)",
    )
    similar.add_argument("paths", nargs="+", metavar="SUBMISSIONS")
    similar.add_argument("--lab", required=True, help="the lab (e.g. 04_rmsnorm)")
    similar.add_argument("--out", required=True, metavar="DIR", help="similarity.{json,html}")
    similar.add_argument(
        "--starter",
        metavar="LAB.ipynb",
        help="the lab as handed out (default: labs/LAB.ipynb here, else in the course checkout "
        "normlab is installed from)",
    )
    similar.add_argument(
        "--common",
        type=float,
        default=0.25,
        help="ignore code that more than this share of the students wrote (a student counted "
        "once, however many notebooks; default 0.25)",
    )
    similar.add_argument("--top", type=int, default=20, help="pairs shown side by side")
    similar.add_argument(
        "--limit",
        action="append",
        metavar="NAME=VALUE",
        help="a limit of docs/grading.md's table, as `normlab grade --limit` takes it: the "
        "token bounds max_cell_tokens and max_code_tokens are those the report parses within",
    )
    similar.set_defaults(run=_run("similarity"))

    canvas = kinds.add_parser(
        "canvas",
        help="post each student's score and a feedback comment, with the HTML feedback page "
        "attached, to a Canvas assignment (REST API; token from CANVAS_TOKEN or --token-file; "
        "reruns post nothing new)",
    )
    canvas.add_argument("results", metavar="RESULTS.json", help="normlab grade --json")
    canvas.add_argument("--lab", required=True, help="the lab this assignment is")
    canvas.add_argument("--url", required=True, help="https://canvas.example.edu")
    canvas.add_argument("--course", required=True, help="the course's number in Canvas")
    canvas.add_argument("--assignment", required=True, help="the assignment's number")
    canvas.add_argument("--token-file", metavar="FILE", help="default: $CANVAS_TOKEN")
    canvas.add_argument(
        "--roster",
        metavar="FILE.csv",
        help="columns student,canvas_user_id: the Canvas user of each id that is not from "
        "Canvas's own download (only those ids are pushed otherwise)",
    )
    canvas.add_argument(
        "--scale",
        action="store_true",
        help="post each score scaled to the assignment's points in Canvas (without it, an "
        "assignment whose points are not the lab's is refused)",
    )
    canvas.add_argument("--dry-run", action="store_true", help="print the requests, send none")
    canvas.set_defaults(run=_run("canvas"))
