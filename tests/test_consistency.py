"""The course holds together: stems pair up, links resolve, environments agree, CI runs make test."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import tomllib
import yaml
from conftest import ROOT

from normlab import chapter_files
from normlab.grader.registry import all_labs

STEM = re.compile(r"^(\d\d_[a-z0-9_]+)$")


def stems_in(folder: str, suffix: str) -> set[str]:
    return {p.name[: -len(suffix)] for p in chapter_files(ROOT / folder, suffix)}


PARTS = {
    "theory chapter": lambda: stems_in("theory", ".md"),
    "demo notebook": lambda: stems_in("notebooks", ".ipynb"),
    "solution notebook": lambda: stems_in("solutions", ".ipynb"),
    "worked solutions": lambda: stems_in("solutions", ".md"),
    "lab": lambda: stems_in("labs", ".ipynb"),
    "checks": lambda: set(all_labs()),
}


def test_every_stem_has_all_its_parts():
    found = {part: list_stems() for part, list_stems in PARTS.items()}
    every = set().union(*found.values())
    assert every, "no chapters at all"
    missing = [
        f"{stem}: no {part}"
        for stem in sorted(every)
        for part, stems in found.items()
        if stem not in stems
    ]
    assert missing == []
    for stem in every:
        name = stem.split("_", 1)[1]
        assert (ROOT / "tests" / f"test_{name}_checks.py").exists() or any(
            (ROOT / "tests").glob(f"test_*{name}*checks.py")
        ), f"{stem}: no tests/test_{name}_checks.py"


def test_readme_course_map_links_every_part():
    readme = (ROOT / "README.md").read_text()
    for stem in PARTS["theory chapter"]():
        for path in (
            f"theory/{stem}.md",
            f"labs/{stem}.ipynb",
            f"solutions/{stem}.ipynb",
            f"notebooks/{stem}.ipynb",
        ):
            assert f"]({path})" in readme, f"README course map lacks a link to {path}"
    assert "make lab" in readme and "make test" in readme


MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize(
    "document",
    [
        ROOT / "README.md",
        *sorted((ROOT / "theory").glob("*.md")),
        *sorted((ROOT / "solutions").glob("*.md")),
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_resolve(document):
    broken = []
    for target in MARKDOWN_LINK.findall(document.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        if not (document.parent / target).exists():
            broken.append(target)
    assert broken == []


def _name_and_spec(requirement: str) -> tuple[str, str]:
    requirement = requirement.split("#")[0].strip()
    conda = re.match(r"^([A-Za-z0-9_.-]+)\[version='([^']+)'.*\]$", requirement)
    if conda:
        name, spec = conda.groups()
    else:
        name, spec = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", requirement).groups()
    name = {"pytorch": "torch"}.get(name.lower(), name.lower())
    return name, spec.replace(" ", "")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_side = dict(_name_and_spec(r) for r in project["dependencies"])
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_side = {}
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):
            # The course package and lab 11's Triton (Binder's kernel is this environment).
            assert entry.get("pip") == ["-e .[kernels]"], "the pip section: the course only"
            continue
        name, spec = _name_and_spec(entry)
        if name == "python":
            assert spec == ">=" + project["requires-python"].lstrip(">=")
        elif name != "pip":
            conda_side[name] = spec
    assert conda_side == pip_side


def test_environment_yml_names_the_kernels_extra_as_pyproject_does():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (kernels,) = project["optional-dependencies"]["kernels"]
    assert kernels.startswith("triton>=")
    assert kernels in (ROOT / "environment.yml").read_text()
    # ... and installs it: Binder's kernel runs in this environment, not in .venv
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    (pip,) = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict)]
    extras = re.findall(r"^-e \"?\.\[([a-z,]+)\]\"?$", pip[0])
    assert extras and "kernels" in extras[0].split(","), pip


def test_torch_is_a_range_and_conda_gets_the_cpu_build():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = next(r for r in project["dependencies"] if r.startswith("torch"))
    assert torch.startswith("torch>=") and "==" not in torch
    assert "build='cpu*'" in (ROOT / "environment.yml").read_text()


def test_ci_runs_the_readme_test_command_and_nothing_else():
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert commands[-1] == "make test"
    # Besides `make test`, CI may only install system packages that tests need (each optional).
    installs = ("if ", "fi", "{ apt-get ", "make kernels")
    # ... and say that a test whose packages it installed must run, not skip (NORMLAB_REQUIRE_*)
    required = ("export NORMLAB_REQUIRE_SLURM=1",)
    assert all(
        c.startswith(("set ", "cd ", "make test", *installs)) or c in required for c in commands
    )


def test_figures_cited_by_chapters_exist_and_come_from_notebooks():
    figures = ROOT / "theory" / "figures"
    for chapter in (ROOT / "theory").glob("*.md"):
        for name in re.findall(r"figures/([\w.-]+\.png)", chapter.read_text()):
            assert (figures / name).exists(), f"{chapter.name} cites missing {name}"
            stem = name[:-4]
            producers = [
                nb for nb in (ROOT / "notebooks").glob("*.ipynb") if stem in nb.read_text()
            ]
            assert producers, f"no notebook saves {name}"


def test_every_phony_make_target_is_defined():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE).group(1).split()
    defined = set(re.findall(r"^([A-Za-z][\w.-]*):(?!=)", makefile, re.MULTILINE))
    assert sorted(set(phony) - defined) == []


# --- the course's public address: one home, quoted everywhere alike ---------------------------

GITHUB_ADDRESS = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?(?=[/)\s\"'>`]|$)")
LAUNCH = re.compile(
    r"https://(?:mybinder\.org/v2/gh|colab\.research\.google\.com/github)/([\w.-]+)/([\w.-]+)/"
)


def course_text_files() -> list:
    from normlab.repository import quoting_files

    return [p for p in quoting_files(ROOT, None) if ".venv" not in p.parts]


def test_the_course_address_has_one_home_that_every_file_quotes_alike():
    from normlab.repository import owner_and_name, repository_url

    home = repository_url(ROOT)
    owner, name = owner_and_name(home)
    assert "OWNER" not in owner.upper() and owner not in ("example", "user"), home
    wrong, quoted = [], set()
    for path in course_text_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix()
        if re.search(r"\bOWNER/(?:REPO|normlab)\b", text):  # the placeholders once used
            wrong.append(f"{where}: a placeholder for the course's address")
        for found_owner, found_name in GITHUB_ADDRESS.findall(text):
            if found_name == name and found_owner != owner:
                wrong.append(f"{where}: github.com/{found_owner}/{found_name}, not {home}")
            elif (found_owner, found_name) == (owner, name):
                quoted.add(where)
        for found in LAUNCH.findall(text):
            if found != (owner, name):
                wrong.append(f"{where}: a launch link to {'/'.join(found)}, not {home}")
            else:
                quoted.add(where)
    assert wrong == []
    # The learners' routes quote it: the README's launch link, Binder and Colab in running.md.
    assert {"README.md", "es/README.md", "docs/running.md"} <= quoted, quoted
    running = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    assert f'"normlab @ git+{home}"' in running
    assert (
        f"https://mybinder.org/v2/gh/{owner}/{name}/HEAD?urlpath=lab/tree/START_HERE.md" in running
    )


def test_one_command_moves_the_course_to_another_address(tmp_path):
    """A copy published elsewhere: every quote follows the home, the translations stay fresh."""
    import shutil

    from normlab import translation
    from normlab.repository import quoting_files, repository_url, set_repository

    copy = tmp_path / "course"
    for path in course_text_files():
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    old = repository_url(copy)
    quoting = {p.relative_to(copy) for p in quoting_files(copy, old)}
    fresh = [
        p for p in translation.stamped_files(copy) if translation.stamp_problem(copy, p) is None
    ]
    assert fresh, "no fresh Spanish stamp to keep"
    changed = set_repository(copy, "https://github.com/a-school/norms-course")
    assert repository_url(copy) == "https://github.com/a-school/norms-course"
    assert quoting <= {p.relative_to(copy) for p in changed}
    assert quoting_files(copy, old) == []
    running = (copy / "docs" / "running.md").read_text(encoding="utf-8")
    assert 'git+https://github.com/a-school/norms-course"' in running
    assert "mybinder.org/v2/gh/a-school/norms-course/HEAD" in running
    assert [translation.stamp_problem(copy, p) for p in fresh] == [None] * len(fresh)


LEARNER_PAGES = [
    *chapter_files(ROOT / "theory", ".md"),
    *chapter_files(ROOT / "solutions", ".md"),
    *chapter_files(ROOT / "es" / "theory", ".md"),
    *chapter_files(ROOT / "es" / "solutions", ".md"),
    ROOT / "docs" / "running.md",
]


@pytest.mark.parametrize("page", LEARNER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_learners_are_sent_to_their_copy_in_work_not_to_labs(page):
    """`make grade` grades work/: a page that says "the lab labs/NN.ipynb" sends a learner to
    fill in a file nothing grades (and that `make labs` regenerates)."""
    text = page.read_text(encoding="utf-8")
    assert re.findall(r"`(?:es/)?labs/\d\d_\w+\.ipynb`", text) == []
    spanish = page.relative_to(ROOT).parts[0] == "es"
    for lab in re.findall(r"`(work/(?:es/)?\d\d_\w+\.ipynb)`", text):
        assert lab.startswith("work/es/") == spanish, lab  # the copy in the page's language


def test_running_md_gives_the_same_conda_steps_as_the_readme():
    """Binder and the conda route need what make lab does: the copies and the settings."""

    def conda_block(text):
        found = re.search(r"```bash\n\s*(conda env create[^`]*?)```", text)
        assert found, "no conda block"
        return [line.strip() for line in found.group(1).strip().splitlines()]

    running = conda_block((ROOT / "docs" / "running.md").read_text(encoding="utf-8"))
    assert running == conda_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(line.startswith("normlab work") for line in running)
    assert any("--LabApp.app_settings_dir=jupyterlab-settings" in line for line in running)


def imported_test_modules(source: str) -> list[str]:
    """The test modules (``test_*``) that a Python source imports, at any depth."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("test_")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
            found.append(node.module)
    return found


