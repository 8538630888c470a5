"""The run's objective: weighted cross-entropy for imbalanced classes, MSE on a standardised target,
and the metrics that lead for each task."""

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import make_classification

import securevfl
from securevfl.errors import ConfigError
from securevfl.eval import classification_metrics, regression_metrics
from securevfl.methods.engine.objective import balanced_class_weights, make_objective


def test_balanced_weights_are_inverse_class_frequency():
    y = np.array([0] * 90 + [1] * 10)
    assert balanced_class_weights(y, 3) == pytest.approx((100 / (2 * 90), 100 / (2 * 10), 1.0))  # class 2 absent
    weighted = make_objective("classification", y, 2, "balanced")
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    targets = torch.tensor([1, 1])
    # weighted mean over one class equals the unweighted loss; the weight matters across classes
    assert weighted.loss(logits, targets) == pytest.approx(float(torch.nn.functional.cross_entropy(logits, targets)))
    mixed = torch.tensor([0, 1])
    expected = torch.nn.functional.cross_entropy(logits, mixed, weight=torch.tensor(weighted.class_weights))
    assert float(weighted.loss(logits, mixed)) == pytest.approx(float(expected))


def test_regression_targets_are_standardised_and_predictions_mapped_back():
    y = np.array([100.0, 200.0, 300.0])
    objective = make_objective("regression", y, 1)
    z = objective.targets(y)
    assert float(z.mean()) == pytest.approx(0.0, abs=1e-6) and float(z.std(unbiased=False)) == pytest.approx(1.0)
    assert objective.predictions(z.reshape(-1, 1)) == pytest.approx(y)
    assert float(objective.loss(z.reshape(-1, 1), z)) == 0.0


@pytest.mark.parametrize(("args", "message"), [
    (("ranking", np.zeros(3), 2), "unknown task"),
    (("classification", np.zeros(3), 2, "inverse"), "unknown class weighting"),
    (("regression", np.zeros(3), 1, "balanced"), "applies to classification"),
])
def test_objective_settings_are_checked(args, message):
    with pytest.raises(ConfigError, match=message):
        make_objective(*args)


def test_regression_metrics():
    m = regression_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert m["rmse"] == pytest.approx(np.sqrt(1 / 3)) and m["mae"] == pytest.approx(1 / 3)
    assert m["r2"] == pytest.approx(1 - 1 / 2)


def test_imbalanced_binary_tasks_lead_with_auc_and_f1():
    y = np.array([0] * 97 + [1] * 3)
    scores = np.linspace(0, 1, 100)
    assert list(classification_metrics(y, scores)) == ["auc", "f1", "accuracy"]
    balanced = np.array([0, 1] * 50)
    assert list(classification_metrics(balanced, scores)) == ["accuracy", "f1", "auc"]


@pytest.fixture(scope="module")
def imbalanced_csv(tmp_path_factory):
    X, y = make_classification(n_samples=3000, n_features=12, n_informative=6, weights=[0.97], flip_y=0,
                               class_sep=0.8, random_state=3)  # generated: 3 % positives
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(12)])
    frame["id"], frame["label"] = [f"c{i}" for i in range(len(frame))], y
    path = tmp_path_factory.mktemp("imbalanced") / "imbalanced.csv"
    frame.to_csv(path, index=False)
    return f"csv:{path}"


def test_class_weighting_finds_the_rare_class_and_the_report_says_what_to_read(imbalanced_csv):
    kwargs = {"id_column": "id", "label_column": "label", "epochs": 5, "alignment": "plaintext", "parties": 3}
    plain = securevfl.train("local", imbalanced_csv, **kwargs)
    weighted = securevfl.train("local", imbalanced_csv, class_weight="balanced", **kwargs)
    assert plain.metrics["f1"] == 0.0  # the unweighted model never predicts the 3 % class (measured)
    assert weighted.metrics["f1"] > 0.1  # measured 0.19, at accuracy 0.84 against 0.97
    assert list(weighted.metrics)[:2] == ["auc", "f1"]
    note = next(n for n in weighted.notes if n.startswith("imbalanced"))
    assert "3.0 % positives" in note and "class_weight=balanced" in note
    assert weighted.config["train"]["class_weight"] == "balanced"


def test_methods_outside_the_objective_refuse_class_weights():
    with pytest.raises(ConfigError, match="apcvfl does not support class weighting; these methods do: .*splitnn"):
        securevfl.train("apcvfl", epochs=1, class_weight="balanced")
    with pytest.raises(ConfigError, match="hetero-lr does not weight classes"):
        securevfl.train("hetero-lr", epochs=1, class_weight="balanced")
