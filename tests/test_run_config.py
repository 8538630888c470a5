"""One declaration of a run: the CLI, the API, the federation file's [job] and the report all follow RunConfig."""

from __future__ import annotations

import dataclasses
import json

import pytest

import securevfl
from securevfl.cli import main
from securevfl.cli.options import cli_settings
from securevfl.data import ColumnSpec
from securevfl.deploy.federation import JobSpec
from securevfl.errors import ConfigError
from securevfl.run_config import RUN_SETTINGS, RunConfig, run_config

#: [job] keys that configure the deployed PSI, not the training run (no RunConfig field).
PSI_ONLY_JOB_KEYS = {"normalize", "psi_mode"}


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
    with pytest.raises(ConfigError, match="'patience' is now called 'early_stopping'"):
        securevfl.train("splitnn", patience=3)


def test_job_keys_are_the_job_settings_with_their_defaults():
    job_fields = {f.name: f for f in dataclasses.fields(JobSpec)}
    job_settings = {s.name: s for s in RUN_SETTINGS if s.info.job}
    assert set(job_fields) - PSI_ONLY_JOB_KEYS == set(job_settings)
    for name, s in job_settings.items():
        f = job_fields[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if default is not dataclasses.MISSING:  # method, id_column and label_column are required in [job]
            assert default == s.default, name


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
    assert run_config() == RunConfig()
