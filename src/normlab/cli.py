"""The ``normlab`` command: ``grade``, ``merge``, ``export``, ``labs [--check]``, ``work``,
``progress``, ``release``, ``translations``.

The command is data: :data:`COMMANDS` holds one :class:`Command` per subcommand (its name, help,
description, arguments and the function that runs it), at the end of this file, and
:func:`parser` builds argparse's parser from that table. ``grade`` and ``merge`` share the
options that show their results (:data:`QUIET`, :data:`LANG`) and deliver them with one function
(:func:`_deliver`); ``export``'s choices, options and description come from the exports' table,
``normlab.instructor.exports``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from normlab.grader.i18n import LANGUAGES
from normlab.grader.isolation.limits import DEFAULT as DEFAULT_LIMITS
from normlab.instructor import exports
from normlab.startup import skip_unused_iri_parser

# ----------------------------------------------------------------------------- arguments and commands


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument: argparse's names (a positional's name, or the flags) and settings."""

    names: tuple[str, ...]
    settings: dict

    def add_to(self, parser) -> None:
        parser.add_argument(*self.names, **self.settings)


def arg(*names: str, **settings) -> Arg:
    return Arg(names, settings)


@dataclasses.dataclass(frozen=True)
class Either:
    """Arguments of which at most one may be given (argparse's mutually exclusive group)."""

    choices: tuple[Arg, ...]

    def add_to(self, parser) -> None:
        group = parser.add_mutually_exclusive_group()
        for choice in self.choices:
            choice.add_to(group)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    run: Callable[[argparse.Namespace], int] | None
    help: str
    #: the arguments, or a function that gives them when the parser is built (``export``'s
    #: are read from the exports' table then)
    arguments: tuple[Arg | Either, ...] | Callable[[], tuple[Arg | Either, ...]]
    description: str | Callable[[], str] | None = None
    #: checks of the parsed arguments beyond argparse's: a message for ``parser.error``, or None
    validate: Callable[[argparse.Namespace], str | None] | None = None
    #: for a command with commands of its own (``report``): adds them to its parser, each
    #: setting its own ``run`` (``run`` above is then None)
    build: Callable[[argparse.ArgumentParser], None] | None = None


# ----------------------------------------------------------------------------- grade and merge


def _deliver(results, args, shown_json: str | None = None) -> None:
    """What ``grade`` and ``merge`` do with their results: everything is rendered before the
    first file is written, then the CSV gradebook, the feedback, and the JSON or table on
    stdout. ``shown_json`` replaces the plain JSON (a shard's carries its place in the run)."""
    from normlab.instructor import report

    gradebook = report.to_csv(results) if args.csv else None
    if args.json:
        shown = shown_json or report.to_json(results, args.lang)
    else:
        shown = report.to_table(results, verbose=not args.quiet, lang=args.lang)
    if gradebook is not None:
        report.write_atomically(Path(args.csv), gradebook)
    if args.feedback:
        report.write_feedback(results, Path(args.feedback), args.lang)
    print(shown)


def _grade_plan(args):
    """The submissions to grade (this shard's), every shard position, the class's size, the
    settings and the isolation. Raises UsageError or IsolationError."""
    from normlab.grader.grade import (
        Settings,
        UsageError,
        default_jobs,
        find_submissions,
        import_oracle_in_background,
        parse_limit_overrides,
        probe_isolation,
    )
    from normlab.grader.registry import load_extra_checks

    entries = find_submissions(args.paths, args.lab)
    total, positions = len(entries), None
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
    # PyTorch is imported while the probes run, unless the cache may answer for every notebook
    # (a run that grades one notebook at a time imports it only when a check needs it). For a
    # class, before grading starts (its worker threads then never import it); one notebook at a
    # time is graded while it is imported (its child's start-up and cells overlap the import),
    # unless every notebook is of a NumPy lab: the oracle's memo answers a right answer's checks
    # without PyTorch (``grader.memo``), and a miss imports it then. A course without the memo
    # (the student edition) imports it for every lab.
    cache = _cache_path(args)
    jobs = args.jobs or default_jobs()
    reusable = cache is not None and cache.exists() and not args.force
    one_at_a_time = jobs == 1 or len(entries) == 1
    if not reusable and one_at_a_time and _oracle_may_need_torch(entries):
        import_oracle_in_background()
    isolation = probe_isolation(settings, import_oracle=not one_at_a_time)
    return entries, positions, total, settings, isolation


