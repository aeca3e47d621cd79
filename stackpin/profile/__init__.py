"""Profiles: the StackProfile model, YAML loading with positions and `extends:`, and the derived Topology."""