def test_no_test_module_imports_another():
    """Shared helpers live in tests/conftest.py (or a support module such as corpus.py); a test
    module imported by another would run its tests twice and tie the two together."""
    sample = "import test_x\nfrom test_y import z\ndef f():\n    import test_w\n"
    assert imported_test_modules(sample) == ["test_x", "test_y", "test_w"]
    importing = {
        path.name: imported_test_modules(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "tests").glob("*.py"))
    }
    assert {name: found for name, found in importing.items() if found} == {}


# --- numbers a chapter quotes from a stored output ---------------------------------------------

# (chapter, its sentence, notebook, cell id, the cell's stored output): each named group of the
# sentence must read as the output prints it, so a rerun that moves a number fails here until
# both editions say the new one. Whitespace in the chapter is read as single spaces.
_STREAM_RMS = (
    r"x1: stream RMS after 24 sub-layers: \{'pre': (?P<pre1>[\d.]+),.*\n"
    r".*x10: stream RMS after 24 sub-layers: \{'pre': (?P<pre10>[\d.]+), 'post': [\d.]+, "
    r"'peri': (?P<peri10>[\d.]+), 'olmo2': (?P=peri10),"
)
QUOTED_OUTPUTS = [
    (
        "theory/09_modern_norms.md",
        r"Pre-LN's stream RMS goes from (?P<pre1>[\d.]+) to (?P<pre10>[\d.]+) while Peri-LN's and "
        r"OLMo 2's stay at (?P<peri10>[\d.]+)\.",
        "solutions/09_modern_norms.ipynb",
        "c9a00023",
        _STREAM_RMS,
    ),
    (
        "es/theory/09_modern_norms.md",
        r"del flujo de Pre-LN pasa de (?P<pre1>[\d.]+) a (?P<pre10>[\d.]+) mientras que la de "
        r"Peri-LN y la de OLMo 2 se quedan en (?P<peri10>[\d.]+)\.",
        "solutions/09_modern_norms.ipynb",
        "c9a00023",
        _STREAM_RMS,
    ),
]

