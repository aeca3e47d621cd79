"""The Argo CD health check of a DynamoGraphDeployment: a Lua script in `argocd-cm` under
`resource.customizations.health.nvidia.com_DynamoGraphDeployment` (Argo CD v3.5.1 util/settings/settings.go
`convertToOverrideKey`: `<group>_<kind>`; docs/operator-manual/health.md). Argo CD has none of its own for this
kind (no resource_customizations/nvidia.com/ at v3.5.1), and an object without one is left out of its
Application's health (controller/health.go), so without this a RollingSync wave would not wait for the operator.

What it reads is what the Dynamo operator writes (the bundled CRD's status: `state`, an enum of
initializing | pending | successful | failed, default initializing; the `Ready` condition, True exactly when
the state is successful, its reason and message the operator's; `observedGeneration`), and it says what
stackpin's own readiness (deploy/readiness.py) and the Flux health expressions (gitops.DGD_CURRENT) say:

- no status yet, or a status of an older generation: Progressing (the operator has not caught up);
- successful (and Ready not other than True): Healthy;
- failed: Degraded, with the operator's message;
- pending, initializing: Progressing;
- a state this script does not know: Unknown (Argo CD's own word for "cannot tell").

Missing is Argo CD's verdict when the object is not in the cluster at all (controller/health.go); the script
only runs on an object that is. Argo CD runs it in gopher-lua (Lua 5.1) with only the base, table, package and
a safe os library opened (util/lua/lua.go `runLua`): no `string` functions, so messages are built with `..`.
"""

from __future__ import annotations

from typing import Any

from stackpin.yamlio import dump_yaml

ARGOCD_CM = "argocd-cm"
ARGOCD_CM_FILE = "argocd-cm-dgd-health.yaml"
DGD_HEALTH_KEY = "resource.customizations.health.nvidia.com_DynamoGraphDeployment"
# Argo CD reads argocd-cm through an informer filtered on this label (util/settings/settings.go
# partOfArgoCDSelector): without it the key is never seen.
PART_OF = {"app.kubernetes.io/name": ARGOCD_CM, "app.kubernetes.io/part-of": "argocd"}

DGD_HEALTH_LUA = """\
-- DynamoGraphDeployment health from what the Dynamo operator writes: status.state (initializing,
-- pending, successful, failed), the Ready condition and status.observedGeneration. From stackpin
-- (docs/gitops.md); it agrees with `stackpin status` and the Flux fleet's healthCheckExprs.
local hs = {}
local status = obj.status
if status == nil or status.state == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Dynamo operator to report a state"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Dynamo operator to observe generation " .. generation
  return hs
end
local ready = nil
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end
local detail = ""
if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
  detail = ": " .. ready.message
elseif ready ~= nil and ready.reason ~= nil and ready.reason ~= "" then
  detail = ": " .. ready.reason
end
local state = status.state
if state == "successful" then
  if ready ~= nil and ready.status ~= "True" then
    hs.status = "Progressing"
    hs.message = "State successful, Ready is " .. tostring(ready.status) .. detail
  else
    hs.status = "Healthy"
    hs.message = "State successful" .. detail
  end
elseif state == "failed" then
  hs.status = "Degraded"
  hs.message = "State failed" .. detail
elseif state == "pending" or state == "initializing" then
  hs.status = "Progressing"
  hs.message = "State " .. state .. detail
else
  hs.status = "Unknown"
  hs.message = "Unknown state " .. tostring(state) .. detail
end
return hs
"""


def health_configmap(namespace: str = "argocd") -> dict[str, Any]:
    """`argocd-cm` holding the health check alone: applied server-side it adds this key and leaves the
    other keys (owned by whoever set them) as they are."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ARGOCD_CM, "namespace": namespace, "labels": dict(PART_OF)},
            "data": {DGD_HEALTH_KEY: DGD_HEALTH_LUA}}


INSTALL = ("Add it to Argo CD's argocd-cm without replacing the other keys: kubectl apply --server-side",
           "--field-manager=stackpin-health -f <this file> (or copy the data key into the argocd-cm your",
           "install manages, e.g. the argo-cd Helm chart's configs.cm).")


def health_configmap_yaml(header: str, namespace: str = "argocd") -> str:
    return header + dump_yaml(health_configmap(namespace))
