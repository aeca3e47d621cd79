"""Measuring a stack: agent traces, the replay client, results bound to a lock, compare and gate."""
