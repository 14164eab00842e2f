"""Registrations of a feature beyond module-level code: a command-line option with the branch it
guards (argparse and click), and the entry points that name the feature in pyproject.toml or
setup.cfg. Features are found from a real per-test coverage map; the removal leaves a package that
imports, whose other tests pass."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from taskforge.mining.removal.cst import LibcstRemovalAgent
from taskforge.mining.removal.feature import drop_entry_points
from taskforge.mining.removal.switches import cut_switches, package_switches
from taskforge.repo.symbols import SymbolIndex, build_index
from tests.unit.test_features import (
    apply,
    features_of,
    imports_cleanly,
    per_test_coverage,
    run_suite,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "tabular"


@pytest.fixture
def tabular(tmp_path: Path) -> tuple[Path, SymbolIndex, dict[str, Any]]:
    repo = tmp_path / "tabular"
    shutil.copytree(FIXTURE, repo)
    coverage = per_test_coverage(repo, sources=["tab"], tests="tests", pythonpath=".", scratch=tmp_path / "cov")
    assert len(coverage) == 9
    return repo, build_index(repo, package_paths=["tab"]), coverage


def test_a_feature_behind_a_command_line_option_goes_with_its_option(
        tabular: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = tabular
    features = features_of(repo, index, coverage)
    # The tests of main (the CLI's four) reach main and the parser too: that is a feature of its own.
    assert any({"tab.cli:main", "tab.markdown:render_markdown"} <= set(f.members) for f in features)
    # cli.main calls render_markdown, but only in the branch --markdown guards: a registration.
    markdown = next(f for f in features if "tab.markdown:render_markdown" in f.members and "tab.cli:main" not in f.members)
    assert set(markdown.members) == {"tab.markdown:render_markdown", "tab.markdown:_widths", "tab.markdown:_line",
                                     "tab.markdown:ALIGN"}
    assert markdown.tests == {"tests/test_markdown.py::test_cli_markdown",
                              "tests/test_markdown.py::test_cli_markdown_right_aligned"}
    assert "tab/cli.py" in markdown.files

    removal = LibcstRemovalAgent().remove(repo, index, target=markdown.anchor, strategy="feature",
                                          members=markdown.members)
    assert removal.options == ("--markdown",)
    assert removal.files["tab/markdown.py"] is None  # nothing left in it
    cli = removal.files["tab/cli.py"]
    assert cli is not None
    assert "markdown" not in cli  # the import, the option and the branch
    assert 'parser.add_argument("--sort", action="store_true"' in cli and "if args.sort:" in cli
    assert "    return render_csv(rows)\n" in cli
    assert "pyproject.toml" not in removal.files  # its one script, main, stays

    apply(repo, removal.files)
    assert imports_cleanly(repo, ["tab", "tab.cli"], ".") == ""
    outcomes = run_suite(repo, "tests", ".")
    assert {t: o for t, o in outcomes.items() if t.startswith("tests/test_csv.py")} == dict.fromkeys([
        f"tests/test_csv.py::test_{name}" for name in ("parse_rows", "render_csv", "cli_csv_sorted", "cli_csv_from_file",
                                                       "parse_rows_strips_cells", "render_csv_one_row", "cli_csv_unsorted")
    ], "PASSED")
    assert outcomes["tests/test_markdown.py::test_cli_markdown"] == "FAILED"  # argparse: unrecognized argument


def test_an_option_read_outside_its_branches_keeps_what_it_guards(tabular: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, _ = tabular
    cli = (repo / "tab" / "cli.py").read_text()
    # --sort is read only by `if args.sort:` too; make it read elsewhere as well.
    (repo / "tab" / "cli.py").write_text(cli.replace("    return render_csv(rows)", "    return render_csv(rows) if args.markdown or True else args.sort"))
    index = build_index(repo, package_paths=["tab"])
    switches = package_switches(index, {p: (repo / p).read_text() for p in index.modules.values()})
    assert {o.spelling for o in switches.options.values()} == set()  # both now read outside a branch
    assert switches.cuts_for("tab.cli:main", ["render_markdown"]) is None


CLICK = '''import click

from .render import fancy, plain


@click.command()
@click.option("--fancy", "use_fancy", is_flag=True, help="fancy output")
@click.option("--width", default=80)
@click.option("--color/--no-color", default=False)
def main(text, use_fancy, width, color):
    """Print the text."""
    if use_fancy:
        out = fancy(text, width)
    elif color:
        out = plain(text).upper()
    else:
        out = plain(text)
    click.echo(out)
'''


def test_click_options_cut_with_their_parameter_and_elif_chains_keep_their_other_arms(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(CLICK)
    (pkg / "render.py").write_text("def fancy(text, width):\n    return text.center(width, '*')\n\n\ndef plain(text):\n    return text\n")
    index = build_index(tmp_path, package_paths=["pkg"])
    switches = package_switches(index, {p: (tmp_path / p).read_text() for p in index.modules.values()})
    # --width has a default (never a switch); --color/--no-color is an on/off pair.
    assert sorted(o.spelling for o in switches.options.values()) == ["--fancy"]
    cuts = switches.cuts_for("pkg.cli:main", ["fancy"])
    assert cuts is not None and [o.spelling for o in cuts] == ["--fancy"]
    assert switches.cuts_for("pkg.cli:main", ["plain"]) is None  # read outside the switch
    text, cut = cut_switches(CLICK, cuts)
    assert cut == {"--fancy"}
    assert "use_fancy" not in text and '"--fancy"' not in text and "fancy(" not in text
    assert "def main(text, width, color):" in text
    assert "    if color:\n        out = plain(text).upper()\n    else:\n        out = plain(text)\n" in text
    compile(text, "cli.py", "exec")


ARGPARSE_ELSE = '''import argparse


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quiet", action="store_false", dest="verbose")
    args = parser.parse_args(argv)
    if args.json:
        return to_json(argv)
    else:
        result = str(argv)
    if args.verbose:
        print(result)
    return result


def to_json(value):
    import json
    return json.dumps(value)
'''


def test_a_switch_with_an_else_becomes_its_else_and_options_on_by_default_stay(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(ARGPARSE_ELSE)
    index = build_index(tmp_path, package_paths=["pkg"])
    switches = package_switches(index, {p: (tmp_path / p).read_text() for p in index.modules.values()})
    assert sorted(o.spelling for o in switches.options.values()) == ["--json"]  # --quiet is store_false
    cuts = switches.cuts_for("pkg.cli:main", ["to_json"])
    assert cuts is not None
    text, cut = cut_switches(ARGPARSE_ELSE, cuts)
    assert cut == {"--json"}
    assert "    args = parser.parse_args(argv)\n    result = str(argv)\n    if args.verbose:" in text
    compile(text, "cli.py", "exec")


def test_entry_points_of_removed_objects_leave_pyproject_and_setup_cfg(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .extra import shout\n")
    (pkg / "extra.py").write_text("def shout(t):\n    return t.upper()\n")
    (pkg / "gone.py").write_text("def run():\n    pass\n")
    (pkg / "main.py").write_text("def main():\n    pass\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\n\n[project.scripts]\npkg = "pkg.main:main"\nshout = "pkg:shout"\n'
        '\n[tool.poetry.plugins."pkg.ext"]\n"runner" = "pkg.gone:run"\n\n[tool.other]\nshout = "pkg:shout"\n')
    (tmp_path / "setup.cfg").write_text(
        "[metadata]\nname = pkg\n\n[options.entry_points]\nconsole_scripts =\n    pkg = pkg.main:main\n"
        "    shout = pkg.extra:shout [loud]\n")
    index = build_index(tmp_path, package_paths=["pkg"])
    changed = drop_entry_points(tmp_path, index, {"pkg.extra:shout"}, {"pkg.gone"})
    assert changed["pyproject.toml"] == ('[project]\nname = "pkg"\n\n[project.scripts]\npkg = "pkg.main:main"\n'
                                         '\n[tool.poetry.plugins."pkg.ext"]\n\n[tool.other]\nshout = "pkg:shout"\n')
    assert changed["setup.cfg"] == "[metadata]\nname = pkg\n\n[options.entry_points]\nconsole_scripts =\n    pkg = pkg.main:main\n"
    assert drop_entry_points(tmp_path, index, {"pkg.main:other"}, set()) == {}


def test_the_statement_names_the_options_that_went_with_the_feature() -> None:
    from taskforge.mining.statements.template import (
        StatementContext,
        TemplateStatementWriter,
    )

    statement = TemplateStatementWriter().write(StatementContext(
        repo="tabular", strategy="feature", target="tab.markdown:render_markdown", module_path="tab/markdown.py",
        symbols=(), hidden_tests=("tests/test_markdown.py::test_cli_markdown",), removed_code={},
        files=("tab/cli.py", "tab/markdown.py"), remaining={"tab/cli.py": ("build_parser", "main")},
        options=("--markdown",)))
    assert "- The command line ran it through `--markdown`, which went with it: that option must work again." in statement
    assert "- `tab/cli.py` still has `build_parser`, `main`." in statement
