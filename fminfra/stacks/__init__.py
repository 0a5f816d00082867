"""Stacks split by lifecycle: Network, Data, Storage, Observability, Compute (deploy order)."""
