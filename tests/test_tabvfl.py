"""TabVFL: split TabNet against pytorch-tabnet, what crosses the wire, client failures, the designs."""

import json

import numpy as np
import pytest
import torch
from pytorch_tabnet.metrics import UnsupervisedLoss
from pytorch_tabnet.tab_network import TabNetPretraining

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.cli import main
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.federation.transport import InProcessTransport
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.base import batch_plan
from securevfl.methods.engine.loop import validation_split
from securevfl.methods.engine.stopping import VALIDATION
from securevfl.methods.tabvfl import (
    EVAL_OUT,
    FT_OUT,
    PRE_DONE,
    PRE_GRAD,
    PRE_OUT,
    RAW,
    STATS,
    RowCache,
    TabVFLOptions,
    failure_schedule,
)
from securevfl.methods.tabvfl.designs import HostTop
from securevfl.methods.tabvfl.quality import latent_quality
from securevfl.methods.tabvfl.sides import PRE_DEC, PRE_VAL_DEC, PRE_VAL_LOSS, PRE_VAL_OUT
from securevfl.methods.tabvfl.tabnet import (
    FeatureExtractor,
    PartialDecoder,
    TabNetShape,
    make_encoder,
    reconstruction_layer,
    reconstruction_loss,
)

SMALL = dict(epochs=2, batch_size=128, lr=2e-2, seed=0, embedding_dim=4)
PLAIN = dict(device="cpu", alignment="plaintext")  # alignment is not under test here


pytestmark = pytest.mark.one_torch_thread  # tests/conftest.py


class RecordingTransport(InProcessTransport):
    """The in-process transport, keeping every envelope so a test can inspect the traffic."""

    def __init__(self, parties):
        super().__init__(parties)
        self.envelopes = []

    def send(self, envelope):
        self.envelopes.append(envelope)
        super().send(envelope)


def _scenario(parties=4, active_features=0, dataset="breast-cancer"):
    config = RunConfig(dataset=dataset, partition=PartitionSpec(parties=parties, active_features=active_features),
                       alignment="plaintext")
    return build_scenario(config)


def _run_recorded(method, scenario, config_overrides=None, **options):
    config = TrainConfig(**{**SMALL, **(config_overrides or {})}, options={"latent_quality": False, **options})
    roles = create_method(method, config).roles(scenario)
    transport = RecordingTransport(list(roles))
    result = run_parties(roles, active=scenario.active, transport=transport, seed=config.seed)
    return result, transport, config


