"""Mining recipes load into typed configs, and bad ones fail with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskforge.mining.recipe import load_recipe, read_sources, recipe_from_dict

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_the_shipped_recipes_load() -> None:
    quick = load_recipe(RECIPES / "quickstart.toml")
    assert quick.name == "quickstart" and quick.sources == ["pypi:iniconfig==2.3.1"] and quick.out == "tasks"
    assert quick.mine.max_tasks == 3 and quick.ray.address == "local" and quick.repo_cpus == quick.sandbox.cpus
    corpus = load_recipe(RECIPES / "corpus.toml")
    assert len(corpus.sources) > 100 and all(s.startswith("pypi:") and "==" in s for s in corpus.sources)


def test_sources_files(tmp_path: Path) -> None:
    listing = tmp_path / "sources.txt"
    listing.write_text("# a comment\npypi:six==1.17.0\n\nhttps://example.org/x.git@v1  # pinned\n")
    assert read_sources(listing) == ["pypi:six==1.17.0", "https://example.org/x.git@v1"]
    tsv = tmp_path / "p.tsv"
    tsv.write_text("name\tversion\ttest_count\nsix\t1.17.0\t10\n")
    assert read_sources(tsv) == ["pypi:six==1.17.0"]
    recipe = recipe_from_dict({"out": "o", "sources": ["pypi:six==1.17.0"], "sources_file": "p.tsv"}, base_dir=tmp_path)
    assert recipe.sources == ["pypi:six==1.17.0"]  # duplicates collapse, order kept


@pytest.mark.parametrize("table,message", [
    ({"out": "o", "sources": ["a"], "minee": {}}, "unknown key"),
    ({"out": "o", "sources": ["a"], "mine": {"max_task": 3}}, "unknown key mine.max_task; valid keys: agent"),
    ({"out": "o", "sources": ["a"], "sandbox": {"memory": 1}}, "unknown key sandbox.memory"),
    ({"out": "o", "sources": ["a"], "mine": {"max_tasks": "10"}}, "mine.max_tasks must be int, got '10'"),
    ({"out": "o", "sources": ["a"], "sandbox": {"cpus": "two"}}, "sandbox.cpus must be float"),
    ({"out": "o", "sources": ["a"], "candidates": {"strategies": "body"}}, "candidates.strategies must be"),
    ({"out": "o", "sources": ["a"], "ray": {"address": "nowhere"}}, "ray.address"),
    ({"out": "o", "sources": ["a"], "mine": {"max_tasks": 0}}, "max_tasks"),
    ({"out": "o", "sources": ["a"], "mine": {"tracebacks": "long-ish"}}, "tracebacks must be one of auto"),
    ({"out": "o", "sources": ["a"], "candidates": {"strategies": ["delete"]}}, "strategies"),
    ({"out": "o"}, "no sources"),
    ({"sources": ["a"]}, "no `out`"),
])
def test_bad_recipes_name_the_problem(table, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        recipe_from_dict(table)


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("out = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_recipe(bad)


def test_the_llm_table_reaches_the_agent_and_writer_config(tmp_path: Path) -> None:
    recipe_file = tmp_path / "llm.toml"
    recipe_file.write_text('out = "o"\nsources = ["pypi:six==1.17.0"]\n[mine]\nagent = "llm"\nwriter = "llm"\n'
                           '[llm]\nbase_url = "http://gpu-node:8000/v1"\nmodel = "Qwen/Qwen3-32B"\n'
                           'api_key_env = "VLLM_KEY"\nmax_turns = 12\ninput_cost_per_1m = 0.5\n')
    recipe = load_recipe(recipe_file)
    llm = recipe.mine.llm
    assert (recipe.mine.agent, recipe.mine.writer) == ("llm", "llm")
    assert (llm.base_url, llm.model, llm.api_key_env, llm.max_turns, llm.input_cost_per_1m) == (
        "http://gpu-node:8000/v1", "Qwen/Qwen3-32B", "VLLM_KEY", 12, 0.5)
    table = recipe.to_dict()
    assert table["llm"]["model"] == "Qwen/Qwen3-32B" and "llm" not in table["mine"]
    again = recipe_from_dict({**table, "candidates": table["mine"].pop("candidates")})  # as the CLI rebuilds it
    assert again.mine == recipe.mine


@pytest.mark.parametrize("table,message", [
    ({"mine": {"agent": "llm"}}, "llm.model must name the model"),
    ({"mine": {"writer": "llm"}, "llm": {"base_url": "gpu-node:8000"}}, "llm.base_url"),
    ({"llm": {"modle": "x"}}, "unknown key llm.modle"),
    ({"mine": {"llm": {"model": "x"}}}, "top-level"),
])
def test_bad_llm_settings_name_the_problem(table, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        recipe_from_dict({"out": "o", "sources": ["a"], **table})