def _oracle_may_need_torch(entries) -> bool:
    """Whether grading ``entries`` may import PyTorch for the oracle however right the answers:
    the course carries no oracle's memo (the student edition: every oracle call is then a miss),
    or a notebook's lab may need it (``_may_need_torch``). Asks for the memo once a run."""
    from normlab.grader import memo

    return not memo.shipped() or any(map(_may_need_torch, entries))


def _may_need_torch(entry) -> bool:
    """Whether grading ``entry`` may import PyTorch for its oracle however right its answers
    (where the course carries the oracle's memo): its lab, as known before the notebook is
    read, is written in PyTorch, or is not known."""
    from normlab.grader.registry import all_labs

    lab = all_labs().get(entry.identity.lab or "")
    return lab is None or lab.torch


def _cache_path(args) -> Path | None:
    """``--cache``, else next to ``--csv``, else in ``--feedback``; None: no cache."""
    if args.cache:
        return Path(args.cache)
    if args.csv:
        return Path(args.csv).with_name(Path(args.csv).name + ".cache.json")
    if args.feedback:
        return Path(args.feedback) / ".normlab-cache.json"
    return None


def _grade(args) -> int:
    import shutil
    import time

    from normlab.grader.isolation import workspace

    # The probes of what this machine allows run beside the grader's own start-up below; the
    # longest of a run without the sandbox needs only ``workspace`` and starts before it all.
    if args.sandbox is False or (args.sandbox is None and shutil.which("bwrap") is None):
        workspace.start_probe()
    from normlab.grader.isolation.sandbox import start_probes

    start_probes(args.sandbox)
    from normlab.grader import inert
    from normlab.grader.grade import (
        ResultCache,
        UsageError,
        default_jobs,
        grade_all,
        grader_fingerprint,
    )
    from normlab.grader.isolation.sandbox import IsolationError

    started = time.monotonic()
    try:
        entries, positions, total, settings, isolation = _grade_plan(args)
    except (UsageError, IsolationError) as error:
        print(f"normlab grade: {inert.text(error)}", file=sys.stderr)
        return 2
    # Every run says how it isolated the submissions (and each result records it).
    from normlab.instructor import report

    print(report.isolation_line(isolation.description, args.lang), file=sys.stderr)
    cache_path = _cache_path(args)
    fingerprint = grader_fingerprint(settings, args.extra_checks) + isolation.description
    cache = ResultCache(cache_path, fingerprint, args.force)
    counts = {"graded": 0, "reused": 0}
    bar = None
    if sys.stderr.isatty() and not args.json:
        from tqdm import tqdm

        bar = tqdm(total=len(entries), unit="notebook", file=sys.stderr)

    def on_result(result, reused):
        counts["reused" if reused else "graded"] += 1
        if bar is not None:
            bar.update(1)

    jobs = args.jobs or default_jobs()
    try:
        results = grade_all(entries, settings, jobs, cache, on_result, isolation)
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
    shard = args.json and args.shard
    _deliver(
        results,
        args,
        _shard_json(results, args.shard, total, positions, args.lang) if shard else None,
    )
    elapsed = time.monotonic() - started
    line = report.graded_line(results, counts["graded"], counts["reused"], elapsed, args.lang)
    print(line, file=sys.stderr)
    return 0


def _shard_json(results, shard, total, positions, lang=None) -> str:
    import json

    from normlab.instructor import report

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


def _read_shards(paths: list[str]) -> tuple[dict[int, object], set, set, set]:
    """Every shard's submissions by position, and the counts, totals and indexes the shards
    claim. Raises OSError, ValueError or RecursionError at the first field that is wrong."""
    import json

    from normlab.grader import inert

    slots: dict[int, object] = {}
    counts, totals, seen = set(), set(), set()
    for path in paths:
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
    return slots, counts, totals, seen


