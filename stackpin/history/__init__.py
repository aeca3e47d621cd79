"""Deployment history: promote a lock as the next revision, list revisions, roll back; one immutable,
verified file per revision (`store`, `model`), the newest rendered for GitOps (`deployed`)."""
