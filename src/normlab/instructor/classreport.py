"""The class report: what a class got right and wrong, from the results grading cached.

``normlab report class graded.json OUTDIR`` reads the JSON of ``normlab grade --json`` (or ``merge
--json``), regrades nothing, and writes ``class-report.json`` (for scripts), ``class-report.md``
and ``class-report.html`` (one page, its plots inlined as PNG ``data:`` URIs, no script, no
network). Per lab: the score distribution, each check's pass rate, each known misconception
(probe) with the number of students whose answers matched it and its hint, the notebooks that
did not run, and the students who handed in nothing (against ``--roster`` when given).

A student who handed in a lab twice counts once, with the better submission (as the exports).
Everything a submission wrote (ids, names, paths, error messages) is escaped at every exit.
The output depends on the results alone: the same file gives byte-identical pages.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import statistics
import sys
from pathlib import Path

from normlab.grader import inert
from normlab.grader.results import SubmissionResult

TITLE = "Class report"
SECTIONS = [
    ("did_not_run", "Did not run (no points, an error)"),
    ("stopped", "Stopped in some cells (graded as far as it ran)"),
]


# ----------------------------------------------------------------------------- the numbers


def _who(result: SubmissionResult) -> str:
    return result.student or result.path


def best_per_student(results: list[SubmissionResult], lab: str) -> list[SubmissionResult]:
    """One result per student of ``lab``: the best score, the first path among equals."""
    best: dict[str, SubmissionResult] = {}
    for result in sorted((r for r in results if r.lab == lab), key=lambda r: r.path):
        kept = best.get(_who(result))
        if kept is None or result.score > kept.score:
            best[_who(result)] = result
    return [best[who] for who in sorted(best)]


def probe_hints(lab: str) -> dict[str, str]:
    """Probe name -> hint, from the lab's check module (never from the results file)."""
    from normlab.grader.registry import all_labs

    known = all_labs().get(lab)
    if known is None or not known.checks:
        return {}
    module = sys.modules.get(known.checks[0].function.__module__)
    hints: dict[str, str] = {}
    for probes in getattr(module, "PROBES", {}).values():
        for probe in probes:
            hints.setdefault(probe.name, probe.hint)
    for slip in getattr(module, "SLIPS", ()):
        hints.setdefault(getattr(slip, "name", ""), getattr(slip, "hint", ""))
    return hints


def read_roster(path: Path) -> list[str]:
    """Student ids, one per row: the column headed ``id``, ``ID``, ``student`` or
    ``Participant`` when the first row has one, else the first column of every row."""
    rows = [row for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))) if row]
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0]]
    for name in ("id", "student", "participant", "sis user id"):
        if name in header:
            column = header.index(name)
            ids = [row[column].strip() for row in rows[1:] if len(row) > column]
            break
    else:
        ids = [row[0].strip() for row in rows]
    # Moodle's worksheet writes "Participant 1234"; the grader's id is 1234
    ids = [i.removeprefix("Participant ").strip() for i in ids]
    return sorted({i for i in ids if i})


#: the most characters of an error a report entry quotes
ERROR_CHARS = 400


