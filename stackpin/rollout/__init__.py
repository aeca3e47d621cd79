"""Staged rollout of a deployment's revision across racks (README.md)."""
