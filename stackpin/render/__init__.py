"""Rendering of Kubernetes manifests and their validation."""
