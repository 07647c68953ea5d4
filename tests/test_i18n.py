"""The grader's feedback in Spanish: every text it can show has a translation that keeps its values.

Coverage: every probe hint, check name, lab title and multiple-choice "why" line of every lab has a
Spanish text, and so does every message grading emits (the fresh labs, the solutions, the probe
corpus of ``test_every_probe_fires.py`` and the editions of ``message_corpus``): no line is left in
English, and the Spanish keeps every number, shape and identifier of the English. Each coverage
test is shown to fail on a catalog that lacks one entry. Rendering: ``check()`` and ``normlab
grade``'s feedback in Spanish when asked, and today's English, byte for byte, by default.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import ROOT, golden, grade_json
from message_corpus import MODULES, declared_texts, emitted_messages

import normlab
from normlab.grader import i18n, notebook
from normlab.grader.i18n import Catalog, CatalogError, read_po, translation
from normlab.grader.results import CheckReport, SubmissionResult
from normlab.instructor import report

STEMS = sorted(MODULES)
ENTRIES = read_po(i18n.catalog_path("es"))

# Words of English that Spanish prose never uses (code and values are tokens, removed first).
ENGLISH = re.compile(
    r"\b(the|is|of|and|with|should|this|that|these|matches|was|were|are|be|not|but|from|into|"
    r"it|its|or|to|returned|expected|which|when|then|your|have|does)\b",
    re.IGNORECASE,
)


def english_words(text: str) -> list[str]:
    skeleton, _ = i18n.abstract(re.sub(r"\{[=~]?[a-z_]+\}", " ", text))
    return ENGLISH.findall(skeleton)


def numbers(text: str) -> list[str]:
    """The numbers and shapes of ``text``, in order (identifiers may move in a translation)."""
    skeleton, values = i18n.abstract(text)
    kinds = [mark.group(1) for mark in re.finditer(r"⟨([a-z])\d+⟩", skeleton)]
    return [value for kind, value in zip(kinds, values, strict=True) if kind in "ns"]


def spanish() -> Catalog:
    return Catalog("es", ENTRIES)


def without(msgid: str) -> Catalog:
    """The Spanish catalog less the entry for ``msgid`` (which must be in it)."""
    kept = [entry for entry in ENTRIES if entry[1] != msgid]
    assert len(kept) == len(ENTRIES) - 1, f"no entry for {msgid!r}"
    return Catalog("es", kept)


def missing(book: Catalog, texts) -> list[str]:
    """The lines of ``texts`` that ``book`` leaves in English."""
    return [line for text in texts for line in translation(text, book)[1]]


def learner_part_removed(line: str) -> str:
    """A translated line without the learner's own exception message (shown as it is)."""
    return line.split(" lanzó ", 1)[0]


def problems(book: Catalog, message: str) -> list[str]:
    """What is wrong with ``message`` in ``book``'s language: untranslated lines, values that
    changed, English words left."""
    translated, missed = translation(message, book)
    found = [f"untranslated: {line}" for line in missed]
    if sorted(i18n.tokens(translated)) != sorted(i18n.tokens(message)):
        found.append(f"values differ: {message!r} -> {translated!r}")
    elif numbers(translated) != numbers(message):  # "got 1, expected 2" stays in that order
        found.append(f"numbers reordered: {message!r} -> {translated!r}")
    for line in translated.splitlines():
        words = english_words(learner_part_removed(line))
        if words and not missed:
            found.append(f"English {words} in: {line}")
    return found


# ----------------------------------------------------------------------------- the catalog


def test_catalog_loads_and_every_spanish_text_is_spanish():
    book = spanish()
    assert len(book.texts) > 400 and book.frames and book.ui
    english = [(where, msgstr) for _, _, msgstr, where in ENTRIES if english_words(msgstr) != []]
    assert not english, english[:5]


@pytest.mark.parametrize(
    "context, msgid, msgstr, error",
    [
        ("", "row 3 has mean 0.25", "la fila tiene media 0.25", "missing ['3']"),
        ("", "row 3 has mean 0.25", "la fila 3 tiene media 0.25 y 7", "added ['7']"),
        ("", "`layernorm_forward` is slow", "es lenta", "missing ['`layernorm_forward`']"),
        ("", "x of shape (4, 8)", "", "no translation"),
        ("frame", "{what}: wrong", "mal", "slots"),
        ("ui", "{title}: {got} points", "{title}: puntos", "fields"),
        ("fuzzy", "a", "b", "unknown context"),
    ],
)
def test_catalog_refuses_an_entry_that_loses_or_invents_values(context, msgid, msgstr, error):
    with pytest.raises(CatalogError, match=re.escape(error)):
        Catalog("es", [(context, msgid, msgstr, "test")])


