"""Every method option and aggregation-scheme option carries a help; ``securevfl methods [NAME]`` shows them."""

from __future__ import annotations

import dataclasses

import pytest

from securevfl.cli import main
from securevfl.methods import method_class, method_names
from securevfl.privacy.aggregation import aggregation_names, scheme_class
from securevfl.privacy.aggregation.options import option_names
from securevfl.settings import info_of


def _option_fields() -> list[tuple[str, dataclasses.Field]]:
    """(owner, field) of every option of every registered method and every aggregation scheme."""
    found = [(f"method {name}", f) for name in method_names() for f in dataclasses.fields(method_class(name).Options)]
    for scheme in aggregation_names():
        options = scheme_class(scheme).Options
        found += [(f"scheme {scheme}", f) for f in dataclasses.fields(options) if f.name in option_names(options)]
    return found


def test_every_option_has_a_help():
    fields = _option_fields()
    assert len({f.name for _, f in fields}) > 80  # every method's options, not an empty walk
    missing = [f"{owner}: {f.name}" for owner, f in fields
               if info_of(f) is None or not info_of(f).help.strip() or "\n" in info_of(f).help]
    assert not missing, missing


def _lines(capsys, args: list[str]) -> list[str]:
    assert main(args) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("method", ["easter", "secureboost", "tabvfl"])
def test_listing_shows_every_option_name_in_full_at_80_columns(method, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = _lines(capsys, ["methods"])
    assert max(len(line.rstrip()) for line in lines) <= 80
    first_words = {line.split()[0] for line in lines if line.strip()}
    names = [f.name for f in dataclasses.fields(method_class(method).Options)]
    assert [n for n in names if n not in first_words] == []
    assert "…" not in "\n".join(lines)  # nothing cut short


def test_listing_shows_help_and_the_secagg_scheme_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    text = "\n".join(_lines(capsys, ["methods", "easter"]))
    assert "Tree depth" not in text  # secureboost's max_depth help: another method's
    assert "Shamir threshold" in text  # easter's own threshold help
    assert "secagg.key_bits" in text and "secagg.key_holder" in text  # paillier's, as --option secagg.KEY
    assert "randbits" not in text  # a test hook, not an option


def test_one_method_lists_only_its_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    easter = _lines(capsys, ["methods", "easter"])
    first_words = {line.split()[0] for line in easter if line.strip()}
    assert {"easter", "drop_prob", "embed_grad", "secagg"} <= first_words
    assert "splitnn" not in first_words and "aggvfl" not in first_words
    assert not {"passive_bottom", "active_bottom"} & first_words  # splitnn's options


def test_narrow_terminal_keeps_every_name_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    lines = _lines(capsys, ["methods", "easter"])
    first_words = {line.split()[0] for line in lines if line.strip()}
    assert "secagg.insecure_allow_small_key" in first_words and "allow_peer_reveal" in first_words


def test_unknown_method_is_one_line_naming_the_closest(capsys):
    assert main(["methods", "eastr"]) == 2
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err) == 1 and "unknown method 'eastr'" in err[0] and "'easter'" in err[0]
    assert "Traceback" not in captured.err and captured.out == ""


def test_unknown_method_far_from_every_name_lists_them(capsys):
    assert main(["methods", "paillier"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "choose one of" in err[0] and "easter" in err[0]


def test_train_help_says_where_the_options_are_listed(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train", "--help"]) == 0
    assert "securevfl methods [NAME]" in capsys.readouterr().out
