"""Operations: /metrics, and autoscaling with scale-in protection
(dispatcher/autoscale.py, dispatcher/protection.py; docs/scale-out.md)."""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from project.settings.environ import env

# /metrics answers only with `Authorization: Bearer <METRICS_TOKEN>`; unset, it is off.
METRICS_TOKEN = env("METRICS_TOKEN", "")
# /metrics names this many organisations per lane, those with the largest
# share of its worker time lately, and sums the rest as "other": a series
# per organisation would grow Prometheus's storage with every customer.
FAIRLANE_METRICS_ORGANISATIONS = int(env("FAIRLANE_METRICS_ORGANISATIONS", "20"))

# --- Autoscaling (dispatcher/autoscale.py, dispatcher/protection.py; docs/scale-out.md) ---
# /metrics suggests per lane the worker hosts that clear its work (waiting
# and in flight, in cost-corrected worker-seconds) within this many seconds
# (fairlane_suggested_hosts). 5 minutes: about what a new host takes to start
# and warm up, so a burst is asked for in one step, not chased.
FAIRLANE_SCALE_TARGET_S = float(env("FAIRLANE_SCALE_TARGET_S", "300"))
# Slots of one worker host for that suggestion; 0: the live workers' mean
# (1 while none is live, so set it when the lane scales from zero).
FAIRLANE_SCALE_HOST_SLOTS = int(env("FAIRLANE_SCALE_HOST_SLOTS", "0"))
# Scale-in protection of each worker host: "none", "ecs" (the ECS agent's
# task-protection endpoint, $ECS_AGENT_URI, which ECS sets in every task) or
# "kubernetes" (the pod's controller.kubernetes.io/pod-deletion-cost, patched
# through the API server with the pod's service account).
FAIRLANE_SCALE_PROTECTION = env("FAIRLANE_SCALE_PROTECTION", "none")
# A host stays protected while it has fetched or running work, and this long
# after its last; then it is unprotected. Far longer than the gap between two
# jobs of a busy lane (milliseconds), which a per-job toggle would leave open.
FAIRLANE_IDLE_UNPROTECT_S = float(env("FAIRLANE_IDLE_UNPROTECT_S", "60"))
ECS_AGENT_URI = env("ECS_AGENT_URI", "")
# ECS protection expires by itself after this (so a wedged worker cannot
# hold its task forever); renewed at half of it while protected.
FAIRLANE_ECS_PROTECTION_MINUTES = int(env("FAIRLANE_ECS_PROTECTION_MINUTES", "30"))
# Kubernetes: the API server as every pod sees it, the pod's own service
# account (token re-read on every call: projected tokens rotate) and the
# pod's name (HOSTNAME, unless the downward API gives FAIRLANE_POD_NAME).
_K8S_SA = "/var/run/secrets/kubernetes.io/serviceaccount"
FAIRLANE_K8S_API_URL = env("FAIRLANE_K8S_API_URL") or (
    f"https://{env('KUBERNETES_SERVICE_HOST')}:{env('KUBERNETES_SERVICE_PORT', '443')}"
    if env("KUBERNETES_SERVICE_HOST") else "")
FAIRLANE_K8S_TOKEN_FILE = env("FAIRLANE_K8S_TOKEN_FILE", f"{_K8S_SA}/token")
FAIRLANE_K8S_CA_FILE = env("FAIRLANE_K8S_CA_FILE", f"{_K8S_SA}/ca.crt")
FAIRLANE_K8S_NAMESPACE_FILE = env("FAIRLANE_K8S_NAMESPACE_FILE", f"{_K8S_SA}/namespace")
FAIRLANE_POD_NAME = env("FAIRLANE_POD_NAME") or env("HOSTNAME", "")
if FAIRLANE_SCALE_PROTECTION not in ("none", "ecs", "kubernetes"):
    raise ImproperlyConfigured("FAIRLANE_SCALE_PROTECTION must be none, ecs or kubernetes")
