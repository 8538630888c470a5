"""The federation file: parsing, defaults, validation, and the job fingerprint parties compare."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import securevfl.deploy as deploy
from securevfl.deploy import (
    Federation,
    JobSpec,
    NetworkSettings,
    PartySpec,
    TlsSpec,
    check_party_name,
    job_differences,
    job_fingerprint,
    load_federation,
    parse_federation,
)
from securevfl.errors import ConfigError

MINIMAL = """
[federation]
active = "bank"

[parties.bank]
address = "127.0.0.1:7101"
[parties.shop]
address = "127.0.0.1:7102"
[parties.clinic]
address = "127.0.0.1:7103"

[tls]
dir = "certs"

[job]
method = "splitnn"
epochs = 20
seed = 0
id_column = "customer_id"
label_column = "churn"
"""

BASE = Path("/srv/fed")


def parse(text: str, base: Path = BASE) -> Federation:
    return parse_federation(text, base)


def edit(old: str, new: str, text: str = MINIMAL) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_public_names_import() -> None:
    for name in deploy.__all__:
        assert getattr(deploy, name) is not None
    assert len(set(deploy.__all__)) == len(deploy.__all__)


def test_minimal_file_loads_with_documented_defaults(tmp_path: Path) -> None:
    path = tmp_path / "fed.toml"
    path.write_text(MINIMAL)
    fed = load_federation(path)
    root = tmp_path.resolve()
    assert fed.source == path
    assert fed.active == "bank" and fed.insecure is False
    assert list(fed.parties) == ["bank", "shop", "clinic"]
    assert fed.parties["shop"] == PartySpec("shop", "127.0.0.1:7102", root / "certs/shop.pem", root / "certs/shop.key")
    assert fed.tls == TlsSpec(dir=root / "certs", ca=root / "certs/ca.pem")
    assert fed.addresses == {"bank": "127.0.0.1:7101", "shop": "127.0.0.1:7102", "clinic": "127.0.0.1:7103"}
    assert fed.limits == NetworkSettings()
    assert (fed.limits.peer_timeout_s, fed.limits.heartbeat_s, fed.limits.max_message_mb, fed.limits.chunk_kb,
            fed.limits.connect_timeout_s, fed.limits.reconnect_backoff_s, fed.limits.max_backoff_s) == (
        30.0, 2.0, 1024.0, 1024, 60.0, 0.2, 5.0)
    job = fed.job.as_dict()
    assert (job["method"], job["epochs"], job["seed"], job["id_column"], job["label_column"]) == (
        "splitnn", 20, 0, "customer_id", "churn")
    assert job["options"] == {} and job["batch_size"] == 32 and job["lr"] == 1e-3 and job["embedding_dim"] == 16
    assert job["hidden"] == [64] and job["test_size"] == 0.2 and job["normalize"] == [] and job["psi_mode"] == "both"
    assert fed.job.run.train.epochs == 20 and fed.job.psi.normalize == ()  # typed: the run's own config
    assert fed.party("clinic").address == "127.0.0.1:7103"
    with pytest.raises(ConfigError, match=r"'bob' is not a party in .*fed\.toml; parties: bank, clinic, shop"):
        fed.party("bob")


FULL = """
[federation]
active = "bank"
insecure = false

[parties.bank]
address = "10.0.0.1:7101"
cert = "/etc/bank/tls.crt"
key = "/etc/bank/tls.key"
[parties.shop]
address = "[2001:db8::2]:7102"
[parties.clinic]
address = "clinic.example.org:443"

[tls]
dir = "certs"
ca = "../ca/root.pem"

[network]
peer_timeout_s = 10
heartbeat_s = 0.5
max_message_mb = 64
chunk_kb = 256
connect_timeout_s = 5
reconnect_backoff_s = 0.1
max_backoff_s = 2
send_window_mb = 32
recv_timeout_s = 900

[job]
method = "splitnn"
epochs = 3
batch_size = 64
lr = 0.01
seed = 7
embedding_dim = 8
hidden = [32, 16]
test_size = 0.25
id_column = "customer_id"
label_column = "churn"
normalize = ["casefold", "strip"]
psi_mode = "both"