_NGPT = r"stream RMS after layers 1, 24, 48 = (?P<first>[\d.]+), [\d.]+, (?P<last>[\d.]+)"
_CAST_ORDER = (
    r"Llama\)\s+cast, then multiply\s+: mean (?P<llama>[\d.]+) ulp, max [\d.]+, exact within "
    r"0.5 ulp: (?P<llama_share>\d+)%\n.*\n.*Gemma\)\s+cast, then multiply\s+: mean "
    r"(?P<gemma>[\d.]+) ulp, max (?P<worst>[\d.]+), exact within 0.5 ulp: (?P<gemma_share>\d+)%"
)
_DECAY = (
    r"after  10000 steps: Llama's gain (?P<llama>[\d.]+), Gemma's gain (?P<gemma>[\d.]+), "
    r"a Gemma gain trained to 1.5 -> (?P<trained>[\d.]+)"
)
_BATCH_OF_TWO = r"on the training images: each between (?P<lo>[\d.]+) and (?P<hi>[\d.]+)\n"
QUOTED_OUTPUTS += [
    (
        "theory/09_modern_norms.md",
        r"grows its stream's RMS from (?P<first>[\d.]+) to (?P<last>[\d.]+)\.",
        "notebooks/09_modern_norms.ipynb",
        "d9b00018",
        _NGPT,
    ),
    (
        "es/theory/09_modern_norms.md",
        r"hace crecer la RMS de su flujo de (?P<first>[\d.]+) a (?P<last>[\d.]+)\.",
        "notebooks/09_modern_norms.ipynb",
        "d9b00018",
        _NGPT,
    ),
    (
        "theory/09_modern_norms.md",
        r"mean error of (?P<llama>[\d.]+) ulp with Llama's gain and (?P<gemma>[\d.]+) ulp with "
        r"Gemma's, (?P<llama_share>\d+)% and (?P<gemma_share>\d+)% of the values within 0.5 ulp, "
        r"and errors up to (?P<worst>[\d.]+) ulp",
        "notebooks/09_modern_norms.ipynb",
        "d9b00008",
        _CAST_ORDER,
    ),
    (
        "es/theory/09_modern_norms.md",
        r"error medio de (?P<llama>[\d.]+) ulp con la ganancia de Llama y de (?P<gemma>[\d.]+) ulp "
        r"con la de Gemma, el (?P<llama_share>\d+)% y el (?P<gemma_share>\d+)% de los valores a "
        r"0.5 ulp como mucho, y errores de hasta (?P<worst>[\d.]+) ulp",
        "notebooks/09_modern_norms.ipynb",
        "d9b00008",
        _CAST_ORDER,
    ),
    (
        "theory/09_modern_norms.md",
        r"Llama's gain is (?P<llama>[\d.]+) and Gemma's stays (?P<gemma>[\d.]+); a Gemma gain that "
        r"training had moved to 1.5 is back to (?P<trained>[\d.]+)",
        "notebooks/09_modern_norms.ipynb",
        "d9b00011",
        _DECAY,
    ),
    (
        "es/theory/09_modern_norms.md",
        r"Llama vale (?P<llama>[\d.]+) y la de Gemma sigue en (?P<gemma>[\d.]+); una ganancia de "
        r"Gemma que el entrenamiento había llevado a 1.5 ha vuelto a (?P<trained>[\d.]+)",
        "notebooks/09_modern_norms.ipynb",
        "d9b00011",
        _DECAY,
    ),
    (
        "theory/08_training.md",
        r"on every CPU the three medians, with the running averages, with the exact statistics and "
        r"on the training images, each lie between (?P<lo>[\d.]+) and (?P<hi>[\d.]+);",
        "notebooks/08_training.ipynb",
        "a1b2c3d9",
        _BATCH_OF_TWO,
    ),
    (
        "es/theory/08_training.md",
        r"en cualquier CPU las tres medianas, con las medias móviles, con los estadísticos exactos "
        r"y en las imágenes de entrenamiento, quedan cada una entre (?P<lo>[\d.]+) y (?P<hi>[\d.]+);",
        "notebooks/08_training.ipynb",
        "a1b2c3d9",
        _BATCH_OF_TWO,
    ),
]

