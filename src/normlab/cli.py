"""The ``normlab`` command: ``grade``, ``labs [--check]``, ``work``, ``progress``, ``release``, ``merge``,
``export``, ``translations``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _grade(args) -> int:
    import time

    from normlab.grader import report
    from normlab.grader.grade import (
        ResultCache,
        Settings,
        UsageError,
        default_jobs,
        find_submissions,
        grade_all,
        grader_fingerprint,
        parse_limit_overrides,
    )
    from normlab.grader.isolation.sandbox import IsolationError, choose_isolation
    from normlab.grader.registry import load_extra_checks

    started = time.monotonic()
    try:
        entries = find_submissions(args.paths, args.lab)
        total = len(entries)
        if args.shard:
            index, count = args.shard
            # Every n-th submission of the sorted list: shards are disjoint and cover the class
            # (an id depends on its path alone; `normlab merge` flags ids two shards share).
            positions = list(range(index - 1, total, count))
            entries = [entries[p] for p in positions]
        if args.extra_checks:
            if not Path(args.extra_checks).is_file():
                raise UsageError(f"no such file: {args.extra_checks}")
            load_extra_checks(Path(args.extra_checks))
        settings = Settings(
            timeout=args.timeout,
            memory_mb=args.memory,
            sandbox=args.sandbox,
            allow_root=args.allow_root,
            overrides=parse_limit_overrides(args.limit or []),
        )
        isolation = choose_isolation(settings.sandbox, settings.allow_root)
    except (UsageError, IsolationError) as error:
        from normlab.grader import inert

        print(f"normlab grade: {inert.text(error)}", file=sys.stderr)
        return 2
    # Every run says how it isolated the submissions (and each result records it).
    print(f"normlab grade: isolation: {isolation.description}", file=sys.stderr)
    cache_path = Path(args.cache) if args.cache else None
    if cache_path is None and args.csv:
        cache_path = Path(args.csv).with_name(Path(args.csv).name + ".cache.json")
    elif cache_path is None and args.feedback:
        cache_path = Path(args.feedback) / ".normlab-cache.json"
    cache = ResultCache(
        cache_path,
        grader_fingerprint(settings, args.extra_checks) + isolation.description,
        args.force,
    )

    counts = {"graded": 0, "reused": 0}
    bar = None
    if sys.stderr.isatty() and not args.json:
        from tqdm import tqdm

        bar = tqdm(total=len(entries), unit="notebook", file=sys.stderr)

    def on_result(result, reused):
        counts["reused" if reused else "graded"] += 1
        if bar is not None:
            bar.update(1)

    try:
        results = grade_all(
            entries, settings, args.jobs or default_jobs(), cache, on_result, isolation
        )
    except KeyboardInterrupt:
        print(
            f"\nnormlab grade: interrupted; {counts['graded']} finished results are saved"
            + (f" in {cache_path}; run the same command again to resume" if cache_path else ""),
            file=sys.stderr,
        )
        return 130
    finally:
        if bar is not None:
            bar.close()
    if args.csv:
        report.write_atomically(Path(args.csv), report.to_csv(results))
    if args.feedback:
        report.write_feedback(results, Path(args.feedback), args.lang)
    if args.json and args.shard:
        print(_shard_json(results, args.shard, total, positions, args.lang))
    elif args.json:
        print(report.to_json(results, args.lang))
    else:
        print(report.to_table(results, verbose=not args.quiet, lang=args.lang))
    elapsed = time.monotonic() - started
    print(
        f"graded {counts['graded']} notebook(s), reused {counts['reused']} unchanged from the "
        f"cache, in {elapsed:.1f} s",
        file=sys.stderr,
    )
    return 0


def _shard_json(results, shard, total, positions, lang=None) -> str:
    import json

    from normlab.grader import report

    payload = json.loads(report.to_json(results, lang))
    payload["shard"] = {
        "index": shard[0],
        "count": shard[1],
        "total": total,
        "positions": positions,
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _shard(text: str) -> tuple[int, int]:
    found = __import__("re").fullmatch(r"(\d+)/(\d+)", text)
    if not found or not 1 <= int(found.group(1)) <= int(found.group(2)):
        raise argparse.ArgumentTypeError("expected I/N with 1 <= I <= N, e.g. 2/8")
    return int(found.group(1)), int(found.group(2))


def _count(shard: dict, key: str, path: str) -> int:
    value = shard.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{path}: shard {key} is not a whole number")
    return value


def _merge(args) -> int:
    """Every field of every shard is checked, and the shards against each other, before
    anything is written: a refused merge leaves no gradebook, feedback or output behind."""
    import json

    from normlab.grader import inert, report

    slots: dict[int, object] = {}
    counts, totals, seen = set(), set(), set()
    try:
        for path in args.shards:
            shown = inert.text(path, lines=False)
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
            shard = payload.get("shard") if isinstance(payload, dict) else None
            submissions = payload.get("submissions") if isinstance(payload, dict) else None
            if not isinstance(shard, dict) or not isinstance(submissions, list):
                raise ValueError(f"{shown}: not the JSON of `normlab grade --shard I/N --json`")
            index, count = _count(shard, "index", shown), _count(shard, "count", shown)
            total, positions = _count(shard, "total", shown), shard.get("positions")
            if not 1 <= index <= count:
                raise ValueError(f"{shown}: shard {index}/{count} is not one of {count}")
            counts.add(count)
            totals.add(total)
            if index in seen:
                raise ValueError(f"shard {index}/{count} given twice")
            seen.add(index)
            if not isinstance(positions, list) or len(positions) != len(submissions):
                raise ValueError(f"{shown}: positions and submissions differ in number")
            for position, submission in zip(positions, submissions, strict=True):
                if (
                    not isinstance(position, int)
                    or isinstance(position, bool)
                    or not 0 <= position < total
                    or position % count != index - 1
                ):
                    raise ValueError(f"{shown}: position {position!r} is not one of this shard's")
                if position in slots:
                    raise ValueError(f"{shown}: position {position} is given twice")
                slots[position] = submission
    except (OSError, ValueError, RecursionError) as error:
        print(f"normlab merge: {inert.text(error)}", file=sys.stderr)
        return 2
    if len(counts) != 1 or len(totals) != 1:
        print("normlab merge: the shards come from different runs", file=sys.stderr)
        return 2
    (count,), (total,) = counts, totals
    missing = sorted(set(range(1, count + 1)) - seen)
    if missing or sorted(slots) != list(range(total)):
        print(f"normlab merge: missing shard(s) {missing} of {count}", file=sys.stderr)
        return 2
    from normlab.grader.identity import flag_conflicts

    try:
        results = report.results_from_json([slots[i] for i in range(total)])
    except ValueError as error:
        print(f"normlab merge: {inert.text(error)}", file=sys.stderr)
        return 2
    results = flag_conflicts(results, "normlab merge")
    # Everything is rendered before the first file is written.
    gradebook = report.to_csv(results) if args.csv else None
    shown = (
        report.to_json(results, args.lang)
        if args.json
        else report.to_table(results, verbose=not args.quiet, lang=args.lang)
    )
    if gradebook is not None:
        report.write_atomically(Path(args.csv), gradebook)
    if args.feedback:
        report.write_feedback(results, Path(args.feedback), args.lang)
    print(shown)
    return 0


def _export(args) -> int:
    import json

    from normlab.grader import inert, lms, report

    if args.format == "gradescope":
        from normlab.grader.gradescope import BundleError, write_bundle
        from normlab.grader.registry import all_labs

        if args.lab not in all_labs():
            print(f"normlab export: --lab must be one of {', '.join(all_labs())}", file=sys.stderr)
            return 2
        extra = Path(args.extra_checks) if args.extra_checks else None
        try:
            write_bundle(
                Path(args.out), args.lab, extra, args.extra_visibility, args.require_sandbox
            )
        except BundleError as error:
            print(f"normlab export: {error}", file=sys.stderr)
            return 2
        print(f"wrote the Gradescope autograder for {args.lab} to {args.out} (zip its contents)")
        return 0
    if not args.results:
        print("normlab export: give the graded results: --results grades.json", file=sys.stderr)
        return 2
    try:
        payload = json.loads(Path(args.results).read_text(encoding="utf-8"))
        if not isinstance(payload, dict):
            raise ValueError("not the JSON of `normlab grade --json`")
        # every field checked; a student may hand in a lab twice (the best score counts)
        results = report.results_from_json(payload.get("submissions"), unique=False)
    except (OSError, ValueError, RecursionError) as error:
        print(
            f"normlab export: cannot read {inert.text(args.results, lines=False)}: "
            f"{inert.text(error)}",
            file=sys.stderr,
        )
        return 2
    from normlab.grader.identity import warn_conflicts

    submissions = [result.as_dict() for result in results]
    warn_conflicts(lms.claims(submissions), "normlab export")
    out = Path(args.out)
    if args.format == "canvas":
        report.write_atomically(out, lms.canvas_csv(submissions))
    elif args.format == "summary":
        report.write_atomically(out, lms.class_summary(submissions))
    else:  # moodle: per lab, a grading worksheet and a feedback-files zip, all rendered first
        files: dict[Path, str | bytes] = {}
        for lab in sorted({s["lab"] for s in submissions if s.get("lab")}):
            files[out / f"moodle-{lab}.csv"] = lms.moodle_csv(submissions, lab)
            archive, left_out = lms.moodle_feedback_zip(results, lab)
            files[out / f"moodle-{lab}-feedback.zip"] = archive
            if left_out:
                print(
                    f"normlab export: {len(left_out)} submissions of {lab} have no Moodle "
                    "participant number, so no folder in the feedback zip: "
                    + ", ".join(inert.text(path, lines=False) for path in left_out),
                    file=sys.stderr,
                )
        for path, content in files.items():
            report.write_atomically(path, content)
    print(f"wrote {out}")
    return 0


def _labs(args) -> int:
    from normlab.build import build_all

    return build_all(Path(args.root), check=args.check, stems=args.stems)


def _work(args) -> int:
    from normlab.build import copy_missing_labs

    return copy_missing_labs(Path(args.root), args.folder, quiet=args.quiet)


def _progress(args) -> int:
    from normlab.progress import progress

    options = [
        flag
        for flag in ("--no-sandbox", "--allow-root")
        if getattr(args, flag[2:].replace("-", "_"))
    ]
    return progress(Path(args.root), args.folder, options)


def _release(args) -> int:
    from normlab.release import write_release

    return write_release(Path(args.root), Path(args.out), site=args.site)


def _translations(args) -> int:
    from normlab import translation

    root = Path(args.root)
    if args.action == "diff":
        if len(args.paths) != 1:
            print("normlab translations diff: name one Spanish file", file=sys.stderr)
            return 2
        path = Path(args.paths[0])
        path = path if path.is_absolute() else Path.cwd() / path
        print(translation.english_changes(root, path, (args.cell or [None])[0]))
        return 0
    if args.action == "stamp":
        if not args.paths:
            print("normlab translations stamp: name the Spanish file(s)", file=sys.stderr)
            return 2
        for raw in args.paths:
            path = Path(raw)
            if not path.is_absolute():
                path = Path.cwd() / path
            if path.suffix == ".json":
                stem = path.stem
                if not args.cell:
                    stale = translation.stale_catalog_cells(root, stem)
                    print(
                        f"normlab translations stamp: {raw}: give --cell ID for each cell you "
                        f"have updated (stale now: {', '.join(stale) or 'none'})",
                        file=sys.stderr,
                    )
                    return 2
                unknown = translation.stamp_catalog_cells(root, stem, args.cell)
                if unknown:
                    print(f"normlab translations stamp: no entry {unknown[0]}", file=sys.stderr)
                    return 2
                print(f"stamped {len(args.cell)} cell(s) of {raw}")
                continue
            try:
                translation.restamp(root, path)
            except (ValueError, OSError) as error:
                print(f"normlab translations stamp: {raw}: {error}", file=sys.stderr)
                return 2
            print(f"stamped {raw}")
        return 0
    problems = translation.edition_problems(root)
    missing = {stem: parts for stem, parts in translation.coverage(root).items() if parts}
    for stem, parts in missing.items():
        claimed = " (claimed in SPANISH_CHAPTERS!)" if stem in translation.SPANISH_CHAPTERS else ""
        print(f"not translated yet: {stem}: {', '.join(parts)}{claimed}")
    for problem in problems:
        print(problem, file=sys.stderr)
    claimed_missing = [s for s in missing if s in translation.SPANISH_CHAPTERS]
    if problems or claimed_missing:
        return 1
    print(
        f"the Spanish files are in step with the English ({len(translation.stamped_files(root))} stamped files)"
    )
    return 0


def skip_unused_iri_parser() -> None:
    """Skip an import that nothing here uses: 1.9 s of CPU in each command that reads notebooks.

    nbformat imports jsonschema, which imports its optional checker for the "iri" format
    (rfc3987-syntax 1.1), and that builds a Lark parser as it is imported. The notebook schemas
    have no "format" keyword, so no IRI is ever checked. A command is a process of its own;
    where jsonschema is already imported this changes nothing.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)


