"""The training methods' names and option keys, without importing them (torch): to refuse a typo at once.

The registry (:func:`securevfl.methods.method_names` and each method's ``Options``) is the truth;
``tests/test_cli_startup.py`` checks that these lists are the same. Option values are checked later, by
the method's own options (they need its types and rules).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from securevfl.errors import ConfigError

#: Every registered method, sorted (aliases included).
METHOD_NAMES: tuple[str, ...] = (
    "aggvfl", "apcvfl", "apcvfl-ablation", "apcvfl-splitnn", "cvfl", "easter", "entity-aug", "fewshot-vfl",
    "hetero-lr", "laser-vfl", "local", "local-logreg", "pyvertical", "secureboost", "splitnn", "tabnet-ct",
    "tabnet-lt", "tabvfl", "tabvfl-le", "vfedtrans",
)


_SPLIT = ("bottom", "activation", "active_bottom", "passive_bottom", "top")
_SECURE_SUM = ("secagg", "key_agreement", "frac_bits", "ring_bits", "secagg_options", "models", "zoo", "el_pl",
               "embedding_size", "allow_peer_reveal")
_DISTILL = ("distill_loss", "lam", "patience", "max_epochs", "batch_size", "val_fraction")
_APCVFL = (*_DISTILL, "active_encoder", "passive_encoder", "joint_encoder", "student_encoder", "cv_folds",
           "include_test_rows", "probe_c")
_TABNET = ("n_steps", "gamma", "n_independent", "n_shared", "virtual_batch_size", "momentum", "mask_type",
           "pretrain_epochs", "pretraining_ratio", "lambda_sparse", "decoder_split", "fail_prob", "on_fail",
           "latent_quality", "quality_test_size", "part_latent_dim")

#: Each method's option keys (``--option KEY=VALUE``; a dotted ``group.key`` goes into ``group_options``).
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "aggvfl": (*_SECURE_SUM, "local_steps"),
    "apcvfl": _APCVFL, "apcvfl-ablation": _APCVFL, "apcvfl-splitnn": _APCVFL,
    "cvfl": ("compress", "bits", "topk_ratio", "models", "zoo", "embedding_size", "top_hidden", "local_steps"),
    "easter": (*_SECURE_SUM, "drop_prob", "threshold", "embed_grad"),
    "entity-aug": ("drop_prob", "misalign", "use_unaligned", "epoch_size", "resolution", "arch", "bottom", "loss"),
    "fewshot-vfl": ("variant", "local_epochs", "active_epochs", "mu", "lambda_u", "threshold", "select_threshold",
                    "mask_prob", "noise_std", "shift", "kmeans_init"),
    "hetero-lr": ("lr", "l2", "backend", "key_bits", "insecure_allow_small_key", "frac_bits", "fit_intercept",
                  "monitor_loss", "workers"),
    "laser-vfl": ("aggregation", "head", "cut_activation"),
    "local": (),
    "local-logreg": ("cv_folds", "probe_c"),
    "pyvertical": _SPLIT,
    "secureboost": ("trees", "max_depth", "learning_rate", "max_bins", "min_child_weight", "l2", "min_split_gain",
                    "subsample", "colsample", "first_tree_active_only", "encrypt", "backend", "key_bits",
                    "insecure_allow_small_key", "frac_bits", "packing", "subtraction", "shuffle", "precompute",
                    "workers", "executor", "ray_address"),
    "splitnn": _SPLIT,
    "tabnet-ct": _TABNET, "tabnet-lt": _TABNET, "tabvfl": _TABNET, "tabvfl-le": _TABNET,
    "vfedtrans": (*_DISTILL, "student_hidden", "cv_folds", "include_test_rows", "probe_c", "max_aligned_rows"),
}


def check_method_name(name: object) -> None:
    """Refuse a name that is not a method, with the same message as the registry's."""
    if name not in METHOD_NAMES:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHOD_NAMES)}")


def check_method_options(name: str, options: Mapping[str, object]) -> None:
    """Refuse an option key ``name`` does not have, with the registry's message (the values are checked later)."""
    valid = METHOD_OPTIONS.get(name, ())
    unknown = sorted(k for k in options if (f"{k.partition('.')[0]}_options" if "." in k else k) not in valid)
    if unknown:
        close = difflib.get_close_matches(unknown[0].partition(".")[0], valid, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        listed = ", ".join(valid) or "none"
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} for {name}{hint}; valid options: {listed} "
                          f"(securevfl methods {name})")


__all__ = ["METHOD_NAMES", "METHOD_OPTIONS", "check_method_name", "check_method_options"]
