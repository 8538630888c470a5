"""APC-VFL, its baselines, VFedTrans/FedSVD and the paper's partition presets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.data import PartitionSpec, load_dataset, partition
from securevfl.errors import ConfigError
from securevfl.federation.codec import encode
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.apcvfl import (
    BREAST_CANCER_ACTIVE,
    APCOptions,
    PaperLayout,
    apc_footprint_bytes,
    apc_layout_spec,
    probe_on_student,
)
from securevfl.methods.apcvfl.fedsvd import (
    fedsvd_footprint_bytes,
    generate_masks,
    mask_block,
    server_svd,
    unmask_left,
)
from securevfl.methods.apcvfl.models import apc_loss, build_autoencoder
from securevfl.methods.apcvfl.probe import cross_validate_probe

FAST = dict(epochs=3, batch_size=64, device="cpu", alignment="plaintext")


pytestmark = pytest.mark.one_torch_thread  # tests/conftest.py


@pytest.fixture(scope="module")
def bc_apc():
    return securevfl.train("apcvfl", "breast-cancer", preset="apcvfl-paper-a2", aligned=250, **FAST,
                           options={"cv_folds": 3})


# -- the single exchange ----------------------------------------------------------------------

def test_passive_sends_exactly_one_message_of_the_aligned_latents(bc_apc):
    comm = bc_apc.cost["comm"]
    assert comm["messages"] == {"passive1->active": 1}
    assert bc_apc.cost["rounds"] == 1
    payload = comm["bytes"]["passive1->active"]
    assert payload == len(encode(torch.zeros(250, 256)))
    assert 0 <= payload - 250 * 256 * 4 < 64  # Appendix E.1: |D_A| x z_p x 4 bytes, plus framing
    extra = bc_apc.extra["communication"]
    assert extra["paper_footprint_bytes"] == apc_footprint_bytes(250, [256]) == 256_000
    assert extra["measured_payload_bytes"] == payload


def test_active_trains_on_aligned_and_unaligned_rows_and_reports_cv(bc_apc):
    assert bc_apc.extra["probe_rows"] == 200 + 250  # aligned training rows + its unaligned rows
    assert bc_apc.extra["cv"]["rows"] == 500 and bc_apc.extra["cv"]["folds"] == 3
    assert set(bc_apc.extra["stages"]) == {"g1_active", "g2_joint", "g3_student"}
    assert bc_apc.metrics["accuracy"] > 0.7, bc_apc.metrics  # the majority class is 0.63 of the rows; measured 0.78


def test_more_than_one_message_would_fail_the_run():
    """The active role asks each passive party for exactly one message: a passive party that
    sends its latents and leaves is all it needs (a second recv would time out)."""
    scenario = build_scenario(RunConfig(dataset="breast-cancer", alignment="plaintext",
                                        partition=PartitionSpec(preset="apcvfl-paper-a3", aligned=120)))
    method = create_method("apcvfl", TrainConfig(epochs=2, batch_size=128, options={"max_epochs": 2}))
    roles = method.roles(scenario)
    result = run_parties(roles, active=scenario.active, recv_timeout=60)
    assert result.results["passive1"] is None
    assert result.meters["passive1"].snapshot().messages == {"passive1->active": 1}
    assert result.results["active"].scores.shape == (50, 2)


def test_the_classifier_predicts_from_the_active_party_alone():
    """Step 4 needs only the active party's PartyData and its own student encoder: a one-party
    scenario (no passive party exists at all) still yields test-row scores."""
    scenario = build_scenario(RunConfig(dataset="breast-cancer", alignment="plaintext",
                                        partition=PartitionSpec(parties=1, aligned_ratio=0.5, unaligned="active")))
    data = scenario.party_data(scenario.active)
    g3 = build_autoencoder(data.n_features, (32, 16), 0, "g3")
    outcome = probe_on_student(data, g3, APCOptions(cv_folds=0), TrainConfig(), "cpu")
    assert outcome.scores.shape == (len(data.X_test), 2)
    assert np.allclose(outcome.scores.sum(axis=1), 1.0)
    assert outcome.extra["probe_rows"] == len(data.X_train) + len(data.X_unaligned)


# -- Eq. 5: distillation on aligned rows only -------------------------------------------------

def _batch(n=6, d=3, z=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, x_hat = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    zs, teacher = torch.randn(n, z, generator=g), torch.randn(n, z, generator=g)
    return x, x_hat, zs, teacher


def test_distillation_term_known_values():
    x, x_hat, z, t = _batch()
    mask = torch.tensor([True, False, True, False, False, True])
    recon = ((x - x_hat) ** 2).sum(1)
    mse = ((z - t) ** 2).sum(1) * mask
    mae = (z - t).abs().sum(1) * mask
    assert torch.allclose(apc_loss(x, x_hat, z, t, mask, 0.01, "mse"), (recon + 0.01 * mse).mean())
    assert torch.allclose(apc_loss(x, x_hat, z, t, mask, 0.5, "mae"), (recon + 0.5 * mae).mean())
    no_rows = torch.zeros(6, dtype=torch.bool)
    assert torch.allclose(apc_loss(x, x_hat, z, t, no_rows, 0.01, "mse"), recon.mean())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), mask_bits=st.lists(st.booleans(), min_size=6, max_size=6),
       kind=st.sampled_from(["mse", "mae"]))
def test_unaligned_rows_never_see_the_teacher(seed, mask_bits, kind):
    x, x_hat, z, t = _batch(seed=seed)
    mask = torch.tensor(mask_bits)
    changed = t.clone()
    changed[~mask] = 1e6  # garbage where there is no joint latent
    assert torch.equal(apc_loss(x, x_hat, z, t, mask, 0.01, kind), apc_loss(x, x_hat, z, changed, mask, 0.01, kind))
    decoder = torch.randn(z.shape[1], x.shape[1], generator=torch.Generator().manual_seed(seed))

    def grad(teacher, rows):
        leaf = z.clone().requires_grad_(True)
        apc_loss(x, leaf @ decoder, leaf, teacher, rows, 0.01, kind).backward()
        return leaf.grad

    with_teacher, recon_only = grad(t, mask), grad(t, torch.zeros_like(mask))
    assert torch.allclose(with_teacher[~mask], recon_only[~mask])  # unaligned rows: reconstruction only
    assert torch.allclose(with_teacher[~mask], grad(changed, mask)[~mask])
    if mask.any():
        assert not torch.allclose(with_teacher[mask], recon_only[mask])


def test_options_are_validated():
    with pytest.raises(ConfigError):
        APCOptions(distill_loss="huber")
    with pytest.raises(ConfigError):
        APCOptions(joint_encoder="256,128", student_encoder="256,256")
    with pytest.raises(ConfigError):
        create_method("apcvfl", TrainConfig(options={"lambda": 1}))


# -- presets (Appendix A) ---------------------------------------------------------------------

@pytest.mark.parametrize("a,expected", [
    (2, ["mean texture", "worst fractal dimension"]),
    (3, ["worst compactness", "mean texture", "worst fractal dimension"]),
    (4, ["worst compactness", "concave points error", "mean texture", "worst fractal dimension"]),
    (5, list(BREAST_CANCER_ACTIVE)),
])
def test_breast_cancer_preset_matches_appendix_a(a, expected):
    import securevfl.methods  # noqa: F401  (registers the presets)

    data = partition(load_dataset("breast-cancer"), PartitionSpec(preset=f"apcvfl-paper-a{a}", aligned=200))
    active, passive = data.tables["active"], data.tables["passive1"]
    assert list(active.feature_names) == expected
    assert set(passive.feature_names) == set(load_dataset("breast-cancer").feature_columns) - set(expected)
    assert active.n_rows == 500 and len(data.test_ids) == 50
    shared = set(active.ids) & set(passive.ids)
    assert len(shared) == 200 and data.test_ids <= shared
    assert passive.n_rows == 569 - 500 + 200


def test_default_preset_is_the_initial_partition():
    scenario = build_scenario(RunConfig(alignment="plaintext", partition=PartitionSpec(preset="apcvfl-paper")))
    assert scenario.tables["active"].feature_names == BREAST_CANCER_ACTIVE
    assert scenario.alignment.size == 250


def _credit_csv(path, n=900, kaggle_names=False):
    rng = np.random.default_rng(0)
    cols = {f"X{i}": rng.normal(size=n) for i in range(1, 24)}
    y = (cols["X6"] + cols["X1"] + 0.5 * rng.normal(size=n) > 0).astype(int)
    frame = pd.DataFrame({"ID": [f"c{i}" for i in range(n)], **cols, "Y": y})
    if kaggle_names:
        from securevfl.methods.apcvfl import CREDIT_ALIASES

        frame = frame.rename(columns=CREDIT_ALIASES)
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("kaggle_names", [False, True])
def test_credit_card_preset_on_a_generated_csv(tmp_path, kaggle_names):
    path = _credit_csv(tmp_path / "credit.csv", kaggle_names=kaggle_names)
    report = securevfl.train("apcvfl", f"csv:{path}", id_column="ID", label_column="Y",
                             preset="apcvfl-paper-a3", aligned=200, **FAST)
    expected = ["X3", "X9", "X11"] if not kaggle_names else ["EDUCATION", "PAY_4", "PAY_6"]
    assert report.parties["active"]["features"] == 3 and report.parties["passive1"]["features"] == 20
    assert report.parties["active"]["rows"] == 600 and report.parties["active"]["aligned"] == 200
    assert report.cost["comm"]["messages"] == {"passive1->active": 1}
    dataset = load_dataset(f"csv:{path}", securevfl.data.DatasetOptions(id_column="ID", label_column="Y"))
    spec = partition(dataset, PartitionSpec(preset="apcvfl-paper-a3", aligned=200))
    assert list(spec.tables["active"].feature_names) == expected


def test_preset_rejects_other_datasets():
    import securevfl.methods  # noqa: F401

    with pytest.raises(ConfigError, match="Breast Cancer"):
        partition(load_dataset("digits"), PartitionSpec(preset="apcvfl-paper"))


def test_the_paper_layout_on_any_table_with_named_active_features():
    """``apc_layout_spec``: Appendix A's row layout with the active features a caller names (apcvfl_tables.py)."""
    ds = load_dataset("breast-cancer")
    active = ["mean radius", "mean area"]
    spec = apc_layout_spec(ds, PartitionSpec(aligned=120, seed=1), active, PaperLayout(300, 20, 150))
    data = partition(ds, spec)
    assert list(data.tables["active"].feature_names) == active and data.tables["active"].n_rows == 300
    assert len(set(data.tables["active"].ids) & set(data.tables["passive1"].ids)) == 120
    assert len(data.test_ids) == 20 and data.tables["passive1"].n_rows == 569 - 300 + 120
    with pytest.raises(ConfigError, match="not features"):
        apc_layout_spec(ds, PartitionSpec(aligned=120), ["no such column"], PaperLayout(300, 20, 150))


