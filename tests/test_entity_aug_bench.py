"""benchmarks/entity_aug.py's Fig. 2 helpers (issue 31): the epoch grid, the curves, their summary and plot."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from script_module import ROOT, load_script

import securevfl


def _benchmark():
    return load_script(ROOT / "benchmarks" / "entity_aug.py", "entity_aug_bench")


bench = _benchmark()


def _report(accuracy, losses):
    return SimpleNamespace(metrics={"accuracy": accuracy}, history=[{"train_loss": v} for v in losses])


@pytest.mark.parametrize(("epochs", "points"), [(30, 8), (20, 8), (60, 8), (8, 3), (5, 10), (1, 4), (7, 1), (2, 2)])
def test_curve_epochs_run_from_one_to_the_last_epoch_increasing(epochs, points):
    grid = bench.curve_epochs(epochs, points)
    assert grid[0] == (1 if points > 1 else epochs) and grid[-1] == epochs
    assert all(a < b for a, b in zip(grid, grid[1:], strict=False)) and len(grid) <= points


def test_curve_epochs_are_geometric_and_refuse_nonsense():
    assert bench.curve_epochs(30, 8) == [1, 2, 3, 4, 7, 11, 18, 30]
    for bad in ((0, 3), (10, 0)):
        with pytest.raises(ValueError, match="curve_epochs"):
            bench.curve_epochs(*bad)


def test_a_curve_takes_each_shorter_run_and_measures_how_far_it_strays_from_a_prefix():
    final = _report(0.9, [2.0, 1.5, 1.0, 0.5])
    calls = []

    def prefix(epochs):
        calls.append(epochs)
        return _report(0.1 * epochs, [2.0, 1.5, 1.0, 0.5][:epochs])

    c = bench.curve(prefix, [1, 2, 4], final)
    assert calls == [1, 2] and c["accuracy"] == [0.1, 0.2, 0.9] and c["prefix_max_loss_diff"] == 0.0
    assert c["train_loss"] == [2.0, 1.5, 1.0, 0.5]
    stray = bench.curve(lambda epochs: _report(0.5, [2.0, 1.25][:epochs]), [1, 2, 4], final)
    assert stray["prefix_max_loss_diff"] == pytest.approx(0.25)


def test_curve_summary_averages_per_epoch_over_seeds_and_the_plot_is_a_png(tmp_path):
    runs = [{"accuracy": [0.2, 0.6], "train_loss": [1.0, 0.5], "prefix_max_loss_diff": 0.0},
            {"accuracy": [0.4, 0.8], "train_loss": [1.1, 0.4], "prefix_max_loss_diff": 1e-9}]
    panel = bench.curve_summary("digits", [1, 2], {"entity_aug": runs}, seeds=[0, 1])
    s = panel["series"]["entity_aug"]
    assert s["accuracy"]["mean"] == pytest.approx([0.3, 0.7])
    assert s["accuracy"]["std"] == pytest.approx([0.1414213, 0.1414213], rel=1e-5)
    assert s["prefix_max_loss_diff"] == 1e-9 and panel["epochs"] == [1, 2] and panel["seeds"] == [0, 1]
    path = tmp_path / "curves.png"
    bench.plot_curves([panel, panel], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_shorter_entity_aug_run_is_a_prefix_of_a_longer_one():
    """What the curves rest on: the accuracy after k epochs of a longer run is the k-epoch run's."""
    kw = dict(parties=3, active_features=0, aligned_ratio=0.3, unaligned="spread", seed=1, alignment="plaintext",
              options={"resolution": "ids"})
    short = securevfl.train("entity-aug", "breast-cancer", epochs=1, **kw)
    long = securevfl.train("entity-aug", "breast-cancer", epochs=2, **kw)
    assert short.history[0]["train_loss"] == long.history[0]["train_loss"]
    assert long.history[1]["train_loss"] != long.history[0]["train_loss"]