[job.options]
secagg = true
dp = { epsilon = 1.0, clip = 2 }
"""


def test_every_key_is_read() -> None:
    fed = parse(FULL)
    bank = fed.parties["bank"]
    assert bank.cert == Path("/etc/bank/tls.crt") and bank.key == Path("/etc/bank/tls.key")
    assert fed.parties["shop"].cert == BASE / "certs/shop.pem"
    assert fed.tls == TlsSpec(dir=BASE / "certs", ca=BASE / "../ca/root.pem")
    assert fed.limits == NetworkSettings(10, 0.5, 64, 256, 5, 0.1, 2, 32, 900)
    assert isinstance(fed.limits.peer_timeout_s, float)
    train = fed.job.run.train
    assert train.hidden == (32, 16) and fed.job.psi.normalize == ("strip", "casefold")  # canonical order
    assert train.options == {"secagg": True, "dp": {"epsilon": 1.0, "clip": 2}}
    assert (train.epochs, train.batch_size, train.lr, train.seed, train.embedding_dim,
            fed.job.run.partition.test_size) == (3, 64, 0.01, 7, 8, 0.25)


def test_relative_paths_resolve_against_the_files_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "conf"
    sub.mkdir()
    (sub / "fed.toml").write_text(edit('[parties.shop]\n', '[parties.shop]\ncert = "own/shop.crt"\n'))
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    fed = load_federation(Path("conf/fed.toml"))
    root = sub.resolve()
    assert fed.tls is not None and fed.tls.dir == root / "certs" and fed.tls.ca == root / "certs/ca.pem"
    assert fed.parties["shop"].cert == root / "own/shop.crt"
    assert fed.parties["shop"].key == root / "certs/shop.key"
    assert fed.parties["bank"].cert == root / "certs/bank.pem"


SECTION_KEYS = {
    "[federation]": ("active = \"bank\"\n", "actve = 1\n", "active, insecure"),
    "[parties.shop]": ("address = \"127.0.0.1:7102\"\n", "adress = \"x\"\n", "address, cert, columns, data, key"),
    "[tls]": ("dir = \"certs\"\n", "cafile = \"x\"\n", "ca, dir"),
    "[job]": ("method = \"splitnn\"\n", "epoch = 3\n",
              "batch_size, class_weight, early_stopping, embedding_dim, epochs, hidden, id_column, label_column, lr, "
              "method, min_improvement, normalize, options, party_dropout, psi_mode, require_all_parties, seed, "
              "select, subset_views, task, test_size, val_fraction"),
}


@pytest.mark.parametrize("section", sorted(SECTION_KEYS))
def test_unknown_keys_are_refused_with_the_valid_keys(section: str) -> None:
    anchor, typo, valid = SECTION_KEYS[section]
    text = MINIMAL.replace(f"{section}\n{anchor}", f"{section}\n{anchor}{typo}", 1)
    assert text != MINIMAL
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    assert f"in {section}; valid keys: {valid}" in message
    assert repr(typo.split(" ")[0]) in message


def test_unknown_network_key_and_section_and_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"'peer_timeout' \(did you mean 'peer_timeout_s'\?\) in \[network\]; "
                                          r"valid keys: chunk_kb, connect_timeout_s, heartbeat_s, max_backoff_s"):
        parse(MINIMAL + "[network]\npeer_timeout = 3\n")
    with pytest.raises(ConfigError, match=r"'netwrk'.* valid keys: federation, job, network, parties, tls"):
        parse(MINIMAL + "[netwrk]\n")


def test_insecure_only_on_loopback() -> None:
    plain = edit('[tls]\ndir = "certs"\n', "", edit('active = "bank"\n', 'active = "bank"\ninsecure = true\n'))
    fed = parse(plain)
    assert fed.insecure and fed.tls is None and fed.parties["bank"].cert is None
    parse(plain.replace("127.0.0.1:7103", "localhost:7103").replace("127.0.0.1:7102", "127.5.6.7:7102"))
    parse(plain.replace("127.0.0.1:7103", "[::1]:7103"))
    with pytest.raises(ConfigError, match=r"only allowed when every party is on loopback.*clinic \(10\.1\.2\.3:7103\)"):
        parse(plain.replace("127.0.0.1:7103", "10.1.2.3:7103"))
    with pytest.raises(ConfigError, match="not on loopback: clinic"):
        parse(plain.replace("127.0.0.1:7103", "clinic.example.org:7103"))
    with pytest.raises(ConfigError, match=r"insecure = true conflicts with the \[tls\] section"):
        parse(edit('active = "bank"\n', 'active = "bank"\ninsecure = true\n'))
    with pytest.raises(ConfigError, match="insecure must be true or false"):
        parse(edit('active = "bank"\n', 'active = "bank"\ninsecure = "yes"\n'))
    with pytest.raises(ConfigError, match=r"names a cert or key but the file has no \[tls\] section"):
        parse(plain.replace('[parties.shop]\n', '[parties.shop]\nkey = "shop.key"\n'))


def test_tls_section_is_required_without_insecure() -> None:
    with pytest.raises(ConfigError, match=r"a \[tls\] section is required"):
        parse(edit('[tls]\ndir = "certs"\n', ""))


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.0.0.1:", ":7101", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http", "::1:7101",
    "[::1]", "[not-ipv6]:7101", "bank example:7101", "127.0.0.1: 7101", "0.0.0.0:7101", "[::]:7101", "",
])
def test_bad_addresses_are_refused(address: str) -> None:
    with pytest.raises(ConfigError, match=r"\[parties\.shop\] invalid address"):
        parse(edit('"127.0.0.1:7102"', json.dumps(address)))


def test_address_rules() -> None:
    parse(edit('"127.0.0.1:7102"', '"[2001:db8::1]:65535"'))
    parse(edit('"127.0.0.1:7102"', '"shop-01.internal.example:1"'))
    with pytest.raises(ConfigError, match="must be a string"):
        parse(edit('"127.0.0.1:7102"', "7102"))
    with pytest.raises(ConfigError, match="parties 'bank' and 'shop' have the same address"):
        parse(edit('"127.0.0.1:7102"', '"127.0.0.1:7101"'))
    with pytest.raises(ConfigError, match=r"\[parties\.shop\] needs 'address'"):
        parse(edit('address = "127.0.0.1:7102"\n', 'cert = "x.pem"\n'))


@pytest.mark.parametrize("name", ["ba nk", "bank.example", "bänk", "x" * 65, "a/b", ""])
def test_bad_party_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="ASCII letters, digits, '-' and '_'") as info:
        parse(edit("[parties.clinic]", f"[parties.{json.dumps(name)}]"))
    assert repr(name) in str(info.value)
    assert check_party_name("Bank_2-x") == "Bank_2-x"
    with pytest.raises(ConfigError):
        check_party_name(name)


def test_party_set_rules() -> None:
    with pytest.raises(ConfigError, match=r"active = 'insurer' is not a party; parties: bank, clinic, shop"):
        parse(edit('active = "bank"', 'active = "insurer"'))
    two_gone = re.sub(r"\[parties\.(shop|clinic)\]\naddress = \"[^\"]+\"\n", "", MINIMAL)
    with pytest.raises(ConfigError, match="at least 2 parties, got 1"):
        parse(two_gone)
    with pytest.raises(ConfigError, match="'shop' and 'Shop' differ only in case"):
        parse(MINIMAL.replace("[tls]", '[parties.Shop]\naddress = "127.0.0.1:7104"\n\n[tls]'))
    with pytest.raises(ConfigError, match=r"missing section \[job\]"):
        parse(MINIMAL.split("[job]")[0])
    with pytest.raises(ConfigError, match=r"\[federation\] needs 'active'"):
        parse(edit('active = "bank"\n', ""))
    with pytest.raises(ConfigError, match=r"\[job\] needs 'id_column', 'label_column'"):
        parse(re.sub(r"(id|label)_column = .*\n", "", MINIMAL))


@pytest.mark.parametrize(("line", "message"), [
    ("epochs = 0", "epochs must be a positive integer"),
    ("epochs = 2.5", "epochs must be a positive integer"),
    ("epochs = true", "epochs must be a positive integer"),
    ("seed = -1", "seed must be a non-negative integer"),
    ("lr = 0", "lr must be a positive number"),
    ("lr = nan", "lr must be a positive number"),
    ("hidden = 64", "hidden must be a list"),
    ("hidden = [64, 0]", "hidden must be a list of positive integers"),
    ("test_size = 1.0", "test_size must be a number strictly between 0 and 1"),
    ('normalize = ["lower"]', "normalize: invalid"),
    ('normalize = "strip"', "normalize must be a list"),
    ('psi_mode = "everything"', "psi_mode must be one of both, active_only, cardinality"),
    ("early_stopping = -1", "early_stopping must be a non-negative integer"),
    ("val_fraction = 1.5", "val_fraction must be a number strictly between 0 and 1"),
    ('method = ""', "method must be a non-empty string"),
    ("options = 3", r"\[job.options\] must be a table"),
    ("options = { start = 2024-01-01 }", "not supported; use a string"),
    ("options = { eps = inf }", "must be a finite number"),
])
def test_bad_job_values(line: str, message: str) -> None:
    key = line.split(" ")[0]
    text = re.sub(rf"^{key} = .*\n", "", MINIMAL, flags=re.M) + line + "\n"
    with pytest.raises(ConfigError, match=message):
        parse(text)


@pytest.mark.parametrize(("line", "message"), [
    ("heartbeat_s = 30", "heartbeat_s .* must be shorter than peer_timeout_s"),
    ("chunk_kb = 0", "chunk_kb must be an integer in 1..16384"),
    ("chunk_kb = 1.5", "chunk_kb must be an integer"),
    ("peer_timeout_s = -1", "peer_timeout_s must be a positive number"),
    ("max_backoff_s = 0.1", "max_backoff_s .* must be at least reconnect_backoff_s"),
])
def test_bad_network_values(line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(MINIMAL + f"[network]\n{line}\n")


def test_toml_syntax_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "fed.toml"
    path.write_text(MINIMAL.replace("epochs = 20", "epochs = = 20"))
    line = MINIMAL.splitlines().index("epochs = 20") + 1
    with pytest.raises(ConfigError, match=rf"fed\.toml: invalid TOML: .*line {line}"):
        load_federation(path)
    with pytest.raises(ConfigError, match=r"federation file .*missing\.toml.* does not exist"):
        load_federation(tmp_path / "missing.toml")
    path.write_text(edit("epochs = 20", "epochs = 0"))
    with pytest.raises(ConfigError, match=r"fed\.toml: \[job\] epochs must be a positive integer"):
        load_federation(path)


# ------------------------------------------------------------------ agreement


def _reordered() -> str:
    """MINIMAL with sections, parties and keys in another order, other spacing and a comment."""
    return """
