"""stackpin/deploy/settled.py: whether an apply would change nothing, judged on objects as the real
kube-apiserver returns them after `stackpin apply` (managedFields included). Every change a dry run
would show answers False."""

from __future__ import annotations

import copy
from typing import Any

from stackpin.deploy.applyset import read_parent
from stackpin.deploy.kube import FIELD_MANAGER
from stackpin.deploy.objects import as_member, stack_objects
from stackpin.deploy.settled import apply_changes_nothing
from stackpin.deploy.source import resolve_source
from tests.kube import DGD, LOCKS, Kube, lockfile


def applied(kube: Kube) -> tuple[dict[str, Any], dict[str, Any]]:
    """The DynamoGraphDeployment as stackpin applies it (its body) and as the server has it."""
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    source = resolve_source(lockfile("gb300-disagg-wide-ep"), LOCKS)
    stack = stack_objects(source.lock, kube.namespace)
    parent = read_parent(kube.parent(), stack.deployment, kube.namespace)
    [body] = [as_member(o, parent, source.revision) for o in stack.objects if o["kind"] == "DynamoGraphDeployment"]
    live = kube.dgd()
    assert live is not None
    return body, live


def test_the_applied_object_is_settled_and_each_change_is_not(kube: Kube) -> None:
    body, live = applied(kube)
    assert apply_changes_nothing(live, body, FIELD_MANAGER)
    assert not apply_changes_nothing(live, body, "someone-else")
    assert not apply_changes_nothing(None, body, FIELD_MANAGER)

    changed = copy.deepcopy(body)
    changed["spec"]["components"][0]["replicas"] = 99  # a value in a list item
    assert not apply_changes_nothing(live, changed, FIELD_MANAGER)
    fewer = copy.deepcopy(body)
    del fewer["metadata"]["annotations"][next(iter(fewer["metadata"]["annotations"]))]  # a field it owned, dropped
    assert not apply_changes_nothing(live, fewer, FIELD_MANAGER)
    more = copy.deepcopy(body)
    more["metadata"]["labels"]["example.com/new"] = "x"  # a field it does not own yet
    assert not apply_changes_nothing(live, more, FIELD_MANAGER)
    nulled = copy.deepcopy(body)
    nulled["spec"]["backendFramework"] = None
    assert not apply_changes_nothing(live, nulled, FIELD_MANAGER)
    other = copy.deepcopy(body)
    other["apiVersion"] = "nvidia.com/v1alpha1"
    assert not apply_changes_nothing(live, other, FIELD_MANAGER)


def test_a_value_another_manager_changed_is_not_settled(kube: Kube) -> None:
    body, _ = applied(kube)
    path = kube.path(DGD, "dynamographdeployments", "dsv41-flash")
    label = next(iter(body["metadata"]["labels"]))
    kube.env.ok("PATCH", f"{path}?fieldManager=someone", {"metadata": {"labels": {label: "changed"}}},
                content_type="application/merge-patch+json")
    assert not apply_changes_nothing(kube.dgd(), body, FIELD_MANAGER)


def test_an_apply_of_fewer_fields_by_the_same_manager_is_not_settled(kube: Kube) -> None:
    """Its Apply entry then owns less than the body sets (an older stackpin, say): same values, but the
    apply would take the fields back, so it is not a no-op."""
    body, _ = applied(kube)
    path = kube.path(DGD, "dynamographdeployments", "dsv41-flash")
    label = next(iter(body["metadata"]["labels"]))
    kube.env.ok("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true",
                {"apiVersion": body["apiVersion"], "kind": body["kind"],
                 "metadata": {"name": "dsv41-flash", "labels": {label: body["metadata"]["labels"][label]}}},
                content_type="application/apply-patch+yaml")
    assert not apply_changes_nothing(kube.dgd(), body, FIELD_MANAGER)


def test_a_deleting_object_is_not_settled(kube: Kube) -> None:
    body, live = applied(kube)
    deleting = copy.deepcopy(live)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not apply_changes_nothing(deleting, body, FIELD_MANAGER)