def _merge(args) -> int:
    """Every field of every shard is checked, and the shards against each other, before
    anything is written: a refused merge leaves no gradebook, feedback or output behind."""
    from normlab.grader import inert
    from normlab.grader.identity import flag_conflicts
    from normlab.grader.results import results_from_json

    try:
        slots, counts, totals, seen = _read_shards(args.shards)
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
    try:
        results = results_from_json([slots[i] for i in range(total)])
    except ValueError as error:
        print(f"normlab merge: {inert.text(error)}", file=sys.stderr)
        return 2
    _deliver(flag_conflicts(results, "normlab merge"), args)
    return 0


# ----------------------------------------------------------------------------- export


def _export(args) -> int:
    """The export of ``normlab.instructor.exports.EXPORTS`` named ``format``, with its options."""
    from normlab.instructor.exports import EXPORTS, ExportError

    export = EXPORTS[args.format]
    results = None
    if export.reads_results:
        results = _read_results(args.results)
        if results is None:
            return 2
    try:
        options = {option.dest: getattr(args, option.dest) for option in export.options}
        print(export.write(Path(args.out), results, options))
    except ExportError as error:
        print(f"normlab export: {error}", file=sys.stderr)
        return 2
    return 0


def _read_results(path: str | None) -> list | None:
    """The checked results of ``--results``; None (after saying why on stderr) when there are
    none to read. An id that several submissions of one lab claim is warned about here."""
    import json

    from normlab.grader import inert
    from normlab.grader.identity import warn_conflicts
    from normlab.grader.results import results_from_json
    from normlab.instructor import lms

    if not path:
        print("normlab export: give the graded results: --results grades.json", file=sys.stderr)
        return None
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(payload, dict):
            raise ValueError("not the JSON of `normlab grade --json`")
        # every field checked; a student may hand in a lab twice (the best score counts)
        results = results_from_json(payload.get("submissions"), unique=False)
    except (OSError, ValueError, RecursionError) as error:
        print(
            f"normlab export: cannot read {inert.text(path, lines=False)}: {inert.text(error)}",
            file=sys.stderr,
        )
        return None
    warn_conflicts(lms.claims([result.as_dict() for result in results]), "normlab export")
    return results


# ----------------------------------------------------------------------------- the others


def _labs(args) -> int:
    from normlab.build import build_all

    return build_all(Path(args.root), check=args.check, stems=args.stems)


def _work(args) -> int:
    from normlab.build import copy_missing_labs

    return copy_missing_labs(Path(args.root), args.folder, quiet=args.quiet)


def _progress(args) -> int:
    from normlab.grader.grade import Settings
    from normlab.progress import progress

    sandbox = False if args.no_sandbox else None  # as `normlab grade --no-sandbox`, or its default
    return progress(
        Path(args.root), args.folder, Settings(sandbox=sandbox, allow_root=args.allow_root)
    )


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


# ----------------------------------------------------------------------------- the table

LANG_HELP = (
    "language of the feedback, the table and JSON's lang (default: each notebook's "
    "metadata.normlab.lang, else NORMLAB_LANG, else en); the CSV stays in English"
)
ROOT_OPTION = arg("--root", default=".", help="the course checkout (default: .)")
FOLDER_OPTION = arg("--folder", default="work", help="your folder, under the root (default: work)")


#: how ``grade`` and ``merge`` show the results (both deliver them with :func:`_deliver`)
QUIET = arg("--quiet", action="store_true", help="table without the failed checks")
LANG = arg("--lang", choices=LANGUAGES, help=LANG_HELP)


def limit_help() -> str:
    """The help of ``grade --limit``: the one place it is written (it may list ``Limits``'
    fields, which carry their own units and help)."""
    from normlab.grader.isolation.limits import option_help

    return option_help()


