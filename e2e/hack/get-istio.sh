#!/usr/bin/env bash
# Builds Istio's real control plane for the local world into e2e/.cache/istio:
#   pilot-discovery  istiod, from istio.io/istio at the version e2e/istio/go.mod pins
#   helm             from hack/tools, to render Istio's own charts
#   charts/          istio-discovery, base and ztunnel, copied from that istio.io/istio
#   gateway-api/     the standard Gateway API CRDs, from the sigs.k8s.io/gateway-api
#                    module that istio.io/istio requires
# Go's build cache makes a second run a check of seconds: `go build -o` links
# again only when something changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/e2e/.cache/istio"
mkdir -p "$out"

cd "$root/e2e/istio"
go mod download istio.io/istio
version=$(go list -m -f '{{.Version}}' istio.io/istio)
src=$(go list -m -f '{{.Dir}}' istio.io/istio)
# Without a stamped version istiod reports "unknown".
go build -o "$out/pilot-discovery" \
  -ldflags "-X istio.io/istio/pkg/version.buildVersion=$(cat "$src/VERSION")-dev -X istio.io/istio/pkg/version.buildGitRevision=$version -X istio.io/istio/pkg/version.buildStatus=Clean" \
  istio.io/istio/pilot/cmd/pilot-discovery

cd "$root/hack/tools"
go build -o "$out/helm" helm.sh/helm/v3/cmd/helm

if [ "$(cat "$out/charts/.version" 2>/dev/null)" != "$version" ]; then
  rm -rf "$out/charts"
  mkdir -p "$out/charts"
  cp -R "$src/manifests/charts/istio-control/istio-discovery" "$src/manifests/charts/base" "$out/charts/"
  chmod -R u+w "$out/charts"
  echo "$version" > "$out/charts/.version"
  echo "$(cat "$src/VERSION")-dev" > "$out/charts/.istio-version"
fi

# The ztunnel chart, for worlds that run ambient (copied on its own, so a
# cache made before it was needed gets it too).
if [ ! -f "$out/charts/ztunnel/Chart.yaml" ] || [ "$(cat "$out/charts/.ztunnel-version" 2>/dev/null)" != "$version" ]; then
  src=$(go -C "$root/e2e/istio" list -m -f '{{.Dir}}' istio.io/istio)
  rm -rf "$out/charts/ztunnel"
  cp -R "$src/manifests/charts/ztunnel" "$out/charts/"
  chmod -R u+w "$out/charts/ztunnel"
  echo "$version" > "$out/charts/.ztunnel-version"
fi

# The istio-cni chart, for worlds that run ambient: its node agent's
# DaemonSet (whose pods the world's kubelet runs; the redirection itself
# is e2e/mesh/cni.go's).
if [ ! -f "$out/charts/istio-cni/Chart.yaml" ] || [ "$(cat "$out/charts/.istio-cni-version" 2>/dev/null)" != "$version" ]; then
  src=$(go -C "$root/e2e/istio" list -m -f '{{.Dir}}' istio.io/istio)
  rm -rf "$out/charts/istio-cni"
  cp -R "$src/manifests/charts/istio-cni" "$out/charts/"
  chmod -R u+w "$out/charts/istio-cni"
  echo "$version" > "$out/charts/.istio-cni-version"
fi

gwapi_version=$(go -C "$root/e2e/istio" list -m -f '{{.Version}}' sigs.k8s.io/gateway-api)
if [ "$(cat "$out/gateway-api/.version" 2>/dev/null)" != "$gwapi_version" ]; then
  go -C "$root/e2e/istio" mod download sigs.k8s.io/gateway-api
  gwapi=$(go -C "$root/e2e/istio" list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
  rm -rf "$out/gateway-api"
  mkdir -p "$out/gateway-api"
  cp "$gwapi"/config/crd/standard/*.yaml "$out/gateway-api/"
  chmod -R u+w "$out/gateway-api"
  echo "$gwapi_version" > "$out/gateway-api/.version"
fi
