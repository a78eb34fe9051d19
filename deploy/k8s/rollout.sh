#!/usr/bin/env bash
# Roll out one overlay: migrations first, then the processes.
#
#   deploy/k8s/rollout.sh deploy/k8s/overlays/example
#
# Plain kustomize has no "run this before that" (no Helm/Argo hooks), so the order is kept here:
#   1. render the overlay once (every step applies the same manifests);
#   2. delete the previous migration Job (a Job's pod template is immutable);
#   3. apply everything that is not a process - namespace, service account, ConfigMap, the
#      network policies and the migration Job - and wait for the Job to complete. A failed
#      migration stops the rollout here, with the previous release still serving;
#   4. apply everything (the Job is unchanged) and wait for each Deployment to be ready.
# Migrations must stay compatible with the release still running (expand now, contract in a
# later release): between steps 3 and 4 the old pods run on the new schema.
set -euo pipefail

overlay="${1:?usage: rollout.sh OVERLAY_DIR}"
timeout_s="${ROLLOUT_TIMEOUT_SECONDS:-600}"
namespace="$(awk '$1 == "namespace:" {print $2; exit}' "$overlay/kustomization.yaml")"
namespace="${namespace:?the overlay sets no namespace}"
processes='app.kubernetes.io/component notin (api,renewer,collector,relay)'

rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
kubectl kustomize "$overlay" >"$rendered"

kubectl -n "$namespace" delete job billing-migrate --ignore-not-found --wait=true
kubectl apply -f "$rendered" --selector "$processes"
# `kubectl wait --for=condition=complete` alone would sit until the timeout on a failed Job.
deadline=$((SECONDS + timeout_s))
while :; do
  conditions="$(kubectl -n "$namespace" get job billing-migrate \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')"
  case " $conditions " in
    *" Complete "*) break ;;
    *" Failed "*)
      kubectl -n "$namespace" logs job/billing-migrate --tail=100 >&2 || true
      echo "rollout.sh: the migration failed; the processes were not rolled out" >&2
      exit 1 ;;
  esac
  if ((SECONDS >= deadline)); then
    echo "rollout.sh: the migration did not finish in ${timeout_s} s" >&2
    exit 1
  fi
  sleep 5
done

kubectl apply -f "$rendered"
for deployment in billing-api billing-renewer billing-collector billing-relay; do
  kubectl -n "$namespace" rollout status "deployment/$deployment" --timeout="${timeout_s}s"
done