def main(argv: list[str] | None = None) -> int:
    skip_unused_iri_parser()
    from normlab.grader.i18n import LANGUAGES
    from normlab.grader.isolation.limits import DEFAULT as DEFAULT_LIMITS

    parser = argparse.ArgumentParser(prog="normlab", description="The normlab course tools.")
    commands = parser.add_subparsers(dest="command", required=True)

    grade = commands.add_parser(
        "grade",
        help="grade notebooks (each in its own sandboxed process)",
        description="Grade lab notebooks. PATH is a notebook or a folder searched for notebooks. "
        "The lab is --lab's, else the notebook's metadata's or its file name's (03_layernorm...). "
        "Exit status 0 whenever grading ran, whatever the scores; 2 for usage errors.",
    )
    grade.add_argument("paths", nargs="+", metavar="PATH")
    grade.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    grade.add_argument("--csv", metavar="FILE", help="write a CSV gradebook (atomically)")
    grade.add_argument(
        "--feedback", metavar="DIR", help="write DIR/STUDENT/LAB.md and .html for each submission"
    )
    grade.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_LIMITS.timeout,
        metavar="S",
        help=f"wall-time budget per submission in seconds (default {DEFAULT_LIMITS.timeout:g})",
    )
    grade.add_argument(
        "--memory",
        type=int,
        default=DEFAULT_LIMITS.memory_mb,
        metavar="MB",
        help=(
            f"memory limit in MB (default {DEFAULT_LIMITS.memory_mb}): where a cgroup can be "
            "made (the run's isolation line says 'one memory total per submission'), one total "
            f"of MB + tmp_mb ({DEFAULT_LIMITS.tmp_mb}) for all of a submission's processes and "
            "files together; without one, the address space of each of its processes, "
            "separately (docs/grading.md)"
        ),
    )
    grade.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="submissions graded at once (default: the number of CPU cores)",
    )
    grade.add_argument(
        "--cache",
        metavar="FILE",
        help="results cache for resuming (default: next to --csv, or in --feedback)",
    )
    grade.add_argument("--force", action="store_true", help="regrade everything, ignore the cache")
    grade.add_argument(
        "--limit",
        action="append",
        metavar="NAME=VALUE",
        help="set any limit of docs/grading.md's table (e.g. max_files=2000); repeatable",
    )
    grade.add_argument(
        "--extra-checks", metavar="FILE.py", help="add the instructor's checks from this file"
    )
    sandbox = grade.add_mutually_exclusive_group()
    sandbox.add_argument(
        "--sandbox",
        dest="sandbox",
        action="store_const",
        const=True,
        default=None,
        help="require bubblewrap: each notebook sees only the interpreter and the course "
        "package, read-only, no network, its own PIDs (the default where bwrap runs)",
    )
    sandbox.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_const",
        const=False,
        help="run notebooks as plain processes even where bubblewrap is installed",
    )
    grade.add_argument(
        "--allow-root",
        action="store_true",
        help="as root, run learner code as root where it cannot run as the user nobody "
        "(refused otherwise)",
    )
    grade.add_argument(
        "--lab",
        metavar="STEM",
        help="grade every notebook as this lab's assignment (e.g. 03_layernorm): a notebook "
        "whose metadata or file name says it is another lab gets 0 and is told so",
    )
    grade.add_argument("--quiet", action="store_true", help="table without the failed checks")
    grade.add_argument(
        "--lang",
        choices=LANGUAGES,
        help="language of the feedback, the table and JSON's lang (default: each notebook's "
        "metadata.normlab.lang, else NORMLAB_LANG, else en); the CSV stays in English",
    )
    grade.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="grade only every N-th submission starting at the I-th (1-based); with --json, "
        "`normlab merge` joins the N outputs into the one-run gradebook",
    )
    grade.set_defaults(run=_grade)

    merge = commands.add_parser(
        "merge", help="join the --json outputs of `normlab grade --shard I/N` into one gradebook"
    )
    merge.add_argument("shards", nargs="+", metavar="SHARD.json")
    merge.add_argument("--json", action="store_true", help="print the merged JSON on stdout")
    merge.add_argument("--csv", metavar="FILE", help="write the CSV gradebook (atomically)")
    merge.add_argument("--feedback", metavar="DIR", help="write the per-student feedback")
    merge.add_argument("--quiet", action="store_true", help="table without the failed checks")
    merge.add_argument(
        "--lang",
        choices=LANGUAGES,
        help="language of the feedback, the table and JSON's lang (default: each notebook's "
        "metadata.normlab.lang, else NORMLAB_LANG, else en); the CSV stays in English",
    )
    merge.set_defaults(run=_merge)

    export = commands.add_parser(
        "export",
        help="gradebooks for Canvas, Moodle, a class summary; a Gradescope autograder",
        description="canvas OUT.csv / moodle OUTDIR / summary OUT.csv read --results (the JSON "
        "of `normlab grade --json` or `normlab merge --json`; moodle writes, per lab, the "
        "grading worksheet moodle-LAB.csv and the feedback-files zip moodle-LAB-feedback.zip); "
        "gradescope OUTDIR --lab STEM writes an autograder bundle.",
    )
    export.add_argument("format", choices=["canvas", "moodle", "summary", "gradescope"])
    export.add_argument("out", metavar="OUT")
    export.add_argument("--results", metavar="FILE.json", help="graded results (JSON)")
    export.add_argument("--lab", help="gradescope: the lab this assignment is (e.g. 03_layernorm)")
    export.add_argument("--extra-checks", metavar="FILE.py", help="gradescope: hidden checks")
    export.add_argument(
        "--extra-visibility",
        choices=["visible", "after_due_date", "after_published", "hidden"],
        default="after_due_date",
        help="gradescope: when students see the hidden checks' results (default after_due_date)",
    )
    export.add_argument(
        "--require-sandbox",
        action="store_true",
        help="gradescope: grade only under bubblewrap (no grade where the container forbids it)",
    )
    export.set_defaults(run=_export)

    from normlab.grader import instructor

    instructor.add_commands(
        commands.add_parser(
            "report",
            help="for the instructor: the class report, the similarity report, the Canvas push",
        )
    )

    labs = commands.add_parser("labs", help="generate labs/ from solutions/ (or --check staleness)")
    labs.add_argument(
        "stems", nargs="*", metavar="STEM", help="only these labs (e.g. 03_layernorm); default: all"
    )
    labs.add_argument("--check", action="store_true", help="exit 1 if labs/ is not up to date")
    labs.add_argument("--root", default=".", help="the course checkout (default: .)")
    labs.set_defaults(run=_labs)

    work = commands.add_parser(
        "work",
        help="copy each lab you have no copy of yet into work/ (never overwrites a file)",
    )
    work.add_argument("--root", default=".", help="the course checkout (default: .)")
    work.add_argument(
        "--folder", default="work", help="your folder, under the root (default: work)"
    )
    work.add_argument("--quiet", action="store_true", help="print nothing")
    work.set_defaults(run=_work)

    progress = commands.add_parser(
        "progress",
        help="your progress: one line per lab you started in work/ (and work/es/), graded",
    )
    progress.add_argument("--root", default=".", help="the course checkout (default: .)")
    progress.add_argument(
        "--folder", default="work", help="your folder, under the root (default: work)"
    )
    progress.add_argument(
        "--no-sandbox", action="store_true", help="as `normlab grade --no-sandbox`"
    )
    progress.add_argument("--allow-root", action="store_true", help="as `normlab grade`")
    progress.set_defaults(run=_progress)

    release = commands.add_parser(
        "release",
        help="write the student edition (no solutions, no answers, hashed keys) into OUT",
    )
    release.add_argument("out", metavar="OUT", help="a new or empty folder")
    release.add_argument("--root", default=".", help="the course checkout (default: .)")
    release.add_argument(
        "--site",
        action="store_true",
        help="also build the edition's website (no worked solutions) into OUT/_site",
    )
    release.set_defaults(run=_release)

    translations = commands.add_parser(
        "translations",
        help="check the Spanish edition against the English, or restamp an updated translation",
        description="check (default): stale stamps, parity (headings, equations, numbers, code, "
        "figures, links), broken links, incomplete lab catalogs. stamp FILE...: record the "
        "English file's current hash in an updated Spanish file; for a catalog "
        "(es/catalog/STEM.json) give --cell ID for each updated cell. diff FILE [--cell ID]: "
        "what changed in the English since the version the Spanish file (or cell) translates.",
    )
    translations.add_argument(
        "action", nargs="?", choices=["check", "diff", "stamp"], default="check"
    )
    translations.add_argument("paths", nargs="*", metavar="FILE")
    translations.add_argument("--cell", action="append", metavar="ID", help="catalog cell id")
    translations.add_argument("--root", default=".", help="the course checkout (default: .)")
    translations.set_defaults(run=_translations)

    args = parser.parse_args(argv)
    if args.command == "grade":
        if args.timeout <= 0 or args.memory <= 0 or args.jobs < 0:
            parser.error("--timeout and --memory must be positive, --jobs at least 0")
    try:
        return args.run(args)
    except BrokenPipeError:  # `normlab grade ... | head`: the reader left; nothing to report
        sys.stdout = None
        return 0


if __name__ == "__main__":
    sys.exit(main())
