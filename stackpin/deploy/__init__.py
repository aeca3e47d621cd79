"""The cluster edge: apply a locked stack to Kubernetes, prune, recreate, wait; status and drift."""