def test_probe_cross_validation_reports_auc_for_two_classes_only():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(120, 3))
    binary = cross_validate_probe(Z, (Z[:, 0] > 0).astype(int), 3, 0, 2)
    assert binary["auc"] > 0.95 and len(binary["auc_folds"]) == 3
    shuffled = cross_validate_probe(Z, rng.permutation((Z[:, 0] > 0).astype(int)), 3, 0, 2)
    assert shuffled["auc"] < binary["auc"] - 0.2
    assert "auc" not in cross_validate_probe(Z, np.digitize(Z[:, 0], [-0.5, 0.5]), 3, 0, 3)


# -- other datasets and baselines -------------------------------------------------------------

@pytest.mark.parametrize("dataset,kw", [
    ("digits", dict(parties=3, aligned=400, unaligned="active")),
    ("synthetic", dict(n_samples=400, n_features=10, aligned=150, unaligned="disjoint", active_features=3)),
])
def test_apcvfl_runs_on_digits_and_synthetic(dataset, kw):
    report = securevfl.train("apcvfl", dataset, **FAST, **kw)
    passives = [p for p in report.parties if p != "active"]
    assert report.cost["comm"]["messages"] == {f"{p}->active": 1 for p in passives}
    assert report.metrics["accuracy"] > 1.5 / len(load_dataset(dataset, securevfl.data.DatasetOptions(
        n_samples=400, n_features=10)).classes)