_LOGITS = (
    r"pre  lr 0.01   no warmup: largest logit (?P<pre>\d+) \[(?P<low>\d+), (?P<high>\d+)\].*\n"
    r".*QK-norm  lr 0.01   no warmup: largest logit (?P<qk>\d+) \["
)
QUOTED_OUTPUTS += [
    (
        "theory/12_language_model.md",
        r"a peak of (?P<pre>\d+) over the 400 steps \(median of the 3 seeds; \[(?P<low>\d+), "
        r"(?P<high>\d+)\]\)\. .* With QK-norm the peak was (?P<qk>\d+) \[",
        "notebooks/12_language_model.ipynb",
        "lm12-14-qk-sweep",
        _LOGITS,
    ),
    (
        "es/theory/12_language_model.md",
        r"llegó a un máximo de (?P<pre>\d+) a lo largo de los 400 pasos \(mediana de las 3 "
        r"semillas; \[(?P<low>\d+), (?P<high>\d+)\]\)\. .* QK-norm el máximo fue (?P<qk>\d+) \[",
        "notebooks/12_language_model.ipynb",
        "lm12-14-qk-sweep",
        _LOGITS,
    ),
]

_DEPTH = (
    r"pre  lr 0.003   no warmup  (?P<pre2>[\d.]+) \[[^\]]*\] \d/3  (?P<pre6>[\d.]+) \[[^\]]*\] "
    r"\d/3  (?P<pre12>[\d.]+) \["
)
QUOTED_OUTPUTS += [
    (
        "theory/12_language_model.md",
        r"without warmup it ended higher the deeper it was: (?P<pre2>[\d.]+) at 2 blocks, "
        r"(?P<pre6>[\d.]+) at 6, (?P<pre12>[\d.]+) at 12\.",
        "notebooks/12_language_model.ipynb",
        "lm12-depth",
        _DEPTH,
    ),
    (
        "es/theory/12_language_model.md",
        r"sin calentamiento acabó más arriba cuanto más profundo era: (?P<pre2>[\d.]+) con 2 "
        r"bloques, (?P<pre6>[\d.]+) con 6, (?P<pre12>[\d.]+) con 12\.",
        "notebooks/12_language_model.ipynb",
        "lm12-depth",
        _DEPTH,
    ),
]


