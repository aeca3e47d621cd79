"""Locking: the lockfile model and digests, the OCI client and layout, resolvers, and the lock run."""