def test_ablation_and_local_logreg_do_not_communicate():
    for method in ("apcvfl-ablation", "local-logreg"):
        report = securevfl.train(method, "breast-cancer", preset="apcvfl-paper-a4", aligned=150, **FAST,
                                 options={"cv_folds": 3})
        assert report.cost["comm"]["messages"] == {}
        assert report.extra["cv"]["rows"] == 500


def test_apcvfl_splitnn_uses_one_message_for_train_and_test_latents():
    report = securevfl.train("apcvfl-splitnn", "breast-cancer", preset="apcvfl-paper", aligned=100, **FAST)
    assert report.cost["comm"]["messages"] == {"passive1->active": 1}
    assert report.extra["communication"]["aligned_rows_exchanged"] == 100  # 50 training + 50 test rows


# -- VFedTrans and FedSVD ---------------------------------------------------------------------

def test_fedsvd_is_lossless_under_the_masks():
    rng = np.random.default_rng(1)
    blocks = {"active": rng.normal(size=(30, 3)), "passive1": rng.normal(size=(30, 5)),
              "passive2": rng.normal(size=(30, 2))}
    masks = generate_masks(30, {k: v.shape[1] for k, v in blocks.items()}, urandom=lambda n: b"\x07" * n)
    assert "P=" not in repr(masks) and np.allclose(masks.P @ masks.P.T, np.eye(30))
    masked = [mask_block(masks.P, X, masks.Q[k]) for k, X in blocks.items()]
    us, s = server_svd(masked)
    U, S, _ = np.linalg.svd(np.concatenate(list(blocks.values()), axis=1), full_matrices=False)
    assert np.allclose(s, S)
    assert np.allclose(np.abs(unmask_left(masks.P, us)), np.abs(U * S), atol=1e-8)  # columns up to sign
    assert not np.allclose(np.abs(us), np.abs(U * S), atol=1e-3)  # the server's view is masked