_DEMO_13 = "notebooks/13_other_architectures.ipynb"
_GATE_ORDER = (
    r"z = \+5: output RMS, norm then gate (?P<on>[\d.]+);  gate then norm (?P<gon>[\d.]+)\n.*\n"
    r".*z = -5: output RMS, norm then gate (?P<off>[\d.]+);  gate then norm (?P<goff>[\d.]+)"
)
_GROUPS = (
    r"group_size 8: RMS of channels 0-3 (?P<big>[\d.]+), of channels 4-7 (?P<small>[\d.]+)\n"
    r"group_size 4: RMS of channels 0-3 (?P<big4>[\d.]+), of channels 4-7 (?P<small4>[\d.]+)"
)
_GRN = r"input (?P<before>[\d.]+), after GRN with gamma = 1: (?P<after>[\d.]+)"
_ADALN = r"adaLN, default init : max \|output - input\| at init = (?P<default>[\d.]+)"
_ERF = (
    r"slope at 0: erf (?P<slope>[\d.]+), tanh 1.000;  at x = 2: erf (?P<erf2>[\d.]+), "
    r"tanh (?P<tanh2>[\d.]+)"
)
_FLOORS = (
    r"loss floors: a uniform guess (?P<uniform>[\d.]+), the bytes' own frequencies "
    r"\(no context\) (?P<unigram>[\d.]+)"
)
QUOTED_OUTPUTS += [
    (
        "theory/13_other_architectures.md",
        r"Norm, then gate: the output's RMS is (?P<on>[\d.]+) at \$z = \+5\$ and (?P<off>[\d.]+) "
        r"at \$z = -5\$.*? Gate, then norm: (?P<gon>[\d.]+) at \$z = \+5\$ and (?P<goff>[\d.]+)",
        _DEMO_13,
        "d13a0015",
        _GATE_ORDER,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"Primero la norma y después la puerta: la RMS de la salida es (?P<on>[\d.]+) con "
        r"\$z = \+5\$ y (?P<off>[\d.]+) con \$z = -5\$.*? Primero la puerta y después la norma: "
        r"(?P<gon>[\d.]+) con \$z = \+5\$ y (?P<goff>[\d.]+)",
        _DEMO_13,
        "d13a0015",
        _GATE_ORDER,
    ),
    (
        "theory/13_other_architectures.md",
        r"one group of 8 leaves channels 0–3 at RMS (?P<big>[\d.]+) and channels 4–7 at "
        r"(?P<small>[\d.]+); groups of 4 bring them to (?P<big4>[\d.]+) and (?P<small4>[\d.]+)\.",
        _DEMO_13,
        "d13a0017",
        _GROUPS,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"un grupo de 8 deja los canales 0–3 con RMS (?P<big>[\d.]+) y los canales 4–7 con "
        r"(?P<small>[\d.]+); grupos de 4 los llevan a (?P<big4>[\d.]+) y (?P<small4>[\d.]+)\.",
        _DEMO_13,
        "d13a0017",
        _GROUPS,
    ),
    (
        "theory/13_other_architectures.md",
        r"smallest channel energy goes from (?P<before>[\d.]+) to (?P<after>[\d.]+)\.",
        _DEMO_13,
        "d13a0021",
        _GRN,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"menor energía de canal pasa de (?P<before>[\d.]+) a (?P<after>[\d.]+)\.",
        _DEMO_13,
        "d13a0021",
        _GRN,
    ),
    (
        "theory/13_other_architectures.md",
        r"the same modulation layer it is (?P<default>[\d.]+)\.",
        _DEMO_13,
        "d13a0006",
        _ADALN,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"la misma capa de modulación es (?P<default>[\d.]+)\.",
        _DEMO_13,
        "d13a0006",
        _ADALN,
    ),
    (
        "theory/13_other_architectures.md",
        r"\\approx (?P<slope>[\d.]+)\$ against 1, and \$\\mathrm\{erf\}\(2\) = (?P<erf2>[\d.]+)\$ "
        r"against \$\\tanh\(2\) = (?P<tanh2>[\d.]+)\$",
        _DEMO_13,
        "d13a0035",
        _ERF,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"\\approx (?P<slope>[\d.]+)\$ frente a 1, y \$\\mathrm\{erf\}\(2\) = (?P<erf2>[\d.]+)\$ "
        r"frente a \$\\tanh\(2\) = (?P<tanh2>[\d.]+)\$",
        _DEMO_13,
        "d13a0035",
        _ERF,
    ),
    (
        "theory/13_other_architectures.md",
        r"Its loss floors: (?P<uniform>[\d.]+) for a uniform guess, (?P<unigram>[\d.]+) for the "
        r"bytes' own frequencies \(no context\)\.",
        _DEMO_13,
        "d13a0027",
        _FLOORS,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"Sus suelos de pérdida: (?P<uniform>[\d.]+) para una respuesta uniforme, "
        r"(?P<unigram>[\d.]+) para las frecuencias propias de los bytes \(sin contexto\)\.",
        _DEMO_13,
        "d13a0027",
        _FLOORS,
    ),
]


