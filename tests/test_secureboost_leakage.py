"""secureboost: what each party learns, checked on the wire (docs/secureboost.md, "What each party learns").

Every run goes over a recording transport (real encoded bytes, a thread per party) with a Paillier
key pair injected (``SecureBoost.keypair``), so a test can decrypt what the active party decrypts
and check that the passive parties get ciphertexts only. The passive trainers are wrapped to keep
each tree's secret candidate order: the oracle that maps the active party's "split id k" back to a
feature and bin, which the active party itself never has. Small (insecure, tests only) keys,
breast-cancer (455 training rows) and a few shallow trees keep the whole file to seconds.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aggregation_harness import RecordingTransport

from securevfl.api import RunConfig, build_scenario
from securevfl.data import PartitionSpec
from securevfl.errors import PartyFailure, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.engine.loop import score_side
from securevfl.methods.secureboost import passive as sb_passive
from securevfl.methods.secureboost import protocol as sb
from securevfl.methods.secureboost.binning import fit_bins
from securevfl.methods.secureboost.codec import (
    DigitLayout,
    digit_bound,
    frac_bits_for,
    node_slot_bits,
    slots_per_ciphertext,
    to_fixed,
    unpack_pairs,
    unpack_signed,
)
from securevfl.methods.secureboost.histogram import candidates_of
from securevfl.methods.secureboost.options import SecureBoostOptions
from securevfl.methods.secureboost.scoring import ANSWER, QUERY
from securevfl.privacy.paillier import create_backend

SMALL_KEY = {"key_bits": 1024, "insecure_allow_small_key": True}
FRAC = SecureBoostOptions().frac_bits  # the fixed-point fraction bits of g and h
WIDTH = 256  # bytes of one ciphertext mod n^2 at 1024 bits
SEED = 0


@dataclass
class Run:
    scenario: Any
    method: Any
    roles: dict
    result: Any
    log: list
    keypair: tuple
    options: dict
    active_trainer: Any = None
    passive_trainers: dict = field(default_factory=dict)
    candidates: dict = field(default_factory=dict)  # party -> [candidate list per tree it served]
    cache: dict = field(default_factory=dict)  # party -> conversation()

    @property
    def active(self) -> str:
        return self.scenario.active

    @property
    def passives(self) -> tuple[str, ...]:
        return tuple(self.scenario.passives)

    def messages(self, src: str, dst: str, prefix: str = "secureboost.") -> list[tuple[str, Any, int]]:
        """(tag, decoded value, encoded bytes) of every message on one link, in order."""
        return [(e.tag, codec.decode(e.payload), len(e.payload)) for e in self.log
                if e.src == src and e.dst == dst and e.tag.startswith(prefix)]

    def saved(self, party: str):
        return self.roles[party].saved()

    def backend(self):
        public_key, private_key = self.keypair
        return create_backend("fast", public_key, private_key)


def train_run(keypair, *, parties=3, dataset="breast-cancer", shuffle_seed=None, **options) -> Run:
    """One recorded training run; the trainers and each passive party's candidate order per tree are kept."""
    options = {**SMALL_KEY, **options}
    train = TrainConfig(seed=SEED, options=options)
    config = RunConfig(method="secureboost", dataset=dataset, partition=PartitionSpec(parties=parties, seed=SEED),
                       train=train, alignment="plaintext")
    scenario = build_scenario(config)
    method = create_method("secureboost", train)
    method.keypair = keypair
    method.shuffle_seed = shuffle_seed
    run = Run(scenario, method, {}, None, [], keypair, options)
    with pytest.MonkeyPatch.context() as mp:
        active_init, passive_init, receive = (sb.ActiveTrainer.__init__, sb_passive.PassiveTrainer.__init__,
                                              sb_passive.PassiveTrainer._receive_tree)

        def keep_active(self, ctx, *args, **kwargs):
            active_init(self, ctx, *args, **kwargs)
            run.active_trainer = self

        def keep_passive(self, ctx, *args, **kwargs):
            passive_init(self, ctx, *args, **kwargs)
            run.passive_trainers[ctx.name] = self

        def keep_candidates(self, message, tree):
            out = receive(self, message, tree)
            run.candidates.setdefault(self.ctx.name, []).append(list(out.candidates))
            return out

        mp.setattr(sb.ActiveTrainer, "__init__", keep_active)
        mp.setattr(sb_passive.PassiveTrainer, "__init__", keep_passive)
        mp.setattr(sb_passive.PassiveTrainer, "_receive_tree", keep_candidates)
        run.roles = method.roles(scenario)
        transport = RecordingTransport(list(run.roles))
        run.result = run_parties(run.roles, active=scenario.active, passives=scenario.passives, transport=transport)
    run.log = transport.envelopes
    return run


