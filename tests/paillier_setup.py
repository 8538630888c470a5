"""Constants of the Paillier aggregation tests (the fixtures ``keypair`` and ``scheme`` are in conftest.py)."""

FRAC_BITS = 16
TEST_KEY_BITS = 1024  # insecure, tests only
