"""The privacy layer's structure: light imports, one sign rule, scheme options through the registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, run_rounds
from paillier_setup import FRAC_BITS, TEST_KEY_BITS

from securevfl.errors import ConfigError
from securevfl.privacy.aggregation import (
    AggregationConfig,
    NoOptions,
    create_aggregation,
    scheme_option_names,
    scheme_options,
)
from securevfl.privacy.aggregation import paillier as pa
from securevfl.privacy.primitives.key_agreement import create_key_agreement
from securevfl.privacy.primitives.masking import add_pairwise_mask, derive_pairwise_seeds, pairwise_mask


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_aggregation_imports_no_scheme_and_dh_never_loads_gmpy2():
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import securevfl.privacy.aggregation as agg\n"
        "assert not any(m.startswith('securevfl.privacy.aggregation.') and m.rsplit('.', 1)[1] in\n"
        "               ('none', 'dh', 'pairwise', 'paillier') for m in sys.modules), 'a scheme was imported'\n"
        "assert sorted(agg.aggregation_names()) == ['dh', 'none', 'paillier', 'pairwise']\n"
        "scheme = agg.create_aggregation('dh', agg.AggregationConfig(frac_bits=16))\n"
        "scheme.validate(3); scheme.passive(); scheme.active()\n"
        "from securevfl.privacy.secagg import SecAggConfig, simulate_secagg\n"
        "cfg = SecAggConfig(b'session', ('a', 'b', 'c'), 2)\n"
        "rounds = simulate_secagg(cfg, [{p: np.ones(4) for p in cfg.parties}] * 2, {1: {'c'}})\n"
        "assert np.allclose(rounds[1].aggregate, 2.0)\n"
        "print('gmpy2' in sys.modules, 'securevfl.privacy.aggregation.paillier' in sys.modules)\n"
    )
    assert _run(code) == "False False"


def test_paillier_loads_only_when_used():
    code = (
        "import sys, securevfl.privacy.aggregation as agg\n"
        "agg.create_aggregation('paillier')\n"
        "print('gmpy2' in sys.modules)\n"
    )
    assert _run(code) == "True"


# ------------------------------------------------------------------ the one sign rule


def test_pairwise_masks_of_a_round_cancel_and_removing_a_dropped_party_uses_the_same_rule():
    ka = create_key_agreement("x25519")
    names = ["p1", "p2", "p3", "p4"]
    keys = {n: ka.generate() for n in names}
    seeds = {n: derive_pairwise_seeds(ka, n, keys[n], {p: keys[p].public for p in names if p != n}, b"s")
             for n in names}
    masks = [pairwise_mask(n, seeds[n], (5,), 7) for n in names]
    assert not np.sum(masks, axis=0, dtype=np.uint64).any()
    # p3 drops: the survivors' masks alone leave minus p3's mask; adding p3's mask (rebuilt from
    # its key, restricted to the survivors) removes them, as the secagg aggregator does.
    survivors = [n for n in names if n != "p3"]
    total = np.sum([masks[names.index(n)] for n in survivors], axis=0, dtype=np.uint64)
    dropped_seeds = {p: s for p, s in seeds["p3"].items() if p in survivors}
    add_pairwise_mask(total, "p3", dropped_seeds, 7)
    assert not total.any()


# ------------------------------------------------------------------ scheme options


def test_option_names_and_defaults():
    assert scheme_option_names("paillier") == ("key_bits", "insecure_allow_small_key", "key_holder",
                                               "max_abs_value", "workers")
    for name in ("none", "pairwise"):
        assert scheme_option_names(name) == ()
        assert isinstance(create_aggregation(name).options, NoOptions)
    assert scheme_option_names("dh") == ("rekey_every",)
    assert create_aggregation("dh").options.rekey_every == 0  # keys once per session (issue 47)
    assert create_aggregation("paillier").options == pa.PaillierOptions()


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"key_size.*'paillier'.*key_bits, insecure_allow_small_key, key_holder"):
        create_aggregation("paillier", options={"key_size": 3072})
    with pytest.raises(ConfigError, match="valid options: none"):
        create_aggregation("pairwise", options={"key_bits": 3072})
    with pytest.raises(ConfigError, match="'dh'; valid options: rekey_every"):
        create_aggregation("dh", options={"key_bits": 3072})
    with pytest.raises(ConfigError, match="unknown aggregation scheme 'nope'.*dh, none, paillier, pairwise"):
        scheme_option_names("nope")


def test_string_options_from_the_command_line_are_converted_and_checked():
    options = scheme_options("paillier", {"key_bits": "3072", "workers": "4", "insecure_allow_small_key": "yes",
                                          "max_abs_value": "1e3", "key_holder": "p2"})
    assert options == pa.PaillierOptions(key_bits=3072, workers=4, insecure_allow_small_key=True,
                                         max_abs_value=1000.0, key_holder="p2")
    for bad in ({"key_bits": "big"}, {"workers": "0"}, {"insecure_allow_small_key": "maybe"},
                {"max_abs_value": "-1"}, {"key_holder": ""}, {"key_bits": True}, {"workers": 1.5}):
        with pytest.raises(ConfigError):
            scheme_options("paillier", bad)
    with pytest.raises(ConfigError, match="mapping"):
        scheme_options("paillier", ["key_bits"])  # type: ignore[arg-type]


def test_an_options_object_of_another_scheme_is_refused():
    with pytest.raises(ConfigError, match="PaillierOptions"):
        pa.PaillierAggregation(AggregationConfig(), NoOptions())


def test_options_travel_to_both_halves(keypair, monkeypatch):
    """Key size and key holder set through the registry reach the run: p2 holds the key."""
    monkeypatch.setattr(pa, "generate_keypair", lambda *a, **k: keypair)
    scheme = create_aggregation("paillier", AggregationConfig(frac_bits=FRAC_BITS),
                                {"key_bits": TEST_KEY_BITS, "insecure_allow_small_key": True, "key_holder": "p2"})
    inputs = random_inputs(2, (3, 8))
    transport = RecordingTransport(["A", *PASSIVES])
    (results, _), _ = run_rounds(scheme, inputs, transport=transport)
    for result, values in zip(results, inputs):
        assert np.allclose(result.total, sum(values.values()), atol=len(PASSIVES) * 2.0**-FRAC_BITS)
    assert {e.src for e in transport.envelopes if e.tag == "agg.pa.public_key" and e.dst == "A"} == {"p2"}
    assert {e.dst for e in transport.envelopes if e.tag == "agg.pa.forward"} == {"p2"}

