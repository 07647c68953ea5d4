"""The ``normlab`` command as data: its subcommands, the exports' table, and what loads first."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(done.stdout))


def test_the_pytest_plugin_loads_neither_the_command_nor_the_grader():
    loaded = _modules_after("import normlab.pytest_plugin")
    assert "rfc3987_syntax" in loaded  # the skip took effect (a None entry)
    assert not {"normlab.cli", "normlab.grader", "argparse"} & loaded


def test_the_gradescope_bundle_copies_the_installed_package():
    import normlab
    from normlab.instructor import gradescope

    assert gradescope.PACKAGE == ROOT / "src" / "normlab"
    assert gradescope.PACKAGE == type(ROOT)(normlab.__file__).resolve().parent
    source = (gradescope.PACKAGE / "instructor" / "gradescope.py").read_text(encoding="utf-8")
    assert "import normlab\n" not in source


# ----------------------------------------------------------------------------- the command's table

SUBCOMMANDS = "grade|merge|export|labs|work|progress|release|translations"
DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _subparsers(parser) -> dict:
    import argparse

    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def _documented_commands() -> tuple[list[str], list[str]]:
    """(the command lines of the docs' code blocks, the commands quoted inline in prose), with
    comments, redirections and shell variables taken out."""
    import re

    lines, inline = [], []
    for path in DOCUMENTED:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
            lines += re.findall(rf"^\s*(normlab (?:{SUBCOMMANDS})\b.*)$", block, re.M)
        inline += re.findall(rf"`(normlab (?:{SUBCOMMANDS})\b[^`]*)`", text)

    def plain(command: str) -> str:
        command = re.split(r"\s+#|\s>|\s\|", command)[0].strip().rstrip("\\").strip()
        return re.sub(r"\$\(\([^)]*\)\)|\$\{\{[^}]*\}\}|\$\{[^}]*\}", "1", command)

    return [plain(c) for c in lines], [plain(c) for c in inline]


def test_every_command_line_of_the_docs_parses():
    import shlex

    from normlab.cli import parser

    lines, inline = _documented_commands()
    assert len(lines) >= 15 and any(" export moodle " in line for line in lines)
    refused = []
    for line in lines:
        try:
            parser().parse_args(shlex.split(line)[1:])
        except SystemExit:
            refused.append(line)
    assert refused == []
    # A command quoted in prose names a subcommand and options it has.
    subcommands = _subparsers(parser())
    unknown = [
        (command, word)
        for command in inline
        for word in command.split()[2:]
        if word.startswith("--")
        and word.split("=")[0] not in subcommands[command.split()[1]]._option_string_actions
    ]
    assert len(inline) >= 10 and unknown == []


def test_the_subcommands_are_the_table_s(capsys):
    from normlab.cli import COMMANDS, main

    names = [command.name for command in COMMANDS]
    assert names == ["grade", "merge", "export", "report", "labs", "work", "progress"] + [
        "release",
        "translations",
    ]
    try:
        main(["--help"])
    except SystemExit as stop:
        assert stop.code == 0
    shown = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command.name}" in shown and command.help in " ".join(shown.split())


def test_grade_and_merge_show_results_with_the_same_options():
    from normlab.cli import parser

    subcommands = _subparsers(parser())
    for flag in ("--json", "--csv", "--feedback", "--quiet", "--lang"):
        grade = subcommands["grade"]._option_string_actions[flag]
        merge = subcommands["merge"]._option_string_actions[flag]
        assert (grade.dest, grade.choices, grade.nargs) == (merge.dest, merge.choices, merge.nargs)


# ----------------------------------------------------------------------------- the exports' table


def test_the_export_command_offers_every_export_and_its_options(capsys):
    from normlab.cli import parser
    from normlab.instructor.exports import EXPORTS

    export = _subparsers(parser())["export"]
    (format_,) = [a for a in export._actions if a.dest == "format"]
    assert list(format_.choices) == ["canvas", "moodle", "summary", "gradescope"] == list(EXPORTS)
    for entry in EXPORTS.values():
        assert f"{entry.name} {entry.out}: {entry.summary}" in " ".join(
            export.format_help().split()
        )
        for option in entry.options:
            assert export._option_string_actions[option.flag].help.startswith(f"{entry.name}: ")


def test_the_docs_list_of_exports_is_the_table():
    from normlab.instructor.exports import EXPORTS, markdown_table

    instructors = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    assert markdown_table() in instructors
    lines, _ = _documented_commands()
    exported = {line.split()[2] for line in lines if line.startswith("normlab export ")}
    assert exported == set(EXPORTS)  # every export shown in use, and nothing else


def test_an_export_reads_its_own_options_only(tmp_path, monkeypatch):
    """A new entry in the table is an export: the command looks it up, hands it its options
    and prints what it returns; a usage error it raises is exit status 2."""
    import dataclasses

    from normlab.cli import main
    from normlab.instructor import exports

    seen = []

    def write(out, results, options):
        seen.append((out, results, options))
        if options["level"] == "bad":
            raise exports.ExportError("no such level")
        return f"wrote {out.name}"

    extra = exports.Export(
        "canvas", "OUT", "a test export", write, reads_results=False,
        options=(exports.Option("--level", {"help": "how much"}),),
    )  # fmt: skip
    monkeypatch.setitem(exports.EXPORTS, "canvas", dataclasses.replace(extra))
    assert main(["export", "canvas", str(tmp_path / "x"), "--level", "2"]) == 0
    assert seen == [(tmp_path / "x", None, {"level": "2"})]
    assert main(["export", "canvas", str(tmp_path / "x"), "--level", "bad"]) == 2
