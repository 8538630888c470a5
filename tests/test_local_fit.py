"""engine/local_fit.py: the shared local epoch loop (history, early stopping, best weights restored)."""

import torch
from torch import nn

from securevfl.methods.engine.local_fit import StepLoss, fit_local


def _setup():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    X, y = torch.randn(12, 3), torch.randn(12, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(rows):
        return StepLoss(((model(X[rows]) - y[rows]) ** 2).mean(), weight=len(rows))

    return model, opt, step


def test_history_is_the_row_weighted_mean_per_epoch_and_every_epoch_trains():
    model, opt, step = _setup()
    fit = fit_local([model], opt, 3, lambda epoch: [list(range(0, 8)), list(range(8, 12))], step)
    assert [h["epoch"] for h in fit.history] == [1.0, 2.0, 3.0] and fit.epochs == 3
    assert fit.history[-1]["loss"] < fit.history[0]["loss"]
    assert model.training  # no early stopping: left in training mode


def test_patience_stops_on_the_validation_loss_and_restores_the_best_epoch():
    model, opt, step = _setup()
    scripted, weights = iter([3.0, 2.0, 4.0, 5.0, 1.0]), []

    def validation_loss():
        assert not model.training and not torch.is_grad_enabled()
        weights.append(model.weight.detach().clone())
        return next(scripted)

    fit = fit_local([model], opt, 10, lambda epoch: [list(range(12))], step, patience=2,
                    validation_loss=validation_loss)
    assert (fit.epochs, fit.best_epoch, fit.best_loss) == (4, 2, 2.0)
    assert [h["val_loss"] for h in fit.history] == [3.0, 2.0, 4.0, 5.0]
    assert torch.equal(model.weight, weights[1]) and not model.training
