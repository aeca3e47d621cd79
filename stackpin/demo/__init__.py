"""The demo mirror of stand-ins that `make demo` locks against (no registry or Hub is reachable here)."""
