"""FlashInfer autotune caches: inspect, verify against a profile, pack into an OCI image, push and fetch."""