def test_catalog_refuses_two_translations_of_one_sentence():
    first = ("", "row 3 has mean 0.25", "la fila 3 tiene media 0.25", "a")
    second = ("", "row 4 has mean 1", "la media de la fila 4 es 1", "b")
    with pytest.raises(CatalogError, match="clashes"):
        Catalog("es", [first, second])
    Catalog("es", [first, ("", "row 4 has mean 1", "la fila 4 tiene media 1", "b")])


def test_a_catalog_entry_matches_its_sentence_with_other_values():
    book = Catalog("es", [("", "row 3 has mean 0.25 at (0, 1)", "(0, 1): fila 3, media 0.25", "")])
    assert i18n.translation("row 12 has mean -1e-05 at (2,)", book) == (
        "(2,): fila 12, media -1e-05",
        [],
    )
    assert i18n.translation("row 12 has a mean", book) == (
        "row 12 has a mean",
        ["row 12 has a mean"],
    )


def test_abstract_tokens():
    text = "`f` of x, shape (4, 8), row 2 at 1e-05, layernorm_forward, np.var, float32 as 'bc'"
    skeleton, values = i18n.abstract(text)
    assert values == ["`f`", "(4, 8)", "2", "1e-05", "layernorm_forward", "np.var", "float32"]
    assert "'bc'" in skeleton  # a quoted word is a value only after "(", "=", ", " or ": "
    assert i18n.tokens("D1_ANSWER: 'bc' names") == ["D1_ANSWER", "'bc'"]
    assert i18n.tokens("e.g. row j's mean, the input's 'groups'") == []


# ----------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("stem", STEMS)
def test_every_probe_hint_has_a_spanish_text(stem):
    hints = declared_texts(stem)["hint"]
    assert hints
    assert missing(spanish(), hints) == []


@pytest.mark.parametrize("stem", STEMS)
def test_every_check_name_title_and_why_line_has_a_spanish_text(stem):
    texts = declared_texts(stem)
    assert texts["check"]
    assert missing(spanish(), texts["title"] + texts["check"] + texts["why"]) == []


@pytest.mark.parametrize("stem", STEMS)
def test_every_message_emitted_when_grading_is_fully_translated(stem):
    book = spanish()
    cases = emitted_messages(stem)
    assert sum(map(len, cases.values())) >= 10
    found = [
        (case, p) for case, messages in cases.items() for m in messages for p in problems(book, m)
    ]
    assert not found, found[:5]


def test_a_missing_probe_hint_fails_the_coverage_test():
    from normlab.grader.checks import layernorm

    hint = layernorm.FORWARD_PROBES[0].hint
    found = missing(without(hint), declared_texts("03_layernorm")["hint"])
    # the hint itself, and the two-slip hint that contains it
    assert hint in found and len(found) == 2 and all(hint in text for text in found)


def test_a_missing_check_name_or_why_line_fails_the_coverage_test():
    from normlab.grader.checks import layernorm

    name = layernorm.LAB.checks[0].name
    assert missing(without(name), [name]) == [name]
    why = layernorm.D1_WHY["a"]
    assert missing(without(why), declared_texts("03_layernorm")["why"]) == [why]


def test_a_missing_frame_fails_the_emitted_messages_test():
    book = without("Why: {hint}")
    messages = emitted_messages("03_layernorm")["layernorm_forward-unbiased variance"]
    found = [p for m in messages for p in problems(book, m)]
    assert found and all(p.startswith("untranslated: Why: This matches") for p in found)


def test_a_line_left_in_english_by_a_lax_frame_is_caught():
    # a catalog whose only frame copies the whole line: nothing is "missing", all is English
    book = Catalog("es", [("frame", "{=all}", "{=all}", "")])
    message = "layernorm_forward, x of shape (8, 8): shape is (8,) but should be (8, 8)"
    assert any(p.startswith("English") for p in problems(book, message))