def test_fedsvd_masks_depend_on_the_seed_only():
    a = generate_masks(5, {"x": 2}, urandom=lambda n: b"\x01" * n)
    b = generate_masks(5, {"x": 2}, urandom=lambda n: b"\x01" * n)
    c = generate_masks(5, {"x": 2}, urandom=lambda n: b"\x02" * n)
    assert np.array_equal(a.P, b.P) and not np.allclose(a.P, c.P)


def test_fedsvd_footprint_formula():
    # Eq. 10 at Breast Cancer, 250 aligned rows, 5 active / 25 passive features:
    # (2*250^2 + 5*30 + 25*30 + 250*5 + 250*25 + 250*30) * 4 bytes; 2.2x APC-VFL's 256,000 bytes.
    assert fedsvd_footprint_bytes(250, 5, [25]) == 563_600
    assert round(563_600 / apc_footprint_bytes(250, [256]), 2) == 2.20


def test_vfedtrans_end_to_end_five_exchanges():
    report = securevfl.train("vfedtrans", "synthetic", n_samples=300, n_features=8, active_features=3,
                             aligned=80, unaligned="disjoint", **FAST, options={"cv_folds": 3})
    comm = report.cost["comm"]["messages"]
    assert comm == {"keygen->active": 1, "keygen->passive1": 1, "active->server": 1, "passive1->server": 1,
                    "server->active": 1}
    assert report.cost["rounds"] == 3
    m = report.extra["communication"]["aligned_rows_exchanged"]
    assert m == 80 + 60  # aligned training rows + aligned test rows
    assert report.cost["comm"]["bytes"]["keygen->active"] >= m * m * 4  # the dense P
    assert report.extra["federated_dim"] == 8
    assert report.metrics["accuracy"] > 0.5  # 3 of 8 synthetic features, 3 epochs: it runs, above chance


def test_vfedtrans_reserves_its_role_names():
    with pytest.raises(ConfigError, match="reserved"):
        securevfl.train("vfedtrans", "breast-cancer", party_names=["active", "server"], **FAST)


def test_include_test_rows_false_keeps_test_rows_out_of_the_exchange():
    report = securevfl.train("apcvfl", "breast-cancer", preset="apcvfl-paper", aligned=150, **FAST,
                             options={"include_test_rows": False})
    assert report.extra["communication"]["aligned_rows_exchanged"] == 100
    assert report.cost["comm"]["bytes"]["passive1->active"] == len(encode(torch.zeros(100, 256)))





def test_vfedtrans_distils_with_mae_by_default(monkeypatch):
    import securevfl.methods.vfedtrans as vfedtrans
    from securevfl.methods.vfedtrans import VFedTransOptions

    assert VFedTransOptions().distill_loss == "mae"  # the APC-VFL paper, Sec. 4.3: MAE as in Huang et al.
    kinds = []
    real_fit = vfedtrans.fit_autoencoder

    def recording_fit(*args, **kwargs):
        kinds.append(kwargs["kind"])
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(vfedtrans, "fit_autoencoder", recording_fit)
    kw = dict(n_samples=300, n_features=8, active_features=3, aligned=80, unaligned="disjoint", **FAST)
    default = securevfl.train("vfedtrans", "synthetic", **kw)
    mse = securevfl.train("vfedtrans", "synthetic", **kw, options={"distill_loss": "mse"})
    # the student's distillation term is the L1 distance by default; MSE (squared L2) stays an option
    assert kinds == ["mae", "mse"]
    assert default.extra["distill_loss"] == "mae" and mse.extra["distill_loss"] == "mse"