GRADE_ARGUMENTS = (
    arg("paths", nargs="+", metavar="PATH"),
    arg("--json", action="store_true", help="print one JSON object on stdout"),
    arg("--csv", metavar="FILE", help="write a CSV gradebook (atomically)"),
    arg(
        "--feedback",
        metavar="DIR",
        help="write DIR/STUDENT/LAB.md and .html for each submission",
    ),
    arg(
        "--timeout",
        type=float,
        default=DEFAULT_LIMITS.timeout,
        metavar="S",
        help=f"time budget per submission in seconds, its own time: CPU, or wall time less its "
        f"waits for a CPU (default {DEFAULT_LIMITS.timeout:g}; wall time only as a backstop, "
        f"{DEFAULT_LIMITS.wall_backstop:g} times it)",
    ),
    arg(
        "--memory",
        type=int,
        default=DEFAULT_LIMITS.memory_mb,
        metavar="MB",
        help=(
            f"memory limit in MB (default {DEFAULT_LIMITS.memory_mb}): where a cgroup can be "
            "made (the run's isolation line says 'one memory total per submission'), one "
            f"total of MB + tmp_mb ({DEFAULT_LIMITS.tmp_mb}) for all of a submission's processes "
            "and files together; without one, the address space of each of its processes, "
            "separately (docs/grading.md)"
        ),
    ),
    arg(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="submissions graded at once (default: the number of CPU cores)",
    ),
    arg(
        "--cache",
        metavar="FILE",
        help="results cache for resuming (default: next to --csv, or in --feedback)",
    ),
    arg("--force", action="store_true", help="regrade everything, ignore the cache"),
    arg("--limit", action="append", metavar="NAME=VALUE", help=limit_help()),
    arg("--extra-checks", metavar="FILE.py", help="add the instructor's checks from this file"),
    Either(
        (
            arg(
                "--sandbox",
                dest="sandbox",
                action="store_const",
                const=True,
                default=None,
                help="require bubblewrap: each notebook sees only the interpreter and the "
                "course package, read-only, no network, its own PIDs (the default where "
                "bwrap runs)",
            ),
            arg(
                "--no-sandbox",
                dest="sandbox",
                action="store_const",
                const=False,
                help="run notebooks as plain processes even where bubblewrap is installed",
            ),
        )
    ),
    arg(
        "--allow-root",
        action="store_true",
        help="as root, run learner code as root where it cannot run as the user nobody "
        "(refused otherwise)",
    ),
    arg(
        "--lab",
        metavar="STEM",
        help="grade every notebook as this lab's assignment (e.g. 03_layernorm): a notebook "
        "whose metadata or file name says it is another lab gets 0 and is told so",
    ),
    QUIET,
    LANG,
    arg(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="grade only every N-th submission starting at the I-th (1-based); with "
        "--json, `normlab merge` joins the N outputs into the one-run gradebook",
    ),
)


MERGE_ARGUMENTS = (
    arg("shards", nargs="+", metavar="SHARD.json"),
    arg("--json", action="store_true", help="print the merged JSON on stdout"),
    arg("--csv", metavar="FILE", help="write the CSV gradebook (atomically)"),
    arg("--feedback", metavar="DIR", help="write the per-student feedback"),
    QUIET,
    LANG,
)


def _export_arguments() -> tuple[Arg, ...]:
    """``export``'s arguments: the exports' names, and each option an export reads, its help
    prefixed with the exports that read it."""
    options = {}  # flag -> (the exports that read it, its settings)
    for export in exports.EXPORTS.values():
        for option in export.options:
            names, settings = options.setdefault(option.flag, ([], option.settings))
            names.append(export.name)
    return (
        arg("format", choices=list(exports.EXPORTS)),
        arg("out", metavar="OUT"),
        arg("--results", metavar="FILE.json", help="graded results (JSON)"),
        *(
            arg(flag, **{**settings, "help": f"{', '.join(names)}: {settings['help']}"})
            for flag, (names, settings) in options.items()
        ),
    )


def _positive_limits(args) -> str | None:
    if args.timeout <= 0 or args.memory <= 0 or args.jobs < 0:
        return "--timeout and --memory must be positive, --jobs at least 0"
    return None


def _instructor():
    from normlab.instructor import commands as instructor

    return instructor


