"""The ``psi`` package stands alone (no securevfl, no torch), and securevfl turns its errors into its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import psi
from psi.errors import (
    InvalidPointError,
    PSIConfigError,
    PSICryptoError,
    PSIDataError,
    PSIError,
    PSIProtocolError,
)
from securevfl.errors import (
    ConfigError,
    CryptoError,
    DataError,
    ProtocolError,
    SecureVFLError,
    psi_errors,
)

ROOT = Path(__file__).resolve().parents[1]


def test_psi_runs_an_intersection_without_importing_securevfl_or_torch():
    code = """
import sys

import psi
from psi.checks import validate_party_name
from psi.errors import PSIConfigError

result = psi.run_local({"a": ["x", "y", "z", "q"], "b": ["w", "z", "y"]}, workers=1)
assert result.intersection_size == 2, result.intersection_size
try:
    validate_party_name("../etc")
except PSIConfigError:
    pass
else:
    raise AssertionError("a path is not a party name")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("securevfl", "torch"))
assert not loaded, loaded
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_psi_errors_have_one_root_and_the_builtin_bases():
    assert issubclass(PSIConfigError, PSIError) and issubclass(PSIConfigError, ValueError)
    assert issubclass(PSIDataError, PSIError) and issubclass(PSIDataError, ValueError)
    assert issubclass(InvalidPointError, PSIProtocolError) and issubclass(PSICryptoError, PSIError)
    assert not issubclass(PSIError, SecureVFLError)  # psi does not know securevfl


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (PSIConfigError("bad mode"), ConfigError),
        (PSIDataError("null ID at row 1"), DataError),
        (InvalidPointError("point #3"), ProtocolError),
        (PSICryptoError("invalid blinding key"), CryptoError),
        (PSIError("other"), SecureVFLError),
    ],
)
def test_securevfl_raises_a_psi_error_as_its_own_kind(raised, expected):
    with pytest.raises(expected) as info, psi_errors():
        raise raised
    assert str(info.value) == str(raised) and info.value.__cause__ is raised
    assert isinstance(info.value, SecureVFLError)


def test_psi_errors_passes_other_errors_through():
    with pytest.raises(KeyError), psi_errors():
        raise KeyError("x")


def test_the_psi_aligner_raises_securevfl_errors():
    from securevfl.data.alignment import align_with_psi
    from securevfl.data.partition import PartyTable

    def table(name, ids):
        return PartyTable(name, np.asarray(ids, dtype=object), np.zeros((len(ids), 1)), ("f",))

    tables = {"active": table("active", ["x", "y", "x"]), "p": table("p", ["x", "y"])}
    with pytest.raises(DataError, match="duplicate ID") as info:
        align_with_psi(tables, "active", workers=1)
    assert isinstance(info.value.__cause__, PSIDataError)


def test_one_party_name_rule_in_both_layers():
    from psi.checks import validate_party_name as psi_rule
    from securevfl.checks import validate_party_name as securevfl_rule

    for name in ("shop", "bank-2", "a_b", "x" * 64):
        assert psi_rule(name) == securevfl_rule(name) == name
    for name in ("", "a b", "../x", "é", "x" * 65, 3):
        with pytest.raises(PSIConfigError) as psi_info:
            psi_rule(name)
        with pytest.raises(ConfigError) as securevfl_info:
            securevfl_rule(name)
        assert str(psi_info.value) == str(securevfl_info.value)
    assert psi.checks.MAX_PARTY_NAME_LENGTH == 64