def conversation(run: Run, passive: str) -> list[dict[str, Any]]:
    """The trees one passive party served: its TREE message and per level (assign, histograms, split, left rows).

    A tree the passive party only counted (``skip``: first_tree_active_only) is left out; the
    decrypted gradients (``gh``) and each level's decrypted left sums (``sums``) are read on first use.
    """
    if passive in run.cache:
        return run.cache[passive]
    down = [(t, v) for t, v, _ in run.messages(run.active, passive) if t != sb.PUBLIC_KEY]
    up = iter([(t, v) for t, v, _ in run.messages(passive, run.active) if t != sb.STATS])
    trees: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    level: dict[str, Any] | None = None
    for tag, value in down:
        if tag == sb.TREE:
            if value.get("done"):
                break
            if value.get("skip"):
                current = None
                continue
            current = {"tree": value, "levels": []}
            trees.append(current)
        elif tag == sb.ASSIGN:
            assert current is not None
            if value.get("end"):
                continue
            level = {"assign": value, "histograms": None}
            if len(value["compute"]):
                tag_up, level["histograms"] = next(up)
                assert tag_up == sb.HISTOGRAMS
            current["levels"].append(level)
        elif tag == sb.SPLIT:
            assert level is not None
            level["split"] = value
            tag_up, level["left"] = next(up)
            assert tag_up == sb.LEFT_ROWS
    if run.options.get("encrypt", True):
        for tree in trees:
            tree["gh"] = decrypt_gradients(run, tree["tree"])
            for level in tree["levels"]:
                level["sums"] = decrypt_histograms(run, tree["tree"], level["histograms"], level["assign"])
    run.cache[passive] = trees
    return trees


def walk_rows(data) -> np.ndarray:
    return np.concatenate([np.asarray(data.X_train, dtype=np.float64), np.asarray(data.X_test, dtype=np.float64)])


