"""The user's goal: ``--target`` / ``--budget`` replace a sized campaign's, and the run says what
they cost before it starts."""

from __future__ import annotations

import math

import pytest

from refspec.campaigns.definitions import load_definition
from refspec.campaigns.sizing import budget_shares, goal_args, goal_text, resolve_size, run_goals, with_goal
from refspec.core.config import load_config
from refspec.core.errors import ConfigError
from refspec.pipeline.main import config_override, with_config


def _implementation():
    defn = load_definition("implementation")[0]
    return defn, len(defn["arms"]) + 1, 2  # the arms and the A/A twin, HumanEval/0-1


def test_goal_replaces_the_definitions_target_and_budget():
    defn, _, _ = _implementation()
    out = with_goal(defn, 1.05, 1234.0)
    assert out["sizing"]["target"] == 1.05 and out["sizing"]["budget_s"] == 1234.0
    assert defn["sizing"]["target"] != 1.05  # the loaded definition is not changed in place
    assert with_goal(defn) is defn
    unsized = dict(defn, sizing=None)
    assert with_goal(unsized, 1.05, 10.0) is unsized  # nothing sizes a definition without sizing


@pytest.mark.parametrize("target,budget", [(1.0, None), (0.97, None), (None, 0.0), (None, -5.0)])
def test_a_goal_that_means_nothing_is_refused(target, budget):
    with pytest.raises(ConfigError):
        with_goal(_implementation()[0], target, budget)


def test_a_larger_budget_reaches_the_target_a_smaller_one_says_what_it_would_cost():
    defn, arms, tasks = _implementation()
    short = resolve_size(with_goal(defn, 1.05, 300.0), arms, tasks)["sizing"]["plan"]
    assert not short["reachable"] and short["expected_detectable"] > 1.05
    cost = float(short["reason"].split("would cost ")[1].split(" s")[0])
    enough = resolve_size(with_goal(defn, 1.05, cost * 1.01), arms, tasks)["sizing"]["plan"]
    assert enough["reachable"] and enough["expected_detectable"] <= 1.05
    assert enough["expected_seconds"] <= cost * 1.01
    assert enough["processes"] > short["processes"]


def test_the_run_budget_is_dealt_out_in_proportion():
    shares = budget_shares(1800.0, {"a": 380.0, "b": 300.0, "c": 240.0})
    assert math.isclose(math.fsum(shares.values()), 1800.0)
    assert math.isclose(shares["a"] / shares["b"], 380 / 300)
    assert budget_shares(100.0, {}) == {}


def test_run_goal_reaches_every_sized_campaign_and_is_said_before_it_starts():
    cfg = load_config().replace(target=1.05, budget=1800.0)
    goals = run_goals(cfg)
    assert set(goals) == {"confirmation", "implementation", "replication"}  # the sized (paired) ones
    assert math.isclose(math.fsum(b for _, b in goals.values()), 1800.0)
    assert all(t == 1.05 for t, _ in goals.values())
    assert goal_args(cfg, "implementation").startswith(" --target 1.05 --budget ")
    assert goal_args(cfg, "width") == ""  # not sized
    assert goal_args(load_config(), "implementation") == ""  # no goal: the definitions' own
    text = goal_text(cfg)
    for c in goals:
        assert f"  {c}: sizing" in text
    assert "(target 1.05)" in text and "(target 1.03)" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "(target 1.03)" in goal_text(load_config())


def test_snakemake_config_keeps_one_list():
    assert with_config(["-n"], {"target": 1.05, "budget": None}) == ["-n", "--config", "target=1.05"]
    extra = with_config(["--config", "results=r", "-n"], {"target": 1.05, "budget": 60.0})
    assert extra == ["--config", "target=1.05", "budget=60.0", "results=r", "-n"]
    assert config_override(extra, "results", "x") == "r" and config_override(extra, "budget", None) == "60.0"
    assert with_config(["--config=results=r"], {"target": 1.1}) == ["--config", "results=r", "target=1.1"]
    assert with_config([], {"target": None}) == []