_FOLD = (
    r"torch.float64 +max \|folded - conv then BN\| / max \|output\| = (?P<f64>\S+)\n"
    r"torch.float32 +max \|folded - conv then BN\| / max \|output\| = (?P<f32>\S+)\n"
    r"float32 itself +max \|folded - conv then BN\| / max \|output\| = (?P<own>\S+)\n"
    r"bias forgotten +max \|folded - conv then BN\| / max \|output\| = (?P<bias>\S+)\n"
    r"batch statistics +max \|folded - conv then BN\| / max \|output\| = (?P<batch>\S+)"
)
_NORM_MEDIANS = (
    r"RMSNorm's median is between (?P<rms_lo>[\d.]+) and (?P<rms_hi>[\d.]+),\n"
    r"DyT's and Derf's between (?P<pw_lo>[\d.]+) and (?P<pw_hi>[\d.]+)\n"
)
_CLIP = (
    r"every seed's held-out loss is between (?P<a_lo>[\d.]+) and (?P<a_hi>[\d.]+)\n"
    r"without the clip and between (?P<b_lo>[\d.]+) and (?P<b_hi>[\d.]+) with it\n"
)
QUOTED_OUTPUTS += [
    (
        "theory/13_other_architectures.md",
        r"The stored run printed (?P<f64>\S+) for the float64 fold and (?P<f32>\S+) for the float32 "
        r"one, against (?P<own>\S+) for float32's own convolution-then-BatchNorm, and (?P<bias>\S+) "
        r"and (?P<batch>\S+) for the two wrong folds",
        _DEMO_13,
        "d13a0023",
        _FOLD,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"La ejecución guardada imprimió (?P<f64>\S+) para el plegado en float64 y (?P<f32>\S+) para "
        r"el de float32, frente a (?P<own>\S+) de la propia convolución-y-BatchNorm en float32, y "
        r"(?P<bias>\S+) y (?P<batch>\S+) para los dos plegados erróneos",
        _DEMO_13,
        "d13a0023",
        _FOLD,
    ),
    (
        "theory/13_other_architectures.md",
        r"On every CPU, RMSNorm's median lies between (?P<rms_lo>[\d.]+) and (?P<rms_hi>[\d.]+), "
        r"DyT's and Derf's between (?P<pw_lo>[\d.]+) and (?P<pw_hi>[\d.]+) \(the demo asserts",
        _DEMO_13,
        "d13a0029",
        _NORM_MEDIANS,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"En cualquier CPU, la mediana de RMSNorm queda entre (?P<rms_lo>[\d.]+) y "
        r"(?P<rms_hi>[\d.]+), y las de DyT y Derf entre (?P<pw_lo>[\d.]+) y (?P<pw_hi>[\d.]+) "
        r"\(la demo comprueba",
        _DEMO_13,
        "d13a0029",
        _NORM_MEDIANS,
    ),
    (
        "theory/13_other_architectures.md",
        r"On every CPU, each seed's held-out loss lies between (?P<a_lo>[\d.]+) and "
        r"(?P<a_hi>[\d.]+) without the clip and between (?P<b_lo>[\d.]+) and (?P<b_hi>[\d.]+) "
        r"with it \(asserted by the demo\)",
        _DEMO_13,
        "d13a0032",
        _CLIP,
    ),
    (
        "es/theory/13_other_architectures.md",
        r"En cualquier CPU, la pérdida en datos reservados de cada semilla queda entre "
        r"(?P<a_lo>[\d.]+) y (?P<a_hi>[\d.]+) sin el recorte y entre (?P<b_lo>[\d.]+) y "
        r"(?P<b_hi>[\d.]+) con él \(lo comprueba la demo\)",
        _DEMO_13,
        "d13a0032",
        _CLIP,
    ),
]


