"""ECDH private set intersection (pure protocol core + I/O). Does not import torch."""