def decrypt_gradients(run: Run, tree_message: dict[str, Any]) -> np.ndarray:
    """The fixed-point (g, h) of each fitted row, read with the injected private key."""
    backend, n = run.backend(), run.keypair[0].n
    count = len(tree_message["rows"])
    parts = [sb.from_wire(p, WIDTH, count, "active", "gradients") for p in tree_message["gradients"]]
    if len(parts) == 1:
        return unpack_signed(backend.decrypt_raw(parts[0]), 2, tree_message["digit_bits"], n)
    residues = [backend.decrypt_raw(p) for p in parts]
    return np.array([[r - n if r > n // 2 else r for r in comp] for comp in residues], dtype=np.int64).T


def node_slots(tree_message: dict[str, Any], assign: dict[str, Any]) -> list[int]:
    """The compressed slot width of each computed node: from the party's rows of the tree and of the node."""
    rows, node_of = tree_message["rows"], np.asarray(assign["node_of"])
    return [node_slot_bits(tree_message["digit_bits"], len(rows), int((node_of[rows] == node).sum()))
            for node in np.asarray(assign["compute"]).tolist()]


def decrypt_histograms(run: Run, tree_message: dict[str, Any], histograms: dict[str, Any],
                       assign: dict[str, Any]) -> list[np.ndarray]:
    """What the active party reads from one histograms message: per computed node, (candidates, 2) left sums."""
    backend, n = run.backend(), run.keypair[0].n
    count, out = histograms["count"], []
    for blobs, slot in zip(histograms["sums"], node_slots(tree_message, assign), strict=True):
        cts = [[int.from_bytes(b[i : i + WIDTH], "big") for i in range(0, len(b), WIDTH)] for b in blobs]
        if len(blobs) == 1:  # packed: per ciphertext as many (g, h) slots of the node's width as fit
            per_ct = slots_per_ciphertext(n.bit_length(), slot)
            out.append(unpack_pairs(backend.decrypt_raw(cts[0]), per_ct, tree_message["digit_bits"], slot, n)[:count])
        else:
            residues = [backend.decrypt_raw(c) for c in cts]
            out.append(np.array([[r - n if r > n // 2 else r for r in comp] for comp in residues], dtype=np.int64).T)
    return out


def exact_left_sums(run: Run, passive: str, candidates, rows_in_node: np.ndarray, gh: np.ndarray,
                    fitted: np.ndarray) -> np.ndarray:
    """(G_L, H_L) of each candidate over a node's fitted rows, from the passive party's own bins (the oracle)."""
    bins = run.passive_trainers[passive].walk_bins[fitted[rows_in_node]].astype(np.int64)
    missing = run.passive_trainers[passive].bins.missing_bin
    out = np.zeros((len(candidates), 2), dtype=np.int64)
    for k, (f, b, miss) in enumerate(candidates):
        left = (bins[:, f] <= b) | ((bins[:, f] == missing) & miss)
        out[k] = gh[rows_in_node][left].sum(axis=0)
    return out


def contains_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "iub"
    if isinstance(value, dict):
        return any(contains_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_float(v) for v in value)
    return False


@pytest.fixture(scope="module")
def main_run(keypair):
    """3 parties, 3 trees of depth 3, packing and subtraction on, each passive party's permutation secret."""
    return train_run(keypair, trees=3, max_depth=3)


@pytest.fixture(scope="module")
def unpacked_run(keypair):
    """No packing: one ciphertext per (candidate, component), so a one-row bin sum is one row's ciphertext."""
    return train_run(keypair, parties=2, trees=1, max_depth=3, packing=False, shuffle_seed=5)


@pytest.fixture(scope="module")
def first_tree_run(keypair):
    """RL-SecureBoost's first tree (active party only) and a 60 % row subsample per tree."""
    return train_run(keypair, parties=2, trees=3, max_depth=2, first_tree_active_only=True, subsample=0.6)


# -- the passive party: gradients ---------------------------------------------------------------------------------

def test_the_passive_party_receives_the_gradients_only_as_paillier_ciphertexts(main_run):
    run = main_run
    n = run.keypair[0].n
    trainer = run.active_trainer
    sent = {p: conversation(run, p)[0]["tree"] for p in run.passives}
    first = sent[run.passives[0]]
    assert all(sent[p]["gradients"] == first["gradients"] for p in run.passives)  # one encryption, broadcast
    (blob,) = first["gradients"]  # packed: one ciphertext per fitted row
    rows = first["rows"]
    assert len(rows) == len(trainer.fit_rows) == 455 and len(blob) == WIDTH * len(rows)
    cts = [int.from_bytes(blob[i : i + WIDTH], "big") for i in range(0, len(blob), WIDTH)]
    assert len(set(cts)) == len(cts) and all(1 < c < n * n for c in cts)
    # They are real encryptions of the packed fixed-point g + h 2^s of the first tree (p − y and p (1 − p)) ...
    g, h = trainer.objective.gradients(trainer.y[trainer.fit_rows],
                                       np.tile(trainer.objective.base_margin(trainer.y[trainer.fit_rows]), (455, 1)))
    expected = np.column_stack([to_fixed(g[:, 0], FRAC), to_fixed(h[:, 0], FRAC)])
    np.testing.assert_array_equal(conversation(run, run.passives[0])[0]["gh"], expected)
    # ... and no plaintext: no ciphertext is its own packed plaintext, none of g or h is in the bytes.
    packed = [(int(a) + int(b) * 2 ** first["digit_bits"]) % n for a, b in expected]
    assert not set(packed) & set(cts)
    for value in expected[:20].ravel():
        assert int(value).to_bytes(8, "big", signed=True) not in blob
        assert int(value).to_bytes(8, "little", signed=True) not in blob


def test_no_training_message_carries_a_float_either_way(main_run):
    """No label, gradient, feature value, threshold or leaf weight crosses in the clear: integers and bytes only."""
    run = main_run
    tags = {}
    for envelope in run.log:
        value = codec.decode(envelope.payload)
        assert not contains_float(value), envelope.tag
        tags.setdefault((envelope.src == run.active), set()).add(envelope.tag)
    assert tags[True] == {sb.PUBLIC_KEY, sb.TREE, sb.ASSIGN, sb.SPLIT}
    assert tags[False] == {sb.HISTOGRAMS, sb.LEFT_ROWS, sb.STATS}


# -- the active party: candidate sums, permutation, split ids ----------------------------------------------------

def test_the_active_party_decrypts_every_left_sum_of_every_computed_node(main_run):
    """The known SecureBoost leakage: bin-level sums (G_L, H_L) per candidate, and the number of candidates."""
    run = main_run
    checked = 0
    for passive in run.passives:
        trainer = run.passive_trainers[passive]
        every = candidates_of([len(c) + 1 for c in trainer.bins.cuts], [False] * trainer.bins.n_features)
        for t, tree in enumerate(conversation(run, passive)):
            rows = tree["tree"]["rows"].astype(np.int64)
            gh = tree["gh"]
            candidates = run.candidates[passive][t]
            for level in tree["levels"]:
                node_of, compute = level["assign"]["node_of"], level["assign"]["compute"]
                hist = level["histograms"]
                assert hist["count"] == len(every) == sum(len(c) for c in trainer.bins.cuts)
                sums = level["sums"]
                assert len(sums) == len(compute)
                for node, got in zip(compute.tolist(), sums, strict=True):
                    members = np.flatnonzero(node_of[rows] == node)
                    np.testing.assert_array_equal(got, exact_left_sums(run, passive, candidates, members, gh, rows))
                    checked += 1
    assert checked >= 12


def test_the_active_party_derives_the_sums_of_the_larger_sibling(main_run):
    """With subtraction the passive party sends the smaller child only; parent − child is the sibling's sums."""
    run = main_run
    derived = 0
    for passive in run.passives:
        for t, tree in enumerate(conversation(run, passive)):
            rows = tree["tree"]["rows"].astype(np.int64)
            gh = tree["gh"]
            candidates = run.candidates[passive][t]
            known: dict[int, np.ndarray] = {}
            previous = None
            for level in tree["levels"]:
                node_of, compute = level["assign"]["node_of"], level["assign"]["compute"].tolist()
                sums = level["sums"]
                known.update(dict(zip(compute, sums, strict=True)))
                if previous is not None:
                    for child in compute:
                        parent = int(previous[np.flatnonzero(node_of == child)[0]])
                        siblings = set(np.unique(node_of[previous == parent]).tolist()) - {child}
                        (sibling,) = siblings
                        if parent in known and sibling not in compute:
                            members = np.flatnonzero(node_of[rows] == sibling)
                            np.testing.assert_array_equal(known[parent] - known[child],
                                                          exact_left_sums(run, passive, candidates, members, gh, rows))
                            known[sibling] = known[parent] - known[child]
                            derived += 1
                previous = node_of
    assert derived >= 4


def test_histograms_are_rerandomised_even_where_a_candidate_holds_one_row(main_run, unpacked_run):
    for run in (main_run, unpacked_run):
        for passive in run.passives:
            trees = conversation(run, passive)
            sent = set()
            for tree in trees:
                for blob in tree["tree"]["gradients"]:
                    sent |= {int.from_bytes(blob[i : i + WIDTH], "big") for i in range(0, len(blob), WIDTH)}
            received = [int.from_bytes(b[i : i + WIDTH], "big") for tree in trees for level in tree["levels"]
                        for blobs in level["histograms"]["sums"] for b in blobs for i in range(0, len(b), WIDTH)]
            assert received and not sent & set(received)
            assert 1 not in received  # an empty sum is E(0) = 1 before re-randomisation
            assert len(set(received)) == len(received)
    # Not vacuous: without packing, these candidate sums are exactly one row's ciphertext before re-randomisation.
    run = unpacked_run
    (passive,) = run.passives
    one_row = 0
    for t, tree in enumerate(conversation(run, passive)):
        rows, gh = tree["tree"]["rows"].astype(np.int64), tree["gh"]
        for level in tree["levels"]:
            node_of, compute = level["assign"]["node_of"], level["assign"]["compute"].tolist()
            sums = level["sums"]
            for node, got in zip(compute, sums, strict=True):
                members = np.flatnonzero(node_of[rows] == node)
                bins = run.passive_trainers[passive].walk_bins[rows[members]].astype(np.int64)
                for k, (f, b, _) in enumerate(run.candidates[passive][t]):
                    left = np.flatnonzero(bins[:, f] <= b)
                    if len(left) == 1:
                        np.testing.assert_array_equal(got[k], gh[members[left[0]]])
                        one_row += 1
    assert one_row >= 10


def test_the_candidate_order_is_a_fresh_secret_permutation_per_tree(main_run):
    run = main_run
    for passive in run.passives:
        orders = run.candidates[passive]
        assert len(orders) == 3
        assert all(sorted(o) == sorted(orders[0]) for o in orders)
        for a in range(3):
            for b in range(a + 1, 3):
                same = sum(x == y for x, y in zip(orders[a], orders[b], strict=True))
                assert same < len(orders[a]) // 10  # the same feature/bin sits at another split id
    # the two passive parties draw independent permutations
    assert [c[1:] for c in run.candidates[run.passives[0]][0]] != [c[1:] for c in run.candidates[run.passives[1]][0]]


def test_the_active_party_gets_split_ids_and_row_bits_never_a_passive_feature_or_threshold(main_run):
    run = main_run
    for passive in run.passives:
        for tree in conversation(run, passive):
            for level in tree["levels"]:
                split, left = level["split"], level["left"]
                assert set(split) == {"nodes", "candidates"} and split["candidates"].dtype.kind == "i"
                assert set(left) == {"records", "left"} and all(isinstance(m, bytes) for m in left["left"])
    # No passive threshold reaches the active party, in any byte of any message.
    to_active = b"".join(e.payload for e in run.log if e.dst == run.active)
    for passive in run.passives:
        table = run.saved(passive).weights["splits"]
        thresholds = table["threshold"].numpy()
        assert len(thresholds) > 0
        for value in thresholds:
            assert struct.pack("<d", value) not in to_active and struct.pack(">d", value) not in to_active
        # each passive party keeps its own thresholds: cut points of its own bins
        trainer = run.passive_trainers[passive]
        for f, v in zip(table["feature"].tolist(), thresholds.tolist(), strict=True):
            assert v in trainer.bins.cuts[f]
    # The active party's part: its own lookup table (its own cut points) and, per node, owner and record only
    # (and the side of the rows the owner lacks: its own decision).
    saved = run.saved(run.active).weights
    assert set(saved) == {"trees", "splits"}
    assert set(saved["trees"]) == {"left", "right", "owner", "record", "value", "roots", "output", "base_margin",
                                   "absent_left"}
    assert not saved["trees"]["absent_left"].any()  # every party holds every row: nothing absent to send left
    owner, record = saved["trees"]["owner"].numpy(), saved["trees"]["record"].numpy()
    own = saved["splits"]
    assert len(own["feature"]) == int((owner == 0).sum()) > 0
    for f, v in zip(own["feature"].tolist(), own["threshold"].tolist(), strict=True):
        assert v in run.active_trainer.bins.cuts[f]
    for index, passive in enumerate(run.passives, start=1):
        held = len(run.saved(passive).weights["splits"]["feature"])
        assert sorted(record[owner == index].tolist()) == list(range(held))  # record ids into its own table


def test_the_active_party_learns_which_rows_go_left_at_every_passive_split(main_run):
    """The instance space of a passive split: the rows of the node going left, as the passive threshold puts them."""
    run = main_run
    splits = 0
    for passive in run.passives:
        table = run.saved(passive).weights["splits"]
        feature, threshold = table["feature"].numpy(), table["threshold"].numpy()
        X = walk_rows(run.passive_trainers[passive].data)
        for tree in conversation(run, passive):
            for level in tree["levels"]:
                node_of = level["assign"]["node_of"]
                for node, record, mask in zip(level["split"]["nodes"].tolist(), level["left"]["records"].tolist(),
                                              level["left"]["left"], strict=True):
                    rows = np.flatnonzero(node_of == node)  # training and held-out rows alike
                    left = np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=len(rows)).astype(bool)
                    np.testing.assert_array_equal(left, X[rows, feature[record]] <= threshold[record])
                    assert 0 < left.sum() < len(rows)
                    splits += 1
    assert splits == sum(len(run.saved(p).weights["splits"]["feature"]) for p in run.passives) >= 4


# -- the passive party: the instance space -------------------------------------------------------------------------

def joint_walk(run: Run, tree: int, depth: int) -> np.ndarray:
    """Each walked row's node after ``depth`` levels of tree ``tree``, with every party's saved table (the oracle)."""
    trees = {k: v.numpy() for k, v in run.saved(run.active).weights["trees"].items()}
    parties = (run.active, *run.passives)
    data = [run.active_trainer.data, *(run.passive_trainers[p].data for p in run.passives)]
    tables = [{k: v.numpy() for k, v in run.saved(p).weights["splits"].items()} for p in parties]
    X = [walk_rows(d) for d in data]
    node = np.full(len(X[0]), trees["roots"][tree])
    rows = np.arange(len(node))
    for _ in range(depth):
        owner, record = trees["owner"][node], trees["record"][node]
        go_left = np.zeros(len(node), dtype=bool)
        for index, table in enumerate(tables):
            at = owner == index
            go_left[at] = X[index][rows[at], table["feature"][record[at]]] <= table["threshold"][record[at]]
        node = np.where(owner >= 0, np.where(go_left, trees["left"][node], trees["right"][node]), node)
    return node


def test_the_passive_party_learns_the_node_of_every_row_at_every_level(main_run):
    """ASSIGN: each row's node at each level, through the active party's splits too (SecureBoost's instance space)."""
    run = main_run
    owner = run.saved(run.active).weights["trees"]["owner"].numpy()
    roots = run.saved(run.active).weights["trees"]["roots"].numpy()
    active_partition_seen = 0
    for passive in run.passives:
        for t, tree in enumerate(conversation(run, passive)):
            assert 1 <= len(tree["levels"]) <= 3
            for depth, level in enumerate(tree["levels"]):
                node_of = level["assign"]["node_of"]
                assert node_of.shape == (455 + 114,)  # the training rows and the held-out rows
                np.testing.assert_array_equal(node_of, joint_walk(run, t, depth) - roots[t])  # ids from the root
                if depth and owner[joint_walk(run, t, depth - 1)].tolist().count(0):
                    active_partition_seen += 1
    assert active_partition_seen >= 2


def test_the_passive_party_learns_each_trees_fitted_rows(first_tree_run):
    run = first_tree_run
    trainer = run.active_trainer
    (passive,) = run.passives
    trees = conversation(run, passive)
    assert len(trees) == 2  # the first of the three trees was the active party's alone (skip)
    rows = [tree["tree"]["rows"] for tree in trees]
    for t, tree, got in zip((1, 2), trees, rows, strict=True):
        np.testing.assert_array_equal(got, trainer.fit_rows[trainer._sample(t)])
        assert len(got) == round(0.6 * 455)
        assert len(tree["tree"]["gradients"][0]) == WIDTH * len(got)
    assert set(rows[0].tolist()) != set(rows[1].tolist())


@pytest.fixture(scope="module")
def regression_run(keypair):
    """diabetes (squared error: h = 1, |g| up to the target's range), 2 parties, 3 trees of depth 2."""
    return train_run(keypair, parties=2, dataset="diabetes", trees=3, max_depth=2)


def test_the_digit_width_is_public_for_classification_and_a_power_of_two_bound_for_regression(main_run,
                                                                                              regression_run):
    run = main_run
    expected = DigitLayout.fitting(digit_bound(455, 1.0, FRAC), 1024)  # rows, |g| <= 1, h <= 1, the key: public
    for passive in run.passives:
        for tree in conversation(run, passive):
            assert tree["tree"]["digit_bits"] == expected.digit_bits
            for level in tree["levels"]:  # each node's slot: the digit, and an h digit narrowed by its share of rows
                rows = np.asarray(level["assign"]["node_of"])[tree["tree"]["rows"]]
                for node, slot in zip(level["assign"]["compute"].tolist(), node_slots(tree["tree"], level["assign"]),
                                      strict=True):
                    share = 455 // int((rows == node).sum())
                    assert slot == expected.digit_bits + max(8, expected.digit_bits - (share.bit_length() - 1))
                    assert slot <= 2 * expected.digit_bits
    (passive,) = regression_run.passives
    widths = []
    for tree in conversation(regression_run, passive):
        message, gh = tree["tree"], tree["gh"]
        frac = int(gh[0, 1]).bit_length() - 1  # h = 1 for squared error: the tree's scale 2^frac
        assert (gh[:, 1] == 2**frac).all()
        rows = len(message["rows"])
        bound = max(1.0, 2.0 ** math.ceil(math.log2(float(np.abs(gh[:, 0]).max()) / 2**frac)))
        assert frac == frac_bits_for(rows, bound, FRAC)
        assert message["digit_bits"] == DigitLayout.fitting(digit_bound(rows, bound, frac), 1024).digit_bits
        widths.append(message["digit_bits"])
    assert min(widths) > DigitLayout.fitting(digit_bound(353, 1.0, FRAC), 1024).digit_bits  # |g| > 1 shows


def test_for_regression_the_active_party_reads_row_counts_of_every_candidate(regression_run):
    """h = 1: H_L is 2^frac times the number of the node's rows left of the candidate (per-bin counts)."""
    run = regression_run
    (passive,) = run.passives
    for t, tree in enumerate(conversation(run, passive)):
        rows, gh = tree["tree"]["rows"].astype(np.int64), tree["gh"]
        scale = int(gh[0, 1])
        for level in tree["levels"]:
            node_of = level["assign"]["node_of"]
            for node, sums in zip(level["assign"]["compute"].tolist(), level["sums"], strict=True):
                members = np.flatnonzero(node_of[rows] == node)
                bins = run.passive_trainers[passive].walk_bins[rows[members]].astype(np.int64)
                counts = [int((bins[:, f] <= b).sum()) for f, b, _ in run.candidates[passive][t]]
                np.testing.assert_array_equal(sums[:, 1], np.array(counts) * scale)


# -- first_tree_active_only ------------------------------------------------------------------------------------------

def test_first_tree_active_only_sends_the_passive_party_nothing_of_the_first_tree(first_tree_run):
    run = first_tree_run
    (passive,) = run.passives
    down = run.messages(run.active, passive)
    assert down[0][0] == sb.PUBLIC_KEY
    assert (down[1][0], down[1][1]) == (sb.TREE, {"tree": 0, "skip": True})
    assert down[2][0] == sb.TREE and down[2][1]["tree"] == 1 and "gradients" in down[2][1]
    assert down[1][2] < 64  # no rows, no ciphertexts
    owner = run.saved(run.active).weights["trees"]["owner"].numpy()
    roots = run.saved(run.active).weights["trees"]["roots"].numpy()
    assert (owner[: roots[1]] <= 0).all() and (owner[: roots[1]] == 0).any()  # the first tree: the active party's


def test_first_tree_active_only_hides_the_first_trees_size_from_the_node_numbers(first_tree_run):
    """Node ids on the wire count from each tree's root: the second tree's ids say nothing of the first's size.

    (With forest-wide ids, the second tree's root id was the first tree's node count.)
    """
    run = first_tree_run
    (passive,) = run.passives
    first_assign = conversation(run, passive)[0]["levels"][0]["assign"]
    roots = run.saved(run.active).weights["trees"]["roots"].numpy()
    assert int(roots[1]) > 1  # the first tree did split
    assert set(first_assign["node_of"].tolist()) == {0}
    assert first_assign["compute"].tolist() == [0]


# -- encrypt=false, shuffle=false --------------------------------------------------------------------------------------

def test_encrypt_false_sends_plaintext_and_builds_the_same_trees(keypair):
    """A test and cost mode: the passive party gets g and h in the clear. Without shuffling, both modes agree."""
    plain = train_run(keypair, parties=3, trees=2, max_depth=3, encrypt=False, shuffle=False)
    secret = train_run(keypair, parties=3, trees=2, max_depth=3, shuffle=False)
    passive = plain.passives[0]
    first = conversation(plain, passive)[0]
    gradients = first["tree"]["gradients"]
    assert isinstance(gradients, np.ndarray) and gradients.dtype == np.int64 and gradients.shape == (455, 2)
    np.testing.assert_array_equal(gradients, conversation(secret, passive)[0]["gh"])
    assert plain.messages(plain.active, passive)[0][:2] == (sb.PUBLIC_KEY, None)
    assert isinstance(first["levels"][0]["histograms"]["sums"], np.ndarray)
    # shuffle=false: split id k is candidate k of the feature-major list, so it names feature and bin
    for run in (plain, secret):
        for p in run.passives:
            trainer = run.passive_trainers[p]
            every = candidates_of([len(c) + 1 for c in trainer.bins.cuts], [False] * trainer.bins.n_features)
            assert all(order == every for order in run.candidates[p])
    for party in (plain.active, *plain.passives):
        a, b = plain.saved(party).weights, secret.saved(party).weights
        assert set(a) == set(b)
        for module in a:
            for name in a[module]:
                np.testing.assert_array_equal(a[module][name].numpy(), b[module][name].numpy())
    np.testing.assert_array_equal(plain.result.results[plain.active].scores,
                                  secret.result.results[secret.active].scores)


# -- the wire: sizes and rounds ------------------------------------------------------------------------------------

def test_sizes_per_tree_and_level(main_run, unpacked_run):
    for run, components in ((main_run, 1), (unpacked_run, 2)):
        for passive in run.passives:
            down = [t for t, _, _ in run.messages(run.active, passive)]
            up = [t for t, _, _ in run.messages(passive, run.active)]
            for tree in conversation(run, passive):
                message = tree["tree"]
                assert [len(b) for b in message["gradients"]] == [WIDTH * len(message["rows"])] * components
                for level in tree["levels"]:
                    hist = level["histograms"]
                    count = hist["count"]
                    per_node = [count if components == 2 else math.ceil(count / slots_per_ciphertext(1024, slot))
                                for slot in node_slots(message, level["assign"])]
                    assert [[len(b) for b in blobs] for blobs in hist["sums"]] == \
                        [[WIDTH * per] * components for per in per_node]
            levels = sum(len(tree["levels"]) for tree in conversation(run, passive))
            # 4 messages per level: assign, histograms, split, left rows
            assert down.count(sb.ASSIGN) - down.count(sb.TREE) + 1 == levels == down.count(sb.SPLIT)
            assert up.count(sb.HISTOGRAMS) == up.count(sb.LEFT_ROWS) == levels


# -- scoring with the saved model ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scored(main_run):
    """The main run's saved parts score its held-out rows by the joint tree walk, over a recording transport."""
    run = main_run
    sides = run.method.scoring_roles(run.scenario)
    roles = {p: functools.partial(score_side, side=sides[p].side, saved=run.saved(p), batch_rows=50)
             for p in sides}
    transport = RecordingTransport(list(roles))
    result = run_parties(roles, active=run.active, passives=run.passives, transport=transport)
    return result, transport.envelopes


def test_scoring_tells_the_active_party_one_bit_per_row_at_each_passive_node(main_run, scored):
    run = main_run
    result, log = scored
    np.testing.assert_allclose(result.results[run.active].scores, run.result.results[run.active].scores, atol=1e-12)
    for passive in run.passives:
        table = run.saved(passive).weights["splits"]
        X = np.asarray(run.passive_trainers[passive].data.X_test, dtype=np.float64)
        up = [e for e in log if e.src == passive and e.dst == run.active]
        down = [codec.decode(e.payload) for e in log if e.src == run.active and e.dst == passive and e.tag == QUERY]
        assert {e.tag for e in up} == {ANSWER}
        queries, batch = [], 0
        for q in down:  # row numbers are positions in the batch of 50 being scored
            if q.get("done"):
                batch += 1
            else:
                queries.append((batch * 50, q))
        assert batch == -(-len(X) // 50) and len(up) == len(queries)
        answered = 0
        for envelope, (offset, query) in zip(up, queries, strict=True):
            answer = codec.decode(envelope.payload)
            assert isinstance(answer, bytes) and len(answer) == -(-len(query["rows"]) // 8)
            bits = np.unpackbits(np.frombuffer(answer, dtype=np.uint8), count=len(query["rows"])).astype(bool)
            rows, records = query["rows"].astype(np.int64) + offset, query["records"].astype(np.int64)
            np.testing.assert_array_equal(bits, X[rows, table["feature"].numpy()[records]]
                                          <= table["threshold"].numpy()[records])
            answered += len(rows)
        assert answered > 0


def test_scoring_asks_a_passive_party_only_about_its_own_records(main_run, scored):
    run = main_run
    _, log = scored
    for passive in run.passives:
        records_held = len(run.saved(passive).weights["splits"]["feature"])
        down = [codec.decode(e.payload) for e in log if e.src == run.active and e.dst == passive]
        assert not any(contains_float(m) for m in down)  # no leaf weight, score or threshold
        queries = [m for m in down if isinstance(m, dict) and "records" in m]
        assert queries
        assert sum(len(q["rows"]) for q in queries) > 0
        for q in queries:
            assert set(q) == {"rows", "records"} and q["rows"].dtype.kind == q["records"].dtype.kind == "i"
            assert ((0 <= q["records"]) & (q["records"] < records_held)).all()
            pairs = set(zip(q["rows"].tolist(), q["records"].tolist(), strict=True))
            assert len(pairs) == len(q["rows"])  # each (row, record) once per level


# -- a deviating active party (outside the semi-honest model) -----------------------------------------------------

def test_a_deviating_active_party_reads_a_passive_partys_bins(keypair):
    """Crafted gradients (g = 2^i for row i), a crafted assignment (one row per node) or crafted split requests
    (any candidate at any node) reveal on which side of every candidate each chosen row falls.

    SecureBoost's security is semi-honest: the passive party cannot check what it is sent, so the
    left sums it returns expose, for each chosen row, on which side of every candidate it falls.
    """
    options = {**SMALL_KEY, "trees": 1, "max_depth": 2, "shuffle": True}
    train = TrainConfig(seed=SEED, options=options)
    config = RunConfig(method="secureboost", dataset="breast-cancer", partition=PartitionSpec(parties=2, seed=SEED),
                       train=train, alignment="plaintext")
    scenario = build_scenario(config)
    method = create_method("secureboost", train)
    (passive,) = scenario.passives
    data = scenario.party_data(passive)
    public_key, private_key = keypair
    backend = create_backend("fast", public_key, private_key)
    n = public_key.n
    n_walk = len(data.X_train) + len(data.X_test)
    fitted = np.arange(len(data.X_train))
    digit_bits = 36
    targets = 31
    g = np.zeros(len(fitted), dtype=np.int64)
    g[:targets] = 2 ** np.arange(targets)  # row i's bit in every sum
    h = np.ones(len(fitted), dtype=np.int64)
    seen: dict[str, Any] = {}
    candidates: list = []

    def read(message, count, node_rows):
        out = []
        slot = node_slot_bits(digit_bits, len(fitted), node_rows)
        for (blob,) in message["sums"]:
            cts = [int.from_bytes(blob[i : i + WIDTH], "big") for i in range(0, len(blob), WIDTH)]
            out.append(unpack_pairs(backend.decrypt_raw(cts), slots_per_ciphertext(n.bit_length(), slot), digit_bits,
                                    slot, n)[:count])
        return out

    def deviating_active(ctx):
        ctx.send(passive, sb.PUBLIC_KEY, public_key.to_bytes())
        plain = [(int(a) + int(b) * 2**digit_bits) % n for a, b in zip(g, h, strict=True)]
        ctx.send(passive, sb.TREE, {"tree": 0, "rows": fitted.astype(np.int32), "digit_bits": digit_bits,
                                    "gradients": [sb.to_wire(backend.encrypt_raw(plain), WIDTH)]})
        # level 1: every row at the root, crafted gradients
        ctx.send(passive, sb.ASSIGN, {"node_of": np.zeros(n_walk, np.int32), "compute": np.array([0], np.int32)})
        message = ctx.recv(passive, sb.HISTOGRAMS)
        seen["root"] = read(message, message["count"], len(fitted))[0]
        ctx.send(passive, sb.SPLIT, {"nodes": np.zeros(0, np.int64), "candidates": np.zeros(0, np.int64)})
        ctx.recv(passive, sb.LEFT_ROWS)
        # level 2: rows 100..119 each in a node of its own (h = 1 alone then tells the side)
        node_of = np.zeros(n_walk, np.int32)
        node_of[100:120] = np.arange(1, 21)
        ctx.send(passive, sb.ASSIGN, {"node_of": node_of, "compute": np.arange(1, 21, dtype=np.int32)})
        message = ctx.recv(passive, sb.HISTOGRAMS)
        seen["single"] = read(message, message["count"], 1)
        # and a crafted split request: node 0 (every other row) at candidates 0..4, all at once
        ctx.send(passive, sb.SPLIT, {"nodes": np.zeros(5, np.int64), "candidates": np.arange(5, dtype=np.int64)})
        seen["left"] = ctx.recv(passive, sb.LEFT_ROWS)["left"]
        ctx.send(passive, sb.ASSIGN, {"end": True})
        ctx.send(passive, sb.TREE, {"done": True, "trees": 1})
        return ctx.recv(passive, sb.STATS)

    receive = sb_passive.PassiveTrainer._receive_tree

    def keep_candidates(self, message, tree):
        out = receive(self, message, tree)
        candidates.extend(out.candidates)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sb_passive.PassiveTrainer, "_receive_tree", keep_candidates)
        roles = {scenario.active: deviating_active, passive: sb_passive.passive_role(data, train, method.options)}
        run_parties(roles, active=scenario.active, passives=(passive,), transport=RecordingTransport(list(roles)))
    bins = fit_bins(np.asarray(data.X_train, dtype=np.float64), method.options.max_bins)
    walk_bins = bins.transform(walk_rows(data)).astype(np.int64)
    side = np.array([[walk_bins[r, f] <= b for (f, b, _) in candidates] for r in range(n_walk)])  # (rows, candidates)
    # crafted gradients: bit i of G_L(k) is whether target row i goes left at candidate k
    G = seen["root"][:, 0]
    for i in range(targets):
        np.testing.assert_array_equal((G >> i) & 1 == 1, side[i])
    np.testing.assert_array_equal(seen["root"][:, 1], side[fitted].sum(axis=0))  # and each candidate's row count
    # crafted assignment: H_L(node of row r, k) is whether row r goes left at candidate k
    # crafted split request: the partition of node 0's rows at each candidate asked for
    others = np.setdiff1d(np.arange(n_walk), np.arange(100, 120))
    for k, mask in enumerate(seen["left"]):
        np.testing.assert_array_equal(np.unpackbits(np.frombuffer(mask, np.uint8), count=len(others)).astype(bool),
                                      side[others, k])
    assert len(seen["single"]) == 20
    for j, r in enumerate(range(100, 120)):
        np.testing.assert_array_equal(seen["single"][j][:, 1] == 1, side[r])


# -- a deviating passive party ------------------------------------------------------------------------------------

def test_a_passive_party_claiming_more_candidates_than_agreed_is_refused(keypair):
    """The active party checks shapes and counts (not values: sums and left rows cannot be verified)."""
    original = sb_passive.PassiveTrainer._histograms

    def inflated(self, tree, sample_bins, node_rows):
        message = original(self, tree, sample_bins, node_rows)
        return {**message, "count": 10**6}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sb_passive.PassiveTrainer, "_histograms", inflated)
        with pytest.raises(PartyFailure, match="passive1 sent 1000000 split candidates") as failure:
            train_run(keypair, parties=2, trees=1, max_depth=1)
    assert failure.value.party == "active" and isinstance(failure.value.cause, ProtocolError)
