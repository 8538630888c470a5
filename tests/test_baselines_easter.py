"""The EASTER paper's baselines: C-VFL compression, Agg-VFL, and the heterogeneous model zoo."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import securevfl
from securevfl.errors import ConfigError
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.cvfl import compress, decompress, dequantize, payload_bytes, quantize
from securevfl.networks.zoo import IMAGE_ZOO, TABULAR_ZOO, build_local_model, pick_architecture

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=50, deadline=None)
@given(x=arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 9)), elements=finite),
       bits=st.integers(1, 16))
def test_quantisation_error_is_at_most_half_a_level(x, bits):
    message = quantize(x, bits)
    back = dequantize(message).reshape(x.shape)
    assert np.max(np.abs(back - x)) <= message["scale"] / 2 * (1 + 1e-4) + 1e-3


@settings(max_examples=30, deadline=None)
@given(x=arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(2, 12)), elements=finite),
       ratio=st.floats(0.05, 1.0))
def test_topk_keeps_the_largest_entries_of_each_row(x, ratio):
    back = decompress(compress(x, "topk", topk_ratio=ratio))
    k = max(1, int(round(ratio * x.shape[1])))
    assert np.all(np.count_nonzero(back, axis=1) <= k)
    kept = back != 0
    np.testing.assert_array_equal(back[kept], x[kept])
    for row, row_back in zip(x, back, strict=True):  # nothing dropped is larger than what is kept
        dropped = np.abs(row[row_back == 0])
        if dropped.size and np.any(row_back != 0):
            assert dropped.max() <= np.abs(row_back[row_back != 0]).min() + 1e-6


def test_compression_ratios_are_what_the_encoding_promises():
    x = np.random.default_rng(0).normal(size=(128, 128)).astype(np.float32)
    raw = x.nbytes
    assert payload_bytes(compress(x, "none")) == raw
    assert payload_bytes(compress(x, "quant", bits=8)) / raw == pytest.approx(0.25, abs=1e-3)
    assert payload_bytes(compress(x, "quant", bits=4)) / raw == pytest.approx(0.125, abs=1e-3)
    assert payload_bytes(compress(x, "topk", topk_ratio=0.25)) / raw == pytest.approx(0.25 * 5 / 4, abs=1e-3)
    both = compress(x, "both", bits=8, topk_ratio=0.25)
    assert payload_bytes(both) / raw == pytest.approx(0.25 * 2 / 4, abs=1e-3)
    assert np.max(np.abs(decompress(compress(x, "quant", bits=8)) - x)) < (x.max() - x.min()) / 255


def test_zoo_gives_heterogeneous_or_homogeneous_architectures():
    report = securevfl.train("easter", "digits", parties=4, epochs=1, batch_size=256, device="cpu",
                             alignment="plaintext", options={"secagg": "none", "embedding_size": 16})
    archs = report.extra["architectures"]
    assert len(set(archs.values())) == 4 and set(archs.values()) <= {a.name for a in IMAGE_ZOO}
    assert {a.name for a in TABULAR_ZOO} != {a.name for a in IMAGE_ZOO}


def test_local_model_shapes():
    from securevfl.data.scenario import PartyData

    data = PartyData("p", ("a", "b", "c"), np.zeros((4, 3)), np.zeros((2, 3)), np.zeros((0, 3)),
                     np.arange(4), np.arange(0), n_classes=3)
    for i in range(4):
        arch = pick_architecture(data, i, "hetero")
        model = build_local_model(data, arch, 8, 3, seed=0, party="p")
        assert model(torch.zeros(5, 3)).shape == (5, 3)
        assert model.embed(torch.zeros(5, 3)).shape == (5, 8)
    assert pick_architecture(data, 2, "homo") == pick_architecture(data, 0, "homo")


def _train(method: str, **options):
    return securevfl.train(method, "breast-cancer", parties=4, epochs=3, batch_size=64, device="cpu",
                           alignment="plaintext", options={"embedding_size": 32, **options})


def test_cvfl_trains_and_reports_its_compression_ratio():
    report = _train("cvfl", compress="both", bits=4, topk_ratio=0.5)
    assert report.metrics["accuracy"] > 0.8
    ratio = report.extra["compression_ratio"]
    assert 0 < ratio < 0.4
    assert report.extra["embedding_payload_bytes"] < report.extra["embedding_raw_bytes"]


def test_aggvfl_trains_with_plain_and_secure_sums_alike():
    plain = _train("aggvfl")
    secure = _train("aggvfl", secagg="dh")
    assert plain.metrics["accuracy"] > 0.8
    np.testing.assert_allclose([h["train_loss"] for h in secure.history],
                               [h["train_loss"] for h in plain.history], atol=5e-3)
    assert "secagg.mask" in secure.cost["crypto_s"]


def test_baseline_options_are_validated():
    with pytest.raises(ConfigError, match="compress must be"):
        create_method("cvfl", TrainConfig(options={"compress": "zip"}))
    with pytest.raises(ConfigError, match="bits must be"):
        create_method("cvfl", TrainConfig(options={"bits": 0}))
    with pytest.raises(ConfigError, match="secagg must be"):
        create_method("aggvfl", TrainConfig(options={"secagg": "rot13"}))


def _count_optimizer_steps(monkeypatch) -> list[int]:
    calls = [0]
    step = torch.optim.Adam.step

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counted)
    return calls


@pytest.mark.parametrize(("method", "steps", "per_batch"), [
    ("cvfl", 3, 4 * 3),  # C-VFL's Q: every party (active with features + 3 passive) steps Q times
    ("aggvfl", "1,2,3,1", 1 + 2 + 3 + 1),  # Agg-VFL: each party its own number of local updates
])
def test_local_steps_make_more_updates_per_exchange_and_send_the_same(monkeypatch, method, steps, per_batch):
    calls = _count_optimizer_steps(monkeypatch)
    extra = {"compress": "none"} if method == "cvfl" else {}
    one = _train(method, **extra)  # local_steps=1
    updates_one = calls[0]
    calls[0] = 0
    many = _train(method, local_steps=steps, **extra)
    assert calls[0] * 4 == updates_one * per_batch  # 4 optimiser steps per batch with one local step
    assert many.cost["comm"]["bytes"] == one.cost["comm"]["bytes"]  # one exchange per batch, whatever Q
    assert many.history[-1]["train_loss"] != one.history[-1]["train_loss"]
    assert many.metrics["accuracy"] > 0.8


def test_local_steps_are_validated():
    with pytest.raises(ConfigError, match="local_steps"):
        create_method("cvfl", TrainConfig(options={"local_steps": 0}))
    with pytest.raises(ConfigError, match="local_steps"):
        create_method("aggvfl", TrainConfig(options={"local_steps": "2,x"}))
    with pytest.raises(ConfigError, match="one per party"):
        _train("aggvfl", local_steps="1,2")


def test_paper_zoo_gives_lenet_mlp_and_cnn_on_image_strips():
    from securevfl.data.scenario import PartyData

    for shape in ((8, 2), (28, 7)):
        n = shape[0] * shape[1]
        data = PartyData("p", tuple(f"c{i}" for i in range(n)), np.zeros((4, n)), np.zeros((2, n)),
                         np.zeros((0, n)), np.arange(4), np.arange(0), n_classes=10, strip_shape=shape)
        names = [pick_architecture(data, i, "hetero", "paper").name for i in range(4)]
        assert names == ["lenet", "mlp-256", "cnn-32-64", "lenet"]
        lenet = build_local_model(data, pick_architecture(data, 0, "hetero", "paper"), 120, 10, seed=0, party="p")
        kernels = [m.kernel_size for m in lenet.modules() if isinstance(m, torch.nn.Conv2d)]
        assert kernels == [(5, 5), (5, 5)]
        assert lenet(torch.zeros(3, n)).shape == (3, 10) and lenet.embed(torch.zeros(3, n)).shape == (3, 120)
    tabular = PartyData("p", ("a", "b"), np.zeros((4, 2)), np.zeros((2, 2)), np.zeros((0, 2)), np.arange(4),
                        np.arange(0), n_classes=2)
    assert pick_architecture(tabular, 1, "hetero", "paper") == pick_architecture(tabular, 1, "hetero")
    with pytest.raises(ConfigError, match="zoo must be"):
        create_method("easter", TrainConfig(options={"zoo": "resnet"}))


def test_el_pl_gives_every_party_an_mlp_with_that_many_embedding_and_decision_layers():
    from securevfl.networks.zoo import layered_architecture

    report = securevfl.train("easter", "breast-cancer", parties=3, epochs=2, batch_size=64, device="cpu",
                             alignment="plaintext", early_stopping=5,
                             options={"secagg": "none", "embedding_size": 8, "el_pl": "2:1"})
    assert set(report.extra["architectures"].values()) == {"mlp-el2-pl1"}
    assert [h["epoch"] for h in report.history if "val_accuracy" in h] == [1, 2]  # early stopping records it too
    assert report.metrics["auc"] > 0.6, report.metrics  # a random ranking scores 0.5; measured 0.75 after 2 epochs
    from securevfl.data.scenario import PartyData

    data = PartyData("p", ("a", "b", "c"), np.zeros((4, 3)), np.zeros((2, 3)), np.zeros((0, 3)),
                     np.arange(4), np.arange(0), n_classes=2)
    for ratio, (el, pl) in {"1:1": (1, 1), "2:1": (2, 1), "1:2": (1, 2)}.items():
        model = build_local_model(data, layered_architecture(ratio), 8, 2, seed=0, party="p")
        assert sum(isinstance(m, torch.nn.Linear) for m in model.embed.modules()) == el
        assert sum(isinstance(m, torch.nn.Linear) for m in model.decide.modules()) == pl
    with pytest.raises(ConfigError, match="el_pl"):
        create_method("easter", TrainConfig(options={"el_pl": "0:1"}))
