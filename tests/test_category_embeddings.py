"""Learned category embeddings: categorical columns become trailing codes (0 = never seen in training),
the neural bottoms embed them, and the methods without such a bottom refuse the option."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import securevfl
from securevfl.data import ColumnSpec
from securevfl.data.preprocess import code_cardinalities, fit_party_encoder
from securevfl.errors import ConfigError
from securevfl.networks import CategoryEmbeddings, mlp_bottom

FAST = {"parties": 3, "alignment": "plaintext", "device": "cpu"}


def test_codes_are_fitted_on_training_rows_and_unseen_levels_are_zero():
    train = pd.DataFrame({"plan": ["gold", "silver", "bronze"] * 10 + ["platinum"], "age": np.arange(31.0)})
    encoder = fit_party_encoder(train, ColumnSpec(embed=True))
    assert encoder.feature_names == ("age", "plan_code")  # codes come last
    assert code_cardinalities(encoder.summary) == (5,)  # unseen, 3 frequent levels, 1 shared rare level
    codes = encoder.transform(pd.DataFrame({"plan": ["gold", "diamond", "platinum", "bronze"],
                                            "age": [1.0, 2, 3, 4]}))[:, -1]
    assert codes[1] == 0 and codes[0] != codes[3] and codes.max() == 4  # diamond unseen; platinum the rare code
    assert set(codes) <= set(range(5))


def test_the_bottom_embeds_each_code_column():
    bottom = mlp_bottom(3, (5, 40), (8,), 4)
    front = bottom[0]
    assert isinstance(front, CategoryEmbeddings) and front.n_numeric == 1
    assert [t.embedding_dim for t in front.tables] == [4, 13]  # fast.ai's rule, round(1.6 * n ** 0.56)
    x = torch.tensor([[0.5, 4.0, 39.0], [-1.0, 0.0, 0.0]])
    assert bottom(x).shape == (2, 4)
    assert mlp_bottom(3, (), (8,), 4)(x).shape == (2, 4)  # no codes: the plain MLP


def test_embeddings_train_end_to_end_and_help_on_wide_categories():
    kwargs = {"epochs": 6, "n_samples": 4000, **FAST}
    plain = securevfl.train("splitnn", "synthetic-mixed", **kwargs)
    embedded = securevfl.train("splitnn", "synthetic-mixed", columns=ColumnSpec(embed=True), **kwargs)
    assert set(embedded.parties["active"]["preprocessing"]["embedded"]) == {"city", "channel"}
    # measured AUC 0.880 against 0.856 (city's 60 levels are hashed without embeddings); 10k rows, 10 epochs:
    # 0.903 against 0.863
    assert embedded.metrics["auc"] > plain.metrics["auc"]


def test_methods_without_a_neural_bottom_refuse_embeddings():
    with pytest.raises(ConfigError, match="tabvfl cannot learn category embeddings.*splitnn"):
        securevfl.train("tabvfl", "synthetic-mixed", epochs=1, columns=ColumnSpec(embed=True), **FAST)