# the same federation, written differently
[job]
label_column = "churn"
id_column   = "customer_id"
seed = 0
epochs = 20
method = "splitnn"
lr = 0.001
hidden = [ 64 ]

[tls]
dir = "elsewhere"

[parties.clinic]
address = "127.0.0.1:7103"
[parties.shop]
address = "127.0.0.1:7102"
[parties.bank]
address = "127.0.0.1:7101"

[network]
peer_timeout_s = 99

[federation]
active = "bank"
"""


def test_fingerprint_is_stable_across_key_order_and_local_settings() -> None:
    digest, canonical = job_fingerprint(parse(MINIMAL))
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    other_digest, other = job_fingerprint(parse(_reordered(), Path("/elsewhere")))
    assert other == canonical and other_digest == digest
    assert canonical["job"]["hidden"] == [64] and canonical["job"]["options"] == {}
    assert canonical["federation"] == {"active": "bank"}
    assert sorted(canonical["parties"]) == ["bank", "clinic", "shop"]
    assert canonical["parties"]["shop"] == {"address": "127.0.0.1:7102"}
    # The canonical dictionary survives a JSON round trip (it travels in the HELLO frame).
    assert json.loads(json.dumps(canonical)) == canonical


def test_fingerprint_changes_with_what_parties_must_agree_on() -> None:
    base, _ = job_fingerprint(parse(MINIMAL))
    variants = [
        edit("epochs = 20", "epochs = 21"),
        edit('active = "bank"', 'active = "shop"'),
        edit("127.0.0.1:7103", "127.0.0.1:7104"),
        MINIMAL + "batch_size = 33\n",
        MINIMAL + "[job.options]\nsecagg = true\n",
        MINIMAL.replace("[tls]", '[parties.insurer]\naddress = "127.0.0.1:7105"\n\n[tls]'),
    ]
    digests = {job_fingerprint(parse(v))[0] for v in variants}
    assert base not in digests and len(digests) == len(variants)


def test_job_differences_lists_exactly_the_differing_keys() -> None:
    _, a = job_fingerprint(parse(MINIMAL + "[job.options]\nsecagg = true\nclip = 1.0\n"))
    changed = edit("epochs = 20", "epochs = 21", MINIMAL + "[job.options]\nsecagg = false\nclip = 1.0\nnew = 1\n")
    _, b = job_fingerprint(parse(edit("127.0.0.1:7102", "127.0.0.1:7202", changed)))
    assert job_differences(a, b) == ["job.epochs", "job.options.new", "job.options.secagg", "parties.shop.address"]
    assert job_differences(a, a) == [] and job_differences(b, json.loads(json.dumps(b))) == []
    # Differences agree with the digest: 1 and 1.0 hash differently, so they are reported.
    assert job_differences({"job": {"x": 1}}, {"job": {"x": 1.0}}) == ["job.x"]
    assert job_differences({"job": {"h": [1, 2]}}, {"job": {"h": [2, 1]}}) == ["job.h"]
    assert job_differences({"a": 1}, {"a": {"b": 1}}) == ["a"]
    assert job_differences({"a": b"x"}, {"a": b"y"}) == ["a"]  # a peer's odd values do not crash it


def test_dataclasses_validate_when_built_directly() -> None:
    job = JobSpec.of({"method": "splitnn", "id_column": "id", "label_column": "y", "hidden": [8, 4],
                      "normalize": ["nfc"]})
    assert job.run.train.hidden == (8, 4) and job.psi.normalize == ("nfc",)
    with pytest.raises(ConfigError, match="invalid party name"):
        PartySpec("no good", "127.0.0.1:1")
    parties = {"a": PartySpec("a", "127.0.0.1:1"), "b": PartySpec("b", "127.0.0.1:2")}
    with pytest.raises(ConfigError, match=r"\[tls\] section is required"):
        Federation(active="a", parties=parties, tls=None, insecure=False, job=job)
    with pytest.raises(ConfigError, match="no certificate or key path for parties a, b"):
        Federation(active="a", parties=parties, tls=TlsSpec(Path("c"), Path("c/ca.pem")), insecure=False, job=job)
    fed = Federation(active="a", parties=parties, tls=None, insecure=True, job=job)
    with pytest.raises(AttributeError):
        fed.active = "b"  # type: ignore[misc]
    options = {"nested": {"k": [1]}}
    job2 = JobSpec.of({"method": "m", "id_column": "i", "label_column": "l", "options": options})
    options["nested"]["k"].append(2)
    assert job2.run.train.options == {"nested": {"k": [1]}}  # a private copy


def test_the_examples_in_the_docs_parse_and_match() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text()
    section = doc.split("\n## Federation file\n", 1)[1]
    minimal, full = [b for b in re.findall(r"```toml\n(.*?)```", section, flags=re.S) if "[federation]" in b][:2]
    star = re.sub(r'(\[parties\.(shop|clinic)\]\n)address = "[^"]*"\n', r"\1", MINIMAL)  # the docs lead with a star
    assert parse(minimal) == parse(star)
    fed = parse(full)
    assert fed.limits == NetworkSettings() and fed.insecure is False
    assert fed.job == JobSpec.of({"method": "splitnn", "id_column": "customer_id", "label_column": "churn",
                                  "options": {"secagg": "dh"}})
    shown = json.loads(re.search(r"```json\n(.*?)```", doc, flags=re.S).group(1))
    assert shown == job_fingerprint(parse(star))[1]


def test_helper_parties_without_data() -> None:
    text = MINIMAL.replace("[tls]", '[parties.arbiter]\naddress = "127.0.0.1:7104"\ndata = false\n\n[tls]')
    fed = parse(text)
    assert fed.data_parties == ("bank", "shop", "clinic") and not fed.party("arbiter").data
    assert job_fingerprint(fed)[1]["parties"]["arbiter"] == {"address": "127.0.0.1:7104", "data": False}
    assert "data" not in job_fingerprint(fed)[1]["parties"]["bank"]
    with pytest.raises(ConfigError, match="cannot be data = false"):
        parse(text.replace('[parties.bank]\naddress = "127.0.0.1:7101"',
                           '[parties.bank]\naddress = "127.0.0.1:7101"\ndata = false'))
    with pytest.raises(ConfigError, match="data must be true or false"):
        parse(text.replace("data = false", 'data = "no"'))


def test_a_partys_column_spec_is_local_to_it() -> None:
    from securevfl.data import ColumnSpec

    section = '[parties.shop.columns]\ncategorical = ["store"]\ndrop = ["notes"]\nmax_onehot = 8\n\n[tls]'
    fed = parse(MINIMAL.replace("[tls]", section))
    assert fed.party("shop").columns == ColumnSpec(categorical=("store",), drop=("notes",), max_onehot=8)
    assert fed.party("bank").columns == ColumnSpec()
    assert job_fingerprint(fed) == job_fingerprint(parse(MINIMAL))  # each party's own: not agreed on
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'categorial' in \[parties\.shop\.columns\]"):
        parse(MINIMAL.replace("[tls]", section.replace("categorical", "categorial")))
    with pytest.raises(ConfigError, match=r"\[parties\.shop\.columns\]: max_onehot must be an integer"):
        parse(MINIMAL.replace("[tls]", section.replace("8", '"8"')))
    helper = '[parties.arbiter]\naddress = "127.0.0.1:7104"\ndata = false\n[parties.arbiter.columns]\ndrop = ["x"]\n'
    with pytest.raises(ConfigError, match="data = false: it has no columns"):
        parse(MINIMAL.replace("[tls]", helper + "\n[tls]"))