def _ui_templates() -> list[tuple[str, str]]:
    """(file, template) for every ``i18n.text(...)`` in the package: literal, or a name bound
    to a literal in the same file."""
    import ast

    found = []
    for path in sorted((ROOT / "src" / "normlab").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = {
            target.id: node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "text"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "i18n"
            ):
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    found.append((path.name, first.value))
                elif isinstance(first, ast.Name):
                    found.append((path.name, bound[first.id]))
                elif isinstance(first, ast.IfExp):  # "YOUR CODE" if ... else "ERROR"
                    found += [(path.name, first.body.value), (path.name, first.orelse.value)]
    return found


def test_every_framework_template_has_a_spanish_text():
    templates = _ui_templates()
    assert len(templates) >= 15
    book = spanish()
    assert [t for t in templates if t[1] not in book.ui] == []
    # and the proof: a catalog without one of them is caught
    first = templates[0][1]
    assert first not in Catalog("es", [e for e in ENTRIES if e[1] != first]).ui


# ----------------------------------------------------------------------------- check()


def _unbiased_forward(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def _printed(*functions, **named) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        normlab.check(*functions, **named)
    return out.getvalue()


def _english_report(title, results) -> str:
    """Today's text report, written out independently of the report code."""
    got, total = sum(r.points for r in results), sum(r.max_points for r in results)
    lines = [f"{title}: {got}/{total} points"]
    for r in results:
        lines.append(f"  {'✓' if r.passed else '✗'} {r.name}  [{r.points}/{r.max_points}]")
        lines += [f"      {line}" for line in r.message.splitlines()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def default_language(monkeypatch):
    monkeypatch.delenv("NORMLAB_LANG", raising=False)
    monkeypatch.delenv("NORMLAB_GRADING", raising=False)
    normlab.set_language(None)
    yield
    normlab.set_language(None)


def test_check_speaks_spanish_with_normlab_lang(default_language, monkeypatch):
    answers = {"layernorm_forward": _unbiased_forward, "D1_ANSWER": "c", "D2_ANSWER": "bc"}
    english = _printed(**answers)
    monkeypatch.setenv("NORMLAB_LANG", "es")
    text = _printed(**answers)
    assert text.startswith("LayerNorm: 0/9 puntos\n")
    assert (
        "  ✗ el pase hacia adelante coincide con torch en entradas aleatorias (N, d)  [0/2]" in text
    )
    assert "Por qué: Esto coincide con la varianza insesgada (dividir entre d - 1, ddof=1)." in text
    assert "D1_ANSWER: (c) no es correcta." in text
    assert "D2_ANSWER: 'bc' nombra varias opciones (b, c)" in text
    assert sorted(i18n.tokens(text)) == sorted(i18n.tokens(english))
    assert [w for line in text.splitlines() for w in english_words(line)] == []


def test_check_follows_set_language(default_language):
    normlab.set_language("es")
    assert "todavía no está implementada" in _printed(layernorm_forward=_not_yet)
    normlab.set_language(None)
    assert "is not implemented yet" in _printed(layernorm_forward=_not_yet)
    with pytest.raises(ValueError, match="no messages in 'fr'"):
        normlab.set_language("fr")


def test_check_usage_errors_in_spanish(default_language):
    normlab.set_language("es")
    with pytest.raises(TypeError, match="check\\(\\) necesita al menos una función"):
        normlab.check()
    with pytest.raises(ValueError, match="ningún laboratorio comprueba nada_de_esto"):
        normlab.check(nada_de_esto=1)


def _not_yet(x, gamma, beta, eps=1e-5):
    raise NotImplementedError


def test_check_by_default_prints_todays_english_byte_for_byte(default_language):
    answers = {"layernorm_forward": _unbiased_forward, "D1_ANSWER": "c", "D2_ANSWER": "bc"}
    lab, results = notebook.run(**answers)
    assert _printed(**answers) == _english_report(lab.title, results)
    html = CheckReport(lab.title, results)._repr_html_()
    assert "LayerNorm: 0/9 points</div>" in html and "Por qué" not in html


def test_check_keeps_the_learners_exception_and_translates_its_hint(default_language):
    def broadcasting(x, gamma, beta, eps=1e-5):
        return x - x.mean(axis=-1)[:2]

    lab, results = notebook.run(layernorm_forward=broadcasting)
    message = next(r.message for r in results if "raised" in r.message)
    spanish_text = i18n.translate(message, "es")
    first, why = spanish_text.splitlines()[0], spanish_text.splitlines()[-1]
    assert first == message.splitlines()[0].replace(" raised ", " lanzó ", 1)
    assert why.startswith(
        "Por qué: Un estadístico perdió su eje reducido: calcúlalo con keepdims=True"
    )


def _result(**changes) -> SubmissionResult:
    from normlab.grader.core import CheckResult

    checks = [
        CheckResult(
            "forward matches torch on random (N, d) inputs",
            0,
            2,
            False,
            "`x` is not implemented yet",
        ),
        CheckResult("backward: dx matches autograd", 2, 2, True, ""),
    ]
    fields = dict(
        path="work/03_layernorm.ipynb",
        lab="03_layernorm",
        score=2,
        max_score=16,
        checks=checks,
        error="Your code stopped in 1 cell (a problem in the notebook's code, not in the grader):\n"
        "- The cell that starts `y = layernorm_forward(x)` failed its assertion: compared.",
        student="ana",
        findings=["a finding"],
        isolation="processes",
        lang="es",
    )
    return SubmissionResult(**{**fields, **changes})


def test_every_report_surface_has_its_framework_text_in_spanish(default_language):
    from normlab.instructor import gradescope

    i18n.untranslated.clear()
    results = [
        _result(id_conflict=["b.ipynb"]),
        _result(path="b.ipynb", error="not a regular file", lab=None),
    ]
    shown = [report.feedback_markdown(r) + report.feedback_html(r) for r in results]
    shown.append(report.to_table(results))
    graded = json.loads(report.to_json(results))
    shown += [
        json.dumps(gradescope.results(graded, "03_layernorm", uploads), ensure_ascii=False)
        for uploads in (["a.ipynb"], ["a.ipynb", "b.ipynb"])
    ]
    assert i18n.untranslated == []
    text = "\n".join(shown)
    for spanish_text in (
        "Puntuación: 2 / 16",
        "Para que lo revise el profesor",
        "TU CÓDIGO",
        "Problema al ejecutar el cuaderno:",
        "ERROR: no es un archivo normal",
        "total: 4/32 puntos en 2 cuadernos",
        "03_layernorm: 2 / 16 puntos.",
        "Subiste 2 cuadernos; se corrigió cada uno y cuenta el mejor: a.ipynb.",
        "laboratorio desconocido",
        "otras entregas también reclaman el id ana para 03_layernorm: b.ipynb",
    ):
        assert spanish_text in text
    assert [r["lang"] for r in graded["submissions"]] == ["es", "es"]
    assert graded["submissions"][0]["checks"][0]["message"] == "`x` is not implemented yet"


def test_reports_by_default_are_todays_english(default_language):
    """The table, the JSON's language and Gradescope's texts when no language is asked for:
    today's English, byte for byte (tests/golden/; conftest.golden says how to update)."""
    result = _result(lang=None, findings=[])
    golden("table-en.txt", report.to_table([result, result]) + "\n")
    graded = json.loads(report.to_json([result]))
    assert graded["submissions"][0]["lang"] == "en"
    from normlab.instructor import gradescope

    out = gradescope.results(graded, "03_layernorm", ["a.ipynb", "b.ipynb"])
    nothing = gradescope.results(None, "03_layernorm", [])
    shown = {
        "output": out["output"],
        "tests": [(test["name"], test["output"]) for test in out["tests"]],
        "nothing submitted": nothing["output"],
    }
    golden("gradescope-en.json", json.dumps(shown, indent=1, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------- normlab grade

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
UNBIASED = (
    "var = (centred**2).mean(axis=-1, keepdims=True)",
    "var = (centred**2).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)",
)


def _buggy_notebook(path: Path, lang: str | None) -> Path:
    book = nbformat.read(SOLUTION, as_version=4)
    for cell in book.cells:
        cell.source = cell.source.replace(*UNBIASED).replace('D1_ANSWER = "b"', 'D1_ANSWER = "c"')
    if lang:
        book.metadata["normlab"] = {"lab": "03_layernorm", "lang": lang}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(book, path)
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lang")
    spanish_book = _buggy_notebook(folder / "es" / "03_layernorm-ana.ipynb", "es")
    english_book = _buggy_notebook(folder / "en" / "03_layernorm-ana.ipynb", None)
    runs = {}
    for name, path, extra in [
        ("es", spanish_book, []),
        ("en", english_book, []),
        ("es-as-en", spanish_book, ["--lang", "en"]),
        ("en-as-es", english_book, ["--lang", "es"]),
        ("env-es", english_book, []),
    ]:
        out = folder / f"out-{name}"
        before = os.environ.get("NORMLAB_LANG")
        if name == "env-es":
            os.environ["NORMLAB_LANG"] = "es"
        try:
            code, data, stderr = grade_json(
                path, extra=["--feedback", out, "--csv", out / "grades.csv", *extra]
            )
        finally:
            os.environ.pop("NORMLAB_LANG", None)
            if before is not None:
                os.environ["NORMLAB_LANG"] = before
        assert code == 0, stderr
        (submission,) = data["submissions"]
        (student,) = [p for p in out.iterdir() if p.is_dir()]
        runs[name] = (submission, student)
    return runs


@pytest.mark.isolation
def test_grade_feedback_in_spanish_from_the_notebooks_language(graded):
    submission, feedback = graded["es"]
    assert submission["lang"] == "es"
    for check in submission["checks"]:  # the contract: its fields, English messages
        assert set(check) == {"name", "points", "max_points", "passed", "message", "probes"}
    markdown = (feedback / "03_layernorm.md").read_text(encoding="utf-8")
    assert f"**Puntuación: {submission['score']} / 16**" in markdown
    assert (
        "- ✗ el pase hacia adelante coincide con torch en entradas aleatorias (N, d) — 0/2"
        in markdown
    )
    assert (
        "  > Por qué: Esto coincide con la varianza insesgada (dividir entre d - 1, ddof=1)."
        in markdown
    )
    assert "**Una celda de tu cuaderno se detuvo (es tu código, no el calificador):**" in markdown
    assert (
        "Tu código se detuvo en " in markdown
        and "Llama a tu función `layernorm_forward`" in markdown
    )
    english = report.feedback_markdown(SubmissionResult.from_dict(submission), "en")
    assert sorted(i18n.tokens(markdown)) == sorted(i18n.tokens(english))
    outside_code = re.sub(r"```.*?```", "", markdown, flags=re.S)
    assert [w for line in outside_code.splitlines() for w in english_words(line)] == []
    html = (feedback / "03_layernorm.html").read_text(encoding="utf-8")
    assert '<html lang="es">' in html and "Por qué: Esto coincide" in html and "Puntuación" in html


@pytest.mark.isolation
def test_grade_feedback_by_default_is_todays_english_byte_for_byte(graded):
    submission, feedback = graded["en"]
    assert submission["lang"] == "en"
    english = (feedback / "03_layernorm.md").read_text(encoding="utf-8")
    golden("feedback-en-03_layernorm.md", english, long_numbers=False)
    html = (feedback / "03_layernorm.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in html and "Score: " in html and "Por qué" not in html
    # --lang overrides the notebook's language, both ways
    as_english = (graded["es-as-en"][1] / "03_layernorm.md").read_text(encoding="utf-8")
    assert as_english == english
    spanish_markdown = (graded["es"][1] / "03_layernorm.md").read_text(encoding="utf-8")
    for name in ("en-as-es", "env-es"):  # --lang es, or NORMLAB_LANG=es
        assert (graded[name][1] / "03_layernorm.md").read_text(encoding="utf-8") == spanish_markdown
        assert graded[name][0]["lang"] == "es"


@pytest.mark.isolation
def test_grade_problems_running_a_notebook_in_spanish(tmp_path):
    book = nbformat.read(SOLUTION, as_version=4)
    book.cells.insert(3, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    nbformat.write(book, tmp_path / "03_layernorm-exit.ipynb")
    text = SOLUTION.read_text(encoding="utf-8")
    (tmp_path / "03_layernorm-cut.ipynb").write_text(text[:500], encoding="utf-8")
    code, data, stderr = grade_json(tmp_path, extra=["--lang", "es"])
    assert code == 0, stderr
    cut, exited = data["submissions"]
    book = spanish()
    error, missed = translation(cut["error"], book)
    assert missed == [] and error.startswith("no es un cuaderno válido: JSON roto en la línea")
    error, missed = translation(exited["error"], book)
    assert missed == [] and error.startswith("el proceso del cuaderno terminó con el código 3")
    assert exited["checks"] and all(problems(book, c["message"]) == [] for c in exited["checks"])


@pytest.mark.isolation
def test_grade_csv_columns_do_not_depend_on_the_language(graded):
    def rows(name):
        folder = graded[name][1].parent
        return list(csv.reader(io.StringIO((folder / "grades.csv").read_text(encoding="utf-8"))))

    spanish_rows, english_rows = rows("es"), rows("en")
    assert spanish_rows[0] == english_rows[0]
    assert "forward matches torch on random (N, d) inputs" in spanish_rows[0]
    assert [row[2:4] for row in spanish_rows] == [row[2:4] for row in english_rows]
    json.dumps(graded["es"][0])  # the JSON is plain data


def test_a_quote_cut_short_says_so_in_spanish():
    """A long answer is quoted by its first characters and its length (``inert.clip``): in
    Spanish, the sentence around it and what it says of itself are translated, the quote and
    a cut exception message stay as they are."""
    from normlab.grader import inert
    from normlab.grader.probes import ChoiceError, parse_choice

    with pytest.raises(ChoiceError) as error:
        parse_choice("é" * 1000)
    quote = repr("é" * 300)
    assert i18n.translate(f"D1_ANSWER: {error.value}", "es") == (
        f"D1_ANSWER: {quote}… (1000 caracteres; se muestran los 300 primeros) no empieza por la "
        'letra de una opción; escribe una letra, p. ej. "b" o "(b) porque ..."'
    )
    raised = f"`f` raised ValueError: {inert.clip('x' * 1000)}\n{inert.clip('y' * 400, last=True)}"
    assert i18n.translate(raised, "es") == (
        f"`f` lanzó ValueError: {'x' * 300}… (1000 caracteres; se muestran los 300 primeros)\n"
        f"(400 caracteres; se muestran los 300 últimos) …{'y' * 300}"
    )


# ----------------------------------------------------------------------------- grade's frame


@pytest.mark.parametrize("bwrap", [True, False])
@pytest.mark.parametrize("private, namespaces", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("memory", [(None, None), ("/sys/fs/cgroup", 1), ("/sys/fs/cgroup", 2)])
@pytest.mark.parametrize("cpu", [None, (1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct"), (2,)])
@pytest.mark.parametrize("user", ["grading user", "nobody", "root"])
def test_every_isolation_grade_can_report_is_said_in_spanish(
    monkeypatch, bwrap, private, namespaces, memory, cpu, user
):
    from normlab.grader.isolation import sandbox
    from normlab.instructor import report

    monkeypatch.setattr(sandbox, "bwrap_available", lambda: bwrap)
    monkeypatch.setattr(sandbox.workspace, "available", lambda: private)
    monkeypatch.setattr(sandbox.workspace, "namespaces_available", lambda: namespaces)
    monkeypatch.setattr(sandbox.cgroup, "available", lambda: memory if memory[0] else None)
    monkeypatch.setattr(sandbox.cgroup, "cpu_available", lambda: cpu)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000 if user == "grading user" else 0)
    monkeypatch.setattr(
        sandbox, "unprivileged_ids", lambda _: (65534, 65534) if user == "nobody" else None
    )
    description = sandbox.choose_isolation(None, allow_root=True).description
    i18n.untranslated.clear()
    line = report.isolation_line(description, "es")
    assert i18n.untranslated == [] and line.startswith("normlab grade: aislamiento: "), line
    assert report.isolation_line(description, "en") == f"normlab grade: isolation: {description}"


def test_the_count_line_is_in_the_language_of_the_notebooks():
    from normlab.instructor import report

    def result(path, lang):
        return SubmissionResult(path, "03_layernorm", 0, 0, None, [], lang=lang)

    spanish, english = result("a.ipynb", "es"), result("b.ipynb", "en")
    said = report.graded_line([spanish], 1, 0, 1.83)
    assert said == "calificados 1 cuaderno(s), 0 reutilizados sin cambios de la caché, en 1.8 s"
    both = report.graded_line([spanish, english], 2, 0, 1.83, lang="en")
    assert both == "graded 2 notebook(s), reused 0 unchanged from the cache, in 1.8 s"