def shorten(text: str, most: int = ERROR_CHARS) -> str:
    """``text`` cut to at most ``most`` characters at a word's end, marked with "…"."""
    if len(text) <= most:
        return text
    cut = text[: most - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > most // 2 else cut).rstrip(" ,;:") + "…"


def _problem(result: SubmissionResult) -> dict:
    """Who (the id, and the name where the LMS gave one), and the error's first two lines (its
    heading and the first cell that stopped), cut at a word's end."""
    first = " ".join((result.error or "").split("\n")[:2])
    name = result.name if result.name and result.name != result.student else None
    return {"student": result.student, "name": name, "path": result.path, "error": shorten(first)}


def _shown(entry: dict) -> str:
    """``Carol Diaz (1234)`` where the LMS gave a name, else the id."""
    student = entry["student"] or ""
    return f"{entry['name']} ({student})" if entry.get("name") else student


def summarise(results: list[SubmissionResult], roster: list[str] | None = None) -> dict:
    """The class report as data (what ``class-report.json`` holds)."""
    # who should have handed in: the roster, else every student seen in any lab
    everyone = roster if roster is not None else sorted({r.student for r in results if r.student})
    labs = []
    for lab in sorted({r.lab for r in results if r.lab}):
        kept = best_per_student(results, lab)
        hints = probe_hints(lab)
        scores = [r.score for r in kept]
        most = max((r.max_score for r in kept), default=0)
        checks: dict[str, dict] = {}
        probes: dict[str, dict] = {}
        for result in kept:
            seen_here: set[str] = set()
            for check in result.checks:
                row = checks.setdefault(
                    check.name,
                    {"name": check.name, "max_points": check.max_points, "passed": 0, "of": 0},
                )
                row["of"] += 1
                row["passed"] += int(check.passed)
                for name in check.probes:
                    entry = probes.setdefault(
                        name,
                        {"name": name, "hint": hints.get(name, ""), "students": 0, "checks": {}},
                    )
                    entry["checks"][check.name] = entry["checks"].get(check.name, 0) + 1
                    if name not in seen_here:
                        entry["students"] += 1
                        seen_here.add(name)
        for row in checks.values():
            row["pass_rate"] = round(row["passed"] / row["of"], 4) if row["of"] else 0.0
        handed_in = {_who(r) for r in kept}
        labs.append(
            {
                "lab": lab,
                "max_score": most,
                "students": len(kept),
                "submissions": sum(1 for r in results if r.lab == lab),
                "scores": {
                    "median": statistics.median(scores) if scores else None,
                    "mean": round(statistics.fmean(scores), 2) if scores else None,
                    "full_marks": sum(1 for s in scores if s == most and most),
                    "zero": sum(1 for s in scores if s == 0),
                    "histogram": [[s, scores.count(s)] for s in sorted(set(scores))],
                },
                "checks": list(checks.values()),
                "probes": sorted(probes.values(), key=lambda p: (-p["students"], p["name"])),
                # no points and an error: the notebook could not be run at all
                "did_not_run": [_problem(r) for r in kept if r.error and r.score == 0],
                # an error and some points: some cells stopped, the rest was graded
                "stopped": [_problem(r) for r in kept if r.error and r.score > 0],
                "not_submitted": [who for who in everyone if who not in handed_in],
            }
        )
    return {"roster": len(roster) if roster is not None else None, "labs": labs}


# ----------------------------------------------------------------------------- the plot


def histogram_png(lab: dict) -> bytes:
    """The score distribution as a PNG whose bytes depend on the numbers alone."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"svg.hashsalt": "normlab", "font.family": "DejaVu Sans"}):
        figure, axes = plt.subplots(figsize=(5, 2.4), dpi=80)
        counts = dict(map(tuple, lab["scores"]["histogram"]))
        xs = list(range(lab["max_score"] + 1))
        axes.bar(xs, [counts.get(x, 0) for x in xs], color="#4477aa")
        axes.set_xlabel("score")
        axes.set_ylabel("students")
        axes.set_title(f"{lab['lab']}: scores of {lab['students']} students")
        axes.xaxis.get_major_locator().set_params(integer=True)
        axes.yaxis.get_major_locator().set_params(integer=True)
        figure.tight_layout()
        buffer = io.BytesIO()
        # PNG keeps no date; "Software" would name the matplotlib version
        figure.savefig(buffer, format="png", metadata={"Software": None})
        plt.close(figure)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- the pages


def _cell(value: object) -> str:
    """A Markdown table cell that shows ``value`` as text."""
    return inert.markdown(value).replace("|", "\\|")


def _percent(rate: float) -> str:
    return f"{100 * rate:.0f}%"


def to_markdown(summary: dict) -> str:
    lines = [f"# {TITLE}", ""]
    if summary["roster"] is not None:
        lines += [f"Roster: {summary['roster']} students.", ""]
    for lab in summary["labs"]:
        scores = lab["scores"]
        lines += [
            f"## {_cell(lab['lab'])}",
            "",
            f"{lab['students']} students ({lab['submissions']} notebooks), out of "
            f"{lab['max_score']} points: median {scores['median']}, mean {scores['mean']}, "
            f"{scores['full_marks']} with full marks, {scores['zero']} with 0.",
            "",
            "| score | students |",
            "|---:|---:|",
            *(f"| {s} | {n} |" for s, n in scores["histogram"]),
            "",
            "### Checks",
            "",
            "| check | points | passed | pass rate |",
            "|---|---:|---:|---:|",
            *(
                f"| {_cell(c['name'])} | {c['max_points']} | {c['passed']}/{c['of']} | "
                f"{_percent(c['pass_rate'])} |"
                for c in lab["checks"]
            ),
            "",
            "### Misconceptions the answers matched",
            "",
        ]
        if lab["probes"]:
            # the table fits a slide; what each one is, and where, follows it
            lines += ["| misconception | students | checks |", "|---|---:|---:|"]
            lines += [
                f"| {_cell(p['name'])} | {p['students']} | {len(p['checks'])} |"
                for p in lab["probes"]
            ]
            lines.append("")
            for probe in lab["probes"]:
                where = "; ".join(f"{name} ({n})" for name, n in probe["checks"].items())
                lines.append(
                    f"- **{_cell(probe['name'])}**: {_cell(probe['hint'])} In: {_cell(where)}."
                )
        else:
            lines.append("None.")
        for key, heading in SECTIONS:
            lines += ["", f"### {heading}", ""]
            lines += [
                f"- {_cell(_shown(r))} ({_cell(r['path'])}): {_cell(r['error'])}" for r in lab[key]
            ] or ["None."]
        lines += ["", "### Handed in nothing", ""]
        lines += [", ".join(_cell(who) for who in lab["not_submitted"]) or "None.", ""]
    return "\n".join(lines)


_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;"
    "text-align:left;vertical-align:top}td.n{text-align:right}.bar{background:#4477aa;height:.8em}"
)


def _h(value: object) -> str:
    return html.escape(inert.text(value), quote=True)


def to_html(summary: dict) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # nothing is fetched and nothing runs: images are data: URIs, styles inline
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>{TITLE}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{TITLE}</h1>",
    ]
    if summary["roster"] is not None:
        parts.append(f"<p>Roster: {summary['roster']} students.</p>")
    for lab in summary["labs"]:
        scores = lab["scores"]
        image = base64.b64encode(histogram_png(lab)).decode("ascii")
        parts += [
            f"<h2>{_h(lab['lab'])}</h2>",
            f"<p>{lab['students']} students ({lab['submissions']} notebooks), out of "
            f"{lab['max_score']} points: median {scores['median']}, mean {scores['mean']}, "
            f"{scores['full_marks']} with full marks, {scores['zero']} with 0.</p>",
            f'<img alt="score distribution of {_h(lab["lab"])}" '
            f'src="data:image/png;base64,{image}">',
            "<h3>Checks</h3>",
            "<table><tr><th>check</th><th>points</th><th>passed</th><th>pass rate</th>"
            "<th></th></tr>",
        ]
        for c in lab["checks"]:
            width = round(100 * c["pass_rate"])
            parts.append(
                f"<tr><td>{_h(c['name'])}</td><td class=n>{c['max_points']}</td>"
                f"<td class=n>{c['passed']}/{c['of']}</td>"
                f"<td class=n>{_percent(c['pass_rate'])}</td>"
                f'<td style="width:8em"><div class=bar style="width:{width}%"></div></td></tr>'
            )
        parts += ["</table>", "<h3>Misconceptions the answers matched</h3>"]
        if lab["probes"]:
            parts.append("<table><tr><th>misconception</th><th>students</th><th>checks</th></tr>")
            parts += [
                f"<tr><td>{_h(p['name'])}</td><td class=n>{p['students']}</td>"
                f"<td class=n>{len(p['checks'])}</td></tr>"
                for p in lab["probes"]
            ]
            parts += ["</table>", "<ul>"]
            for probe in lab["probes"]:
                where = "; ".join(f"{_h(name)} ({n})" for name, n in probe["checks"].items())
                parts.append(f"<li>{_h(probe['name'])}: {_h(probe['hint'])} In: {where}.</li>")
            parts.append("</ul>")
        else:
            parts.append("<p>None.</p>")
        for key, heading in SECTIONS:
            parts.append(f"<h3>{heading}</h3>")
            if lab[key]:
                parts.append("<ul>")
                parts += [
                    f"<li>{_h(_shown(r))} <code>{_h(r['path'])}</code>: {_h(r['error'])}</li>"
                    for r in lab[key]
                ]
                parts.append("</ul>")
            else:
                parts.append("<p>None.</p>")
        parts += [
            "<h3>Handed in nothing</h3>",
            f"<p>{', '.join(_h(who) for who in lab['not_submitted']) or 'None.'}</p>",
        ]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write(results: list[SubmissionResult], out: Path, roster: list[str] | None = None) -> dict:
    """Write class-report.{json,md,html} into ``out``; returns the summary."""
    from normlab.grader.results import write_atomically

    summary = summarise(results, roster)
    dumped = json.dumps(summary, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    write_atomically(out / "class-report.json", inert.json_text(dumped))
    write_atomically(out / "class-report.md", to_markdown(summary))
    write_atomically(out / "class-report.html", to_html(summary))
    return summary


def run(args) -> int:
    """``normlab report class RESULTS.json OUTDIR [--roster FILE]``."""
    from normlab.grader.results import results_from_json

    try:
        payload = json.loads(Path(args.results).read_text(encoding="utf-8"))
        if not isinstance(payload, dict):
            raise ValueError("not the JSON of `normlab grade --json`")
        results = results_from_json(payload.get("submissions"), unique=False)
        roster = read_roster(Path(args.roster)) if args.roster else None
    except (OSError, ValueError, RecursionError, csv.Error) as error:
        print(f"normlab report class: {inert.text(error)}", file=sys.stderr)
        return 2
    summary = write(results, Path(args.out), roster)
    print(
        f"wrote class-report.json, .md and .html for {len(summary['labs'])} labs to "
        f"{inert.text(args.out, lines=False)}"
    )
    return 0