def stored_output(notebook: str, cell_id: str) -> str:
    cells = json.loads((ROOT / notebook).read_text(encoding="utf-8"))["cells"]
    (cell,) = [c for c in cells if c.get("id") == cell_id]
    return "".join(
        "".join(out.get("text", ""))
        for out in cell.get("outputs", [])
        if out["output_type"] == "stream"
    )


def quoted_mismatches(chapter_text, sentence, output_text, printed):
    said = re.search(sentence, " ".join(chapter_text.split()))
    shown = re.search(printed, output_text)
    if not said or not shown:
        return [f"sentence found: {bool(said)}, output found: {bool(shown)}"]
    return [
        f"{name}: the chapter says {value}, the output prints {shown[name]}"
        for name, value in said.groupdict().items()
        if value != shown[name]
    ]


@pytest.mark.parametrize("chapter, sentence, notebook, cell_id, printed", QUOTED_OUTPUTS,
                         ids=[q[0] for q in QUOTED_OUTPUTS])  # fmt: skip
def test_a_chapter_quotes_the_numbers_its_notebook_stores(
    chapter, sentence, notebook, cell_id, printed
):
    chapter_text = (ROOT / chapter).read_text(encoding="utf-8")
    assert (
        quoted_mismatches(chapter_text, sentence, stored_output(notebook, cell_id), printed) == []
    )


