"""Stack upgrades as dependency updates: check, propose, trial, promote (see README.md)."""
