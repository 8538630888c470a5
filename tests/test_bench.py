import json

import numpy as np
import pytest

from securevfl.bench import BenchConfig, compare_figures
from securevfl.bench import environment as env_mod
from securevfl.bench.compare import IMPROVED, REGRESSED, SAME
from securevfl.bench.network import reprice
from securevfl.bench.results import SCHEMA
from securevfl.bench.scaling import fitted_exponent
from securevfl.bench.timing import HIGHER, Figure, ratios
from securevfl.cli import main
from securevfl.errors import ConfigError
from securevfl.federation.meter import NetworkModel, critical_path

SECTIONS = ("primitives", "methods", "scaling", "network", "predict", "secureboost", "coverage", "environment")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The whole command at its tiny size: PSI 200 IDs, one method, 1 epoch, 2 parties."""
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", "--tiny", "--methods", "splitnn", "--privacy", "none", "--method-parties", "2",
                 "--quiet", "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "results.json").read_text())


def test_tiny_run_writes_every_file_and_section(tiny_run):
    out, data = tiny_run
    for name in ("report.md", "report.html", "results.json"):
        assert (out / name).stat().st_size > 0, name
    assert data["schema"] == SCHEMA
    assert tuple(data["sections"]) == SECTIONS
    for key, section in data["sections"].items():
        assert section["tables"] and all(t["rows"] for t in section["tables"]), key
        assert section["images"], key
        for image in section["images"]:
            png = out / image["file"]
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    md = (out / "report.md").read_text()
    for section in data["sections"].values():
        assert section["title"] in md


def test_tiny_run_figures_are_positive_with_repetitions(tiny_run):
    _, data = tiny_run
    figures = data["figures"]
    prefixes = {name.split(".")[0] for name in figures}
    assert {"primitives", "methods", "scaling", "network"} <= prefixes
    for name, f in figures.items():
        assert f["samples"] and all(s > 0 for s in f["samples"]), name
        assert f["repetitions"] == len(f["samples"])
        assert f["min"] == min(f["samples"]) and f["min"] <= f["median"] <= f["max"], name
    # the peers are in the same run, with their ratios
    for key in ("primitives.psi.200.openmined_s", "primitives.psi.200.speedup_vs_openmined",
                "primitives.psi.200.fraction_of_floor", "primitives.paillier.encrypt.fast_vs_phe",
                "primitives.paillier.decrypt.packed_vs_phe", "primitives.mask.speedup_vs_flower",
                "primitives.key_agreement.x25519_speedup_vs_ffdh2048", "methods.splitnn.none.epoch_s",
                "scaling.secagg.3.mask_per_party_ms", "scaling.paillier.4.round_s", "network.splitnn.none.lan_s"):
        assert key in figures, key
    assert len(figures["primitives.psi.200.ours_s"]["samples"]) == 2  # tiny: two repetitions
    assert 0 < figures["primitives.psi.200.fraction_of_floor"]["median"] < 1


def test_tiny_run_html_is_self_contained(tiny_run):
    out, data = tiny_run
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert "<script" not in html.lower()
    assert html.count("data:image/png;base64,") == sum(len(s["images"]) for s in data["sections"].values())
    assert "src='bench_" not in html and 'src="bench_' not in html  # no links to files beside it


def test_tiny_run_environment_and_method_costs(tiny_run):
    _, data = tiny_run
    env = data["environment"]
    for key in ("cpu_model", "cores_logical", "memory_gib", "versions", "accelerator", "load_average_1m_start",
                "load_average_1m_end", "load_samples", "loaded", "warning"):
        assert key in env, key
    assert {"torch", "cryptography", "phe", "openmined-psi"} <= set(env["versions"])
    assert "cuda_available" in env["accelerator"]
    run = data["sections"]["methods"]["data"]["runs"][0]
    assert run["status"] == "ok" and run["metric"] == "accuracy"
    assert run["bytes"] and run["rounds"] > 0 and run["network_path"]["levels"] > 0
    # the network section re-prices the recorded path: the run's own link gives the run's own figure
    again = reprice([run], {"same": NetworkModel(**run["network_model"])})[0]["presets"]["same"]
    assert again == pytest.approx(run["simulated_network_s"])


def _fig(samples, better="lower"):
    f = Figure("x", "s", tuple(samples), better)
    return f.to_dict()


def test_compare_flags_a_slowdown_beyond_the_spread_only():
    old = {"slower": _fig([1.00, 1.01, 1.03]), "noisy": _fig([1.00, 1.10, 1.30]), "faster": _fig([2.0, 2.0, 2.1]),
           "rate_dropped": _fig([100, 98, 99], HIGHER), "only_old": _fig([1.0])}
    new = {"slower": _fig([1.40, 1.45, 1.50]), "noisy": _fig([1.02, 1.15, 1.40]), "faster": _fig([1.0, 1.0, 1.1]),
           "rate_dropped": _fig([60, 61, 59], HIGHER)}
    verdicts = {c.name: c.verdict for c in compare_figures(old, new)}
    assert verdicts == {"slower": REGRESSED, "noisy": SAME, "faster": IMPROVED, "rate_dropped": REGRESSED}
    # within the spread but beyond a smaller floor: a 4.5 % move on a noiseless figure is not a regression
    assert compare_figures({"a": _fig([1.0])}, {"a": _fig([1.045])})[0].verdict == SAME
    assert compare_figures({"a": _fig([1.0])}, {"a": _fig([1.06])})[0].verdict == REGRESSED


def test_compare_command(tmp_path, capsys):
    def write(name, figures):
        path = tmp_path / name
        path.write_text(json.dumps({"schema": SCHEMA, "figures": figures, "environment": {}}))
        return path

    old = write("old.json", {"primitives.psi.10000.ours_s": _fig([1.0, 1.02, 1.05]),
                             "primitives.mask.ours_aes_ctr_ms": _fig([0.2, 0.21, 0.22])})
    new = write("new.json", {"primitives.psi.10000.ours_s": _fig([2.0, 2.1, 2.2]),
                             "primitives.mask.ours_aes_ctr_ms": _fig([0.2, 0.21, 0.23])})
    assert main(["bench", "compare", str(old), str(new)]) == 0
    text = capsys.readouterr().out
    assert "primitives.psi.10000.ours_s" in text and "regressed" in text
    assert "primitives.mask.ours_aes_ctr_ms" not in text  # within the spread: not shown by default
    assert "1 regressed" in text
    assert main(["bench", "compare", str(old), str(new), "--fail-on-regression"]) == 1
    assert main(["bench", "compare", str(old), str(tmp_path / "missing.json")]) == 2
    assert "no such results file" in capsys.readouterr().err


def test_environment_keys_and_load_warning():
    env = env_mod.collect("cpu")
    for key in ("cpu_model", "cpu_flags", "cores_logical", "cores_physical", "memory_gib", "platform", "versions",
                "accelerator", "started_at", "load_average_1m_start"):
        assert key in env, key
    assert env["accelerator"]["model_compute_on"] == "cpu"
    done = env_mod.finish(env, [("start", 0.0, 0.1)])
    assert {"load_average_1m_end", "load_samples", "loaded", "warning", "finished_at"} <= set(done)
    quiet = {"cores_logical": 2, "load_average_1m_start": 0.4, "load_average_1m_end": 0.9}
    assert env_mod.load_warning(quiet) is None
    busy = {"cores_logical": 2, "load_average_1m_start": 0.4, "load_average_1m_end": 1.6}
    assert "loaded" in env_mod.load_warning(busy)


def test_timing_and_fit_helpers():
    f = Figure("t", "s", (3.0, 1.0, 2.0))
    assert (f.min, f.median, f.max, f.spread) == (1.0, 2.0, 3.0, 1.0)
    assert Figure("r", "x", (3.0, 1.0, 2.0), HIGHER).spread == 1.0
    assert ratios((4.0, 9.0), (2.0, 3.0)) == (2.0, 3.0)
    with pytest.raises(ValueError):
        Figure("empty", "s", ())
    n = np.array([1e3, 1e4, 1e5])
    assert fitted_exponent(n, 2e-5 * n) == pytest.approx(1.0)
    assert fitted_exponent(n, 1e-9 * n**2) == pytest.approx(2.0)
    assert fitted_exponent([10], [1.0]) is None


def test_network_path_prices_like_the_meter():
    depths = {1: {"a->b": 1000, "b->a": 10}, 2: {"b->a": 500}, 5: {"a->c": 3000}}
    levels, nbytes = critical_path(depths)
    assert (levels, nbytes) == (3, 4500)
    for model in (NetworkModel(10, 100), NetworkModel(1000, 1)):
        assert model.path_seconds(levels, nbytes) == pytest.approx(model.transfer_seconds(depths))


def test_bench_config_is_validated():
    with pytest.raises(ConfigError, match="privacy"):
        BenchConfig(privacy=("none", "homomorphic"))
    with pytest.raises(ConfigError, match="method"):
        BenchConfig(methods=("no-such-method",))
    with pytest.raises(ConfigError, match="network"):
        BenchConfig(networks=("moon",))
    assert BenchConfig(size="quick").scaling_parties == (2, 4, 8)
    custom = BenchConfig(networks=(), custom_network=NetworkModel(50.0, 40.0)).network_models()
    assert custom == {"custom": NetworkModel(50.0, 40.0)}
    assert set(BenchConfig().network_models()) == {"lan", "wan", "intercontinental"}
    assert main(["bench", "--quick", "--full", "--out", "unused"]) == 2
    assert main(["bench", "--bandwidth-mbps", "50", "--out", "unused"]) == 2  # a link needs both numbers


def test_a_deployed_run_is_measured_beside_the_in_process_one_and_the_model(tmp_path):
    from securevfl.bench import network, wire
    from securevfl.bench.results import Section

    measured = wire.measure(tmp_path, epochs=2)
    assert measured["epoch_s_grpc"] > 0 and measured["epoch_s_inprocess"] > 0 and measured["model_lan_s_per_epoch"] > 0
    assert measured["metrics_grpc"] == pytest.approx(measured["metrics_inprocess"], abs=1e-6)  # the same job
    assert measured["frame_bytes"] > measured["codec_bytes_training"] > 0  # frames also carry setup and PSI
    section = Section("network", "4. Network")
    section.data = {}
    network.add_measured(section, measured)
    assert "gRPC + mutual TLS" in section.tables[-1].title
    assert {f.name for f in network.measured_figures(measured)} >= {"network.measured.splitnn_epoch_grpc_s"}


def test_round_crypto_per_secagg_round_leaves_the_key_setup_out():
    from securevfl.bench.methods import figures as method_figures
    from securevfl.bench.methods import round_crypto_ms

    row = {"method": "easter", "privacy": "dh", "status": "ok", "metric": "accuracy", "metric_value": 0.9,
           "epoch_s": [1.0], "wall_s": 2.0, "secagg_rounds": 40,
           "crypto_s": {"secagg.keygen": 5.0, "secagg.key_agreement": 7.0, "secagg.mask": 0.06, "secagg.unmask": 0.02}}
    assert round_crypto_ms(row) == pytest.approx(2.0)  # (0.06 + 0.02) s / 40 rounds
    assert round_crypto_ms({**row, "secagg_rounds": 0}) is None
    assert round_crypto_ms({**row, "crypto_s": {}}) is None  # secagg=none: rounds, no crypto
    named = {f.name: f for f in method_figures([row])}
    assert named["methods.easter.dh.secagg_round_crypto_ms"].samples == pytest.approx((2.0,))


def test_bench_progress_is_plain_lines_where_stderr_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    """Not on a terminal (CI, a log file), the bench says where it is: a line per section, a few in between."""
    import securevfl.bench
    from securevfl.cli.bench import PlainProgress

    def fake_run_bench(config, out, *, progress=None, command=""):
        assert isinstance(progress, PlainProgress)
        progress.every = 0.0
        for done, text in ((0, "primitives: PSI 200 IDs"), (1, "primitives done"), (1, "methods: splitnn none")):
            progress(done, 2, text)
        raise ConfigError("stopped before the report")  # the lines are what is tested

    monkeypatch.setattr(securevfl.bench, "run_bench", fake_run_bench)
    assert main(["bench", "--tiny", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("[")]
    assert len(lines) == 3 and "bench 1/2 sections: primitives done" in lines[1]
    assert all(" s] bench " in line for line in lines) and err[-1] == "error: stopped before the report"