def _float_matrices(value):
    """Every 2-D float array inside a decoded message."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return [value.astype(np.float64)] if value.ndim == 2 and value.dtype.kind == "f" else []
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in _float_matrices(v)]
    if isinstance(value, dict):
        return [m for v in value.values() for m in _float_matrices(v)]
    return []


def _max_abs_corr(sent, features):
    """Largest |correlation| between any sent column and any feature column (same rows)."""
    s = sent - sent.mean(0)
    f = features - features.mean(0)
    s_norm = np.linalg.norm(s, axis=0)
    f_norm = np.linalg.norm(f, axis=0)
    keep_s, keep_f = s_norm > 1e-9, f_norm > 1e-9
    corr = (s[:, keep_s].T @ f[:, keep_f]) / np.outer(s_norm[keep_s], f_norm[keep_f])
    return float(np.abs(corr).max()) if corr.size else 0.0


def _guest_messages(transport, guest, tag):
    return [codec.decode(e.payload) for e in transport.envelopes if e.src == guest and e.tag == tag]


# -- the split against the reference implementation ----------------------------------------

def test_split_network_computes_tabnet_pretraining_when_fc_is_identity():
    torch.manual_seed(0)  # the reference draws its init from the global RNG; test-only
    cols = [4, 3, 5]
    shape = TabNetShape(n_d=6, n_a=6, n_steps=3, virtual_batch_size=16)
    ref = TabNetPretraining(sum(cols), n_d=6, n_a=6, n_steps=3, virtual_batch_size=16,
                            group_attention_matrix=torch.eye(sum(cols))).train()
    x = torch.randn(32, sum(cols))
    obf = torch.bernoulli(torch.full(x.shape, 0.3))
    masked = (1 - obf) * x
    expected = ref.decoder(ref.encoder(masked, prior=1 - obf)[0])

    bounds = np.cumsum([0] + cols)
    guests = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        g = FeatureExtractor(hi - lo)
        with torch.no_grad():
            g.fc.weight.copy_(torch.eye(hi - lo))
            g.fc.bias.zero_()
            g.bn.weight.copy_(ref.encoder.initial_bn.weight[lo:hi])
            g.bn.bias.copy_(ref.encoder.initial_bn.bias[lo:hi])
        recon = reconstruction_layer(6, hi - lo)
        with torch.no_grad():
            recon.weight.copy_(ref.decoder.reconstruction_layer.weight[lo:hi])
        guests.append((g.train(), recon, slice(lo, hi)))
    enc = make_encoder(sum(cols), shape, first_bn=False)
    state = {k: v for k, v in ref.encoder.state_dict().items() if not k.startswith("initial_bn")}
    enc.load_state_dict(state)
    dec = PartialDecoder(shape)
    dec.load_state_dict({k: v for k, v in ref.decoder.state_dict().items() if not k.startswith("reconstruction")})

    z = torch.cat([g(masked[:, s]) for g, _, s in guests], dim=1)
    steps, _ = enc.train()(z, prior=1 - obf)
    hidden = dec.train()(steps)
    got = torch.cat([r(hidden) for _, r, _ in guests], dim=1)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
    # ...and a random FC (the privacy layer) does change what the host sees
    assert not torch.allclose(z, FeatureExtractor(cols[0] + cols[1] + cols[2]).train()(masked), atol=1e-3)


def test_reconstruction_loss_matches_pytorch_tabnet_and_stays_nonnegative():
    g = torch.Generator().manual_seed(1)
    x, recon = torch.randn(40, 6, generator=g), torch.randn(40, 6, generator=g)
    obf = torch.bernoulli(torch.full((40, 6), 0.3), generator=g)
    assert torch.allclose(reconstruction_loss(recon, x, obf), UnsupervisedLoss(recon, x, obf))
    x[:, 2] = -0.4  # a standardised column constant within the batch, the only one obfuscated
    obf = torch.zeros_like(x)
    obf[:, 2] = 1
    assert float(UnsupervisedLoss(recon, x, obf)) < 0  # upstream divides by the (negative) mean
    assert float(reconstruction_loss(recon, x, obf)) > 0


# -- what crosses the wire ------------------------------------------------------------------

def test_guests_never_send_raw_features_or_reconstruction_targets():
    scenario = _scenario(parties=3)
    result, transport, config = _run_recorded("tabvfl", scenario)
    allowed = {PRE_OUT, PRE_GRAD, FT_OUT, EVAL_OUT, STATS}  # PRE_DONE is tabnet-lt only
    for guest in scenario.passives:
        data = scenario.party_data(guest)
        sent_tags = {e.tag for e in transport.envelopes if e.src == guest}
        assert sent_tags <= allowed, sent_tags - allowed
        n = len(data.X_train)
        batches = [idx for epoch in range(config.epochs)
                   for idx in batch_plan(n, config.batch_size, 0, epoch, min_rows=2)]
        pre = _guest_messages(transport, guest, PRE_OUT)
        assert len(pre) == len(batches)
        for (outs, mask), idx in zip(pre, batches):
            x = data.X_train[idx]
            mask = mask.numpy()
            assert set(np.unique(mask)) <= {0.0, 1.0}
            z = outs[0].numpy().astype(np.float64)
            # features are standardised, so BN alone would be ~identity: the FC must mix them
            assert _max_abs_corr(z, (1 - mask) * x) < 0.98
            assert _max_abs_corr(z, x) < 0.98
        grads = _guest_messages(transport, guest, PRE_GRAD)
        for (grad, loss), idx in zip(grads, batches):
            assert isinstance(loss, float)
            # its chunk of the decoder output (the default split), never n_features wide
            assert grad.shape[0] == len(idx) and grad.shape[1] == config.embedding_dim // len(scenario.passives)
            assert _max_abs_corr(grad.numpy().astype(np.float64), data.X_train[idx]) < 0.98
        fin = _guest_messages(transport, guest, FT_OUT)
        ft_batches = [idx for epoch in range(config.epochs)
                      for idx in batch_plan(n, config.batch_size, 0, config.epochs + epoch, min_rows=2)]
        for z, idx in zip(fin, ft_batches):
            assert _max_abs_corr(z.numpy().astype(np.float64), data.X_train[idx]) < 0.98
        (train_out, test_out), = _guest_messages(transport, guest, EVAL_OUT)
        assert _max_abs_corr(train_out.numpy().astype(np.float64), data.X_train) < 0.98
        assert _max_abs_corr(test_out.numpy().astype(np.float64), data.X_test) < 0.98


def test_raw_feature_detector_flags_the_centralised_reference():
    """The check above can fail: tabnet-ct does send raw features, and the detector sees them."""
    scenario = _scenario(parties=3)
    result, transport, _ = _run_recorded("tabnet-ct", scenario)
    guest = scenario.passives[0]
    (train_raw, _), = _guest_messages(transport, guest, RAW)
    assert _max_abs_corr(np.asarray(train_raw, np.float64), scenario.party_data(guest).X_train) > 0.999
    assert result.results[scenario.active].extra["centralised"] is True


# -- client failures ------------------------------------------------------------------------

def test_failure_schedule_is_seeded_and_first_epoch_online():
    a = failure_schedule(3, "finetune", 400, ("g1", "g2"), 0.35)
    b = failure_schedule(3, "finetune", 400, ("g1", "g2"), 0.35)
    assert all(np.array_equal(a[g], b[g]) for g in a)
    assert not a["g1"][0] and not a["g2"][0]
    assert 0.28 < a["g1"].mean() < 0.42
    assert not failure_schedule(3, "finetune", 50, ("g1",), 0.0)["g1"].any()


def test_row_cache_returns_last_rows_or_zeros():
    for mode in ("cache", "zeros"):
        cache = RowCache(10, mode)
        cache.put("g", np.array([1, 4]), [torch.tensor([[1.0, 2.0], [3.0, 4.0]])])
        cache.put("g", np.array([4, 7]), [torch.tensor([[5.0, 6.0], [7.0, 8.0]])])
        (rows,) = cache.get("g", np.array([7, 1, 4]))
        expected = torch.tensor([[7.0, 8.0], [1.0, 2.0], [5.0, 6.0]]) if mode == "cache" else torch.zeros(3, 2)
        assert torch.equal(rows, expected)


@pytest.mark.parametrize("on_fail", ["cache", "zeros"])
def test_offline_guests_send_nothing_and_host_substitutes(on_fail):
    scenario = _scenario(parties=3)
    config_epochs = 6
    options = {"fail_prob": 0.5, "on_fail": on_fail, "latent_quality": False, "pretrain_epochs": 2}
    config = TrainConfig(**{**SMALL, "epochs": config_epochs}, options=options)
    roles = create_method("tabvfl", config).roles(scenario)
    transport = RecordingTransport(list(roles))
    result = run_parties(roles, active=scenario.active, transport=transport, seed=0)
    outcome = result.results[scenario.active]
    schedule = failure_schedule(0, "finetune", config_epochs, scenario.passives, 0.5)
    assert sum(int(s.sum()) for s in schedule.values()) > 0  # this seed does fail someone
    n = len(scenario.party_data(scenario.active).X_train)
    per_epoch = len(list(batch_plan(n, config.batch_size, 0, 0, min_rows=2)))
    for g in scenario.passives:
        online_epochs = config_epochs - int(schedule[g].sum())
        assert len(_guest_messages(transport, g, FT_OUT)) == online_epochs * per_epoch
    failures = outcome.extra["failures"]
    assert failures["on_fail"] == on_fail
    assert failures["substituted_batches"] == sum(int(s.sum()) for s in schedule.values()) * per_epoch
    assert np.isfinite(outcome.scores).all()


def test_cache_and_zeros_lead_to_different_models():
    kwargs = dict(parties=3, active_features=0, **PLAIN, **{**SMALL, "epochs": 5})
    scores = {}
    for on_fail in ("cache", "zeros"):
        report = securevfl.train("tabvfl", "breast-cancer", **kwargs,
                                 options={"fail_prob": 0.5, "on_fail": on_fail, "latent_quality": False,
                                          "pretrain_epochs": 1})
        scores[on_fail] = report
    assert scores["cache"].extra["failures"]["substituted_batches"] > 0
    assert scores["cache"].history[-1]["train_loss"] != scores["zeros"].history[-1]["train_loss"]


# -- the four designs end to end ------------------------------------------------------------

@pytest.mark.parametrize("method", ["tabvfl", "tabvfl-le", "tabnet-lt", "tabnet-ct"])
def test_each_design_trains_end_to_end(method):
    report = securevfl.train(method, "breast-cancer", parties=4, active_features=0, **PLAIN,
                             options={"latent_quality": method == "tabvfl"}, **SMALL)
    assert 0.5 < report.metrics["accuracy"] <= 1.0
    eff = report.extra["efficiency"]
    assert eff["pretrain_s"] > 0 and eff["finetune_s"] > 0 and eff["peak_rss_mb"] > 0
    if method == "tabnet-ct":
        assert eff["setup_bytes"] > 0 and eff["pretrain_bytes"] == 0
    elif method == "tabnet-lt":
        assert eff["pretrain_bytes"] < 100 < eff["finetune_bytes"]  # only the "pretraining done" notes
    else:
        assert eff["pretrain_bytes"] > eff["finetune_bytes"] > 0
    # LT: each of the 3 guests' local TabNets gets embedding_dim // 3 (the paper's share of the latent)
    latent_dim = 3 * (SMALL["embedding_dim"] // 3) if method == "tabnet-lt" else SMALL["embedding_dim"]
    assert report.extra["latent_dim"] == latent_dim
    if method == "tabvfl":
        quality = report.extra["latent_quality"]
        assert set(quality["per_classifier"]) == {"logistic_regression", "decision_tree", "random_forest", "mlp",
                                                  "gradient_boosting", "linear_svm"}
        assert 0.7 < quality["accuracy"] <= 1.0 and quality["latent_dim"] == SMALL["embedding_dim"]


def test_host_with_features_and_the_default_chunked_decoder():
    report = securevfl.train("tabvfl", "breast-cancer", parties=3, **PLAIN, options={"latent_quality": False},
                             **SMALL)
    assert report.parties["active"]["features"] > 0 and report.extra["decoder_split"] == "chunk"
    assert report.metrics["accuracy"] > 0.7


@pytest.mark.parametrize("method", ["tabvfl", "tabvfl-le"])
def test_a_latent_narrower_than_the_guests_is_an_error_naming_the_fix(method):
    """The paper: the latent dimension must not be lower than the number of guests (one chunk each)."""
    scenario = _scenario(parties=6)  # 5 guests
    for options in ({}, {"decoder_split": "chunk"}):
        method_ = create_method(method, TrainConfig(**{**SMALL, "embedding_dim": 2}, options=options))
        with pytest.raises(ConfigError, match=r"latent dimension >= 5 \(got 2\).*--embedding-dim 5 or more, "
                                              r"or --option decoder_split=full"):
            method_.roles(scenario)
    create_method(method, TrainConfig(**{**SMALL, "embedding_dim": 2}, options={"decoder_split": "full"})
                  ).roles(scenario)  # the full split has no such limit


@pytest.mark.parametrize("split", ["default", "full"])
def test_each_guest_receives_only_its_own_chunk_of_the_decoder_output(monkeypatch, split):
    """Default ``decoder_split=chunk`` (paper Sec. IV-B): guest i gets columns [2i, 2i+2) of the n_d = 6
    decoder output, nothing else; ``full`` sends every guest all 6."""
    assert TabVFLOptions().decoder_split == "chunk"
    decoded = []
    forward = HostTop.pretrain_forward

    def recording(self, outputs, masks):
        out = forward(self, outputs, masks)
        decoded.append(out.detach().clone())
        return out

    monkeypatch.setattr(HostTop, "pretrain_forward", recording)
    scenario = _scenario(parties=4)  # 3 guests
    options = {} if split == "default" else {"decoder_split": "full"}
    _, transport, config = _run_recorded("tabvfl", scenario, {"embedding_dim": 6}, **options)
    assert decoded
    for i, guest in enumerate(scenario.passives):
        received = [codec.decode(e.payload) for e in transport.envelopes if e.dst == guest and e.tag == PRE_DEC]
        assert len(received) == len(decoded)
        columns = slice(2 * i, 2 * i + 2) if split == "default" else slice(0, 6)
        for got, full in zip(received, decoded):
            assert got.shape == (len(full), columns.stop - columns.start)
            assert torch.allclose(got, full[:, columns])


def test_lt_gives_each_guest_a_share_of_the_latent_unless_part_latent_dim_says_otherwise():
    scenario = _scenario(parties=4)  # 3 guests, latent dimension 6 -> 2 per guest, 6 concatenated
    for options, per_guest in (({}, 2), ({"part_latent_dim": 5}, 5)):
        result, transport, _ = _run_recorded("tabnet-lt", scenario, {"embedding_dim": 6}, **options)
        assert result.results[scenario.active].extra["latent_dim"] == 3 * per_guest
        for guest in scenario.passives:
            sent = _guest_messages(transport, guest, FT_OUT)
            assert sent and all(z.shape[1] == per_guest for z in sent)


def test_early_stopping_validates_pretraining_on_held_out_training_rows_and_stops():
    """Pretraining stops on the validation reconstruction loss (the host decides, guests are told);
    finetuning on the validation log loss; the validation rows come from the training rows."""
    scenario = _scenario(parties=3)  # 2 guests
    config = TrainConfig(**{**SMALL, "epochs": 3}, early_stopping=1, val_fraction=0.2,
                         options={"latent_quality": False, "pretrain_epochs": 12})
    roles = create_method("tabvfl", config).roles(scenario)
    transport = RecordingTransport(list(roles))
    outcome = run_parties(roles, active=scenario.active, transport=transport, seed=0).results[scenario.active]
    phases = outcome.extra["early_stopping"]["phases"]
    pre = [h for h in outcome.history if "pretrain_loss" in h]
    assert all("val_loss" in h for h in outcome.history)
    assert phases["pretrain"]["best_epoch"] == 1 + int(np.argmin([h["val_loss"] for h in pre]))
    assert phases["pretrain"]["stopped_after_epoch"] == len(pre) == phases["pretrain"]["best_epoch"] + 1 < 12
    n_train = len(scenario.party_data(scenario.active).X_train)
    _, val_rows = validation_split(n_train, 0.2, 0)
    for guest in scenario.passives:
        sent = _guest_messages(transport, guest, PRE_VAL_OUT)
        assert len(sent) == len(pre) and all(outs[0].shape[0] == len(val_rows) for outs, _ in sent)
        assert len(_guest_messages(transport, guest, PRE_VAL_LOSS)) == len(pre)
        slices = [codec.decode(e.payload) for e in transport.envelopes if e.dst == guest and e.tag == PRE_VAL_DEC]
        assert all(d.shape == (len(val_rows), SMALL["embedding_dim"] // 2) for d in slices)  # its chunk only
        decisions = [e for e in transport.envelopes if e.dst == guest and e.tag == VALIDATION]
        assert len(decisions) == len(outcome.history)  # one per validated epoch, both phases


def test_lt_guests_stop_their_local_pretraining_on_their_own():
    config = TrainConfig(**{**SMALL, "epochs": 1}, early_stopping=1,
                         options={"latent_quality": False, "pretrain_epochs": 15})
    scenario = _scenario(parties=3)
    roles = create_method("tabnet-lt", config).roles(scenario)
    transport = RecordingTransport(list(roles))
    outcome = run_parties(roles, active=scenario.active, transport=transport, seed=0).results[scenario.active]
    trained = outcome.extra["local_pretrain_epochs"]
    assert set(trained) == set(scenario.passives) and all(1 <= e <= 15 for e in trained.values())
    assert min(trained.values()) < 15  # someone stopped early
    for guest in scenario.passives:  # no validation message in pretraining: each guest decides alone
        assert [codec.decode(e.payload) for e in transport.envelopes
                if e.src == guest and e.tag == PRE_DONE] == [trained[guest]]
        assert not _guest_messages(transport, guest, PRE_VAL_OUT)


@pytest.mark.parametrize("options, message", [
    ({"on_fail": "retry"}, "on_fail"),
    ({"fail_prob": 1.0}, "fail_prob"),
    ({"decoder_split": "rows"}, "decoder_split"),
    ({"pretraining_ratio": 0.0}, "pretraining_ratio"),
])
def test_bad_options_are_rejected(options, message):
    with pytest.raises(ConfigError, match=message):
        create_method("tabvfl", TrainConfig(options=options))


def test_latent_quality_separates_informative_from_random_latents():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    informative = np.eye(3)[y] + 0.1 * rng.normal(size=(300, 3))
    good = latent_quality(informative, y, seed=0)
    bad = latent_quality(rng.normal(size=(300, 3)), y, seed=0)
    assert good["accuracy"] > 0.95 and good["auc"] > 0.95
    assert bad["accuracy"] < 0.6 and len(good["per_classifier"]) == 6


def test_cli_run_with_failure_flags(tmp_path):
    out = tmp_path / "tabvfl.json"
    rc = main(["train", "--method", "tabvfl", "--dataset", "breast-cancer", "--parties", "3",
               "--active-features", "0", "--epochs", "2", "--batch-size", "128", "--embedding-dim", "4",
               "--device", "cpu", "--alignment", "plaintext",
               "--option", "fail_prob=0.35", "--option", "on_fail=zeros",
               "--option", "latent_quality=false",
               "--option", "pretrain_epochs=1", "--quiet", "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["method"] == "tabvfl"
    assert report["config"]["train"]["options"]["on_fail"] == "zeros"
    assert report["extra"]["failures"]["fail_prob"] == 0.35


# -- a user's first run: the defaults must not lose to LT (issue 31) ---------------------------------------------

@pytest.mark.slow
def test_with_its_defaults_tabvfl_is_at_least_lt_less_a_point_on_breast_cancer():
    """``securevfl train --method tabvfl`` as a user first runs it (2 parties, every setting left to the method's
    defaults) against LT run the same way, over 5 seeds: the mean accuracy gap must be >= -0.01. Measured over 10
    seeds in docs/tabvfl.md ("Defaults"); before the method's own defaults it was -0.015."""
    gaps = []
    for seed in range(5):
        accuracy = {m: securevfl.train(m, "breast-cancer", seed=seed, **PLAIN,
                                       options={"latent_quality": False}).metrics["accuracy"]
                    for m in ("tabvfl", "tabnet-lt")}
        gaps.append(accuracy["tabvfl"] - accuracy["tabnet-lt"])
    assert float(np.mean(gaps)) >= -0.01, gaps
