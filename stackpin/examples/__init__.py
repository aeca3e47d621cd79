"""The example profiles and the profile JSON Schema shipped in the package, and `stackpin init`'s starters."""
