"""One declaration of a run: the CLI, the API, the federation file's [job] and the report all follow RunConfig."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import securevfl
from securevfl.cli import main
from securevfl.cli.options import cli_settings
from securevfl.data import ColumnSpec
from securevfl.errors import ConfigError
from securevfl.run_config import RUN_SETTINGS, RunConfig, run_config
from securevfl.train_config import TrainConfig

#: [job] keys that configure the deployed PSI, not the training run (no RunConfig field).


def test_every_setting_is_a_train_option_with_its_help(capsys):
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for s in cli_settings():
        assert s.flag in text, s.name
    for gone in ("--secagg", "--frac-bits", "--drop-prob", "--fail-prob"):  # method options: --option only
        assert gone not in text


def test_every_setting_is_an_api_keyword_with_one_name():
    names = [s.name for s in RUN_SETTINGS if s.info.api]
    assert len(names) == len(set(names))
    for s in RUN_SETTINGS:
        if s.info.api:
            assert s.name in securevfl.train.__doc__
    with pytest.raises(ConfigError, match="did you mean 'epochs'"):
        run_config(epoch=3)
    with pytest.raises(ConfigError, match="unknown setting 'patience'"):
        securevfl.train("splitnn", patience=3)  # no renamed-setting shims: the project has no release yet


def test_report_config_is_the_run_config():
    config = run_config(epochs=4, aligned_ratio=0.5, hidden=[8, 4], seed=3, early_stopping=2)
    flat = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    for s in RUN_SETTINGS:
        node = flat
        for key in s.path:
            node = node[key]
    assert flat["train"]["early_stopping"] == 2 and flat["partition"]["seed"] == flat["dataset_options"]["seed"] == 3


def test_cli_and_api_build_the_same_config(tmp_path):
    """The CLI's options reach the run as the same RunConfig the API's keywords make."""
    out = tmp_path / "run.json"
    rc = main(["train", "--epochs", "1", "--hidden", "8,4", "--party-names", "bank,shop", "--aligned-ratio", "0.5",
               "--early-stopping", "1", "--option", "activation=tanh", "--defense", "grad-noise=0.1",
               "--categorical", "mean radius", "--alignment", "plaintext", "--device", "cpu", "--quiet",
               "--report", str(out)])
    assert rc == 0
    api = securevfl.train("splitnn", "breast-cancer", epochs=1, hidden=(8, 4), party_names=["bank", "shop"],
                          aligned_ratio=0.5, early_stopping=1, options={"activation": "tanh"},
                          defenses={"grad-noise": "0.1"}, columns=ColumnSpec(categorical=("mean radius",)),
                          alignment="plaintext", device="cpu")
    assert json.loads(out.read_text())["config"] == json.loads(json.dumps(api.config, default=str))


def test_run_config_defaults_are_the_dataclass_defaults():
    from securevfl.methods import method_class

    assert run_config(method="pyvertical") == RunConfig(method="pyvertical")  # a method with no defaults of its own
    splitnn = method_class("splitnn").run_defaults  # the default method's own: early stopping, batches of 128
    assert run_config() == dataclasses.replace(RunConfig(), train=dataclasses.replace(TrainConfig(), **splitnn))


# -- a method's own defaults for the settings not given (Method.run_defaults) ----------------------------------

def test_a_methods_own_defaults_fill_only_the_settings_not_given():
    from securevfl.methods import method_class

    own = method_class("tabvfl").run_defaults
    assert own and method_class("pyvertical").run_defaults == {}
    tab = run_config(method="tabvfl")
    assert {k: getattr(tab.train, k) for k in own} == own
    given = run_config(method="tabvfl", lr=1e-3, early_stopping=0)
    assert (given.train.lr, given.train.early_stopping) == (1e-3, 0)  # a given value always wins
    assert given.train.batch_size == own["batch_size"]
    assert run_config(method="pyvertical").train == RunConfig().train  # the run-wide defaults
    with pytest.raises(ConfigError, match="unknown method 'tabfvl'"):
        run_config(method="tabfvl")


def test_the_cli_passes_only_the_options_the_user_gave(monkeypatch, tmp_path):
    import securevfl.api

    seen = {}

    def fake_train(**settings):
        seen.update(settings)
        raise ConfigError("stop here")

    monkeypatch.setattr(securevfl.api, "train", fake_train)
    assert main(["train", "--method", "tabvfl", "--lr", "0.001", "--report", str(tmp_path / "r.json")]) != 0
    assert seen["method"] == "tabvfl" and seen["lr"] == 0.001
    assert "batch_size" not in seen and "epochs" not in seen  # left to the method's own defaults
    assert isinstance(seen["columns"], ColumnSpec)


def test_a_federation_file_silent_on_a_setting_trains_and_fingerprints_the_methods_default():
    from test_deploy_federation import MINIMAL  # a [job] that gives no lr

    from securevfl.deploy.federation_file import job_fingerprint, parse_federation
    from securevfl.deploy.party import method_and_config

    text = MINIMAL.replace('method = "splitnn"', 'method = "tabvfl"')
    base = Path("/srv/fed")
    silent, explicit = parse_federation(text, base), parse_federation(text + "lr = 0.001\n", base)
    assert silent.job.effective()["lr"] == 0.02 and explicit.job.effective()["lr"] == 0.001
    assert method_and_config(silent, "cpu")[1].train.lr == 0.02
    assert method_and_config(explicit, "cpu")[1].train.lr == 0.001
    assert job_fingerprint(silent)[0] != job_fingerprint(explicit)[0]  # the parties would train differently
    plain = parse_federation(MINIMAL.replace('method = "splitnn"', 'method = "pyvertical"'), base)
    assert plain.job.effective() == plain.job.as_dict()  # no method defaults: the file's and the fields'



def test_the_report_keeps_the_generator_keys_for_generated_data_only():
    """n_samples / n_features / n_classes size the synthetic table: a run on other data does not report them."""
    from securevfl.pipeline.report import SYNTHETIC_KEYS, _config_dict

    real = _config_dict(RunConfig(dataset="breast-cancer"), {})
    assert not set(SYNTHETIC_KEYS) & set(real["dataset_options"]) and "seed" in real["dataset_options"]
    generated = _config_dict(RunConfig(dataset="synthetic"), {})
    assert set(SYNTHETIC_KEYS) <= set(generated["dataset_options"])
    files = _config_dict(RunConfig(dataset="synthetic", data_files={"a": "a.csv", "b": "b.csv"}), {})
    assert not set(SYNTHETIC_KEYS) & set(files["dataset_options"])