#: every subcommand, in the order ``normlab --help`` lists them
COMMANDS = (
    Command(
        "grade",
        _grade,
        "grade notebooks (each in its own sandboxed process)",
        GRADE_ARGUMENTS,
        description="Grade lab notebooks. PATH is a notebook or a folder searched for "
        "notebooks. The lab is --lab's, else the notebook's metadata's or its file name's "
        "(03_layernorm...). Exit status 0 whenever grading ran, whatever the scores; 2 for "
        "usage errors.",
        validate=_positive_limits,
    ),
    Command(
        "merge",
        _merge,
        "join the --json outputs of `normlab grade --shard I/N` into one gradebook",
        MERGE_ARGUMENTS,
    ),
    Command(
        "export",
        _export,
        "gradebooks for Canvas, Moodle, a class summary; a Gradescope autograder",
        _export_arguments,
        description=exports.description,
    ),
    Command(
        "report",
        None,
        "for the instructor: the class report, the similarity report, the Canvas push",
        (),
        build=lambda parser: _instructor().add_commands(parser),
    ),
    Command(
        "labs",
        _labs,
        "generate labs/ from solutions/ (or --check staleness)",
        (
            arg(
                "stems",
                nargs="*",
                metavar="STEM",
                help="only these labs (e.g. 03_layernorm); default: all",
            ),
            arg("--check", action="store_true", help="exit 1 if labs/ is not up to date"),
            ROOT_OPTION,
        ),
    ),
    Command(
        "work",
        _work,
        "copy each lab you have no copy of yet into work/ (never overwrites a file)",
        (ROOT_OPTION, FOLDER_OPTION, arg("--quiet", action="store_true", help="print nothing")),
    ),
    Command(
        "progress",
        _progress,
        "your progress: one line per lab you started in work/ (and work/es/), graded",
        (
            ROOT_OPTION,
            FOLDER_OPTION,
            arg("--no-sandbox", action="store_true", help="as `normlab grade --no-sandbox`"),
            arg("--allow-root", action="store_true", help="as `normlab grade`"),
        ),
    ),
    Command(
        "release",
        _release,
        "write the student edition (no solutions, no answers, hashed keys) into OUT",
        (
            arg("out", metavar="OUT", help="a new or empty folder"),
            ROOT_OPTION,
            arg(
                "--site",
                action="store_true",
                help="also build the edition's website (no worked solutions) into OUT/_site",
            ),
        ),
    ),
    Command(
        "translations",
        _translations,
        "check the Spanish edition against the English, or restamp an updated translation",
        (
            arg("action", nargs="?", choices=["check", "diff", "stamp"], default="check"),
            arg("paths", nargs="*", metavar="FILE"),
            arg("--cell", action="append", metavar="ID", help="catalog cell id"),
            ROOT_OPTION,
        ),
        description="check (default): stale stamps, parity (headings, equations, numbers, "
        "code, figures, links), broken links, incomplete lab catalogs. stamp FILE...: record "
        "the English file's current hash in an updated Spanish file; for a catalog "
        "(es/catalog/STEM.json) give --cell ID for each updated cell. diff FILE [--cell ID]: "
        "what changed in the English since the version the Spanish file (or cell) translates.",
    ),
)


def parser() -> argparse.ArgumentParser:
    """argparse's parser for the table :data:`COMMANDS`."""
    top = argparse.ArgumentParser(prog="normlab", description="The normlab course tools.")
    subparsers = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        description, arguments = command.description, command.arguments
        sub = subparsers.add_parser(
            command.name,
            help=command.help,
            description=description() if callable(description) else description,
        )
        for argument in arguments() if callable(arguments) else arguments:
            argument.add_to(sub)
        if command.build is not None:
            command.build(sub)
            sub.set_defaults(validate=command.validate)
        else:
            sub.set_defaults(run=command.run, validate=command.validate)
    return top


def main(argv: list[str] | None = None) -> int:
    skip_unused_iri_parser()
    top = parser()
    args = top.parse_args(argv)
    problem = args.validate(args) if args.validate else None
    if problem:
        top.error(problem)
    try:
        return args.run(args)
    except BrokenPipeError:  # `normlab grade ... | head`: the reader left; nothing to report
        sys.stdout = None
        return 0


if __name__ == "__main__":
    sys.exit(main())