def test_a_stale_quote_is_told_which_number_moved():
    chapter, sentence, notebook, cell_id, printed = QUOTED_OUTPUTS[0]
    # the sentence as it stood when the output printed 4.5, 42.7 and 4.9
    stale = (
        "after 24 sub-layers, Pre-LN's stream\nRMS goes from 5.0 to 47.7 while Peri-LN's and "
        "OLMo 2's stay at 4.8."
    )
    found = quoted_mismatches(stale, sentence, stored_output(notebook, cell_id), printed)
    assert [f.split(":")[0] for f in found] == ["pre1", "pre10", "peri10"], found
    assert "the chapter says 47.7, the output prints" in found[1], found


def test_make_site_installs_the_builder_and_not_the_browser_driver(tmp_path):
    """`make site` is a learner's command: it installs the `site` extra (the builder) only;
    Playwright, the browser tests' driver, is the `browser` extra, which `make test` installs."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    assert not [r for r in extras["site"] if r.lower().startswith("playwright")], extras["site"]
    assert [r for r in extras["browser"] if r.lower().startswith("playwright")]

    def dry_run(target: str) -> str:
        # A venv that does not exist: make -n lists every install step without running one.
        done = subprocess.run(["make", "-n", f"VENV={tmp_path / 'venv'}", target], cwd=ROOT,
                              capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout

    site = dry_run("site")
    assert "'.[site]'" in site and "site/build.py" in site
    assert "browser" not in site and "playwright" not in site.lower()
    assert "'.[browser]'" in dry_run("test")


def test_no_stored_output_shows_a_warning():
    """A warning in a demo's or a lab's output reads to a learner as something they did wrong
    (demo 10's autocast cell showed PyTorch's "Mismatch dtype between input and weight")."""
    shown = []
    for folder in ("notebooks", "labs", "solutions", "es/labs"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
                for output in cell.get("outputs", []):
                    text = "".join(output.get("text", ""))
                    if output.get("name") == "stderr" and "Warning" in text:
                        shown.append(
                            f"{path.relative_to(ROOT)} cell {cell.get('id')}: {text[:160]}"
                        )
    assert shown == [], "\n".join(shown)
