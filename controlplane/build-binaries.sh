#!/usr/bin/env bash
# Build kube-apiserver, etcd, kustomize (and on request the node binaries and the benchmarks'
# Go programs) from Go modules into OUT (a cache directory).
# Usage: build-binaries.sh OUT K8S_VERSION ETCD_VERSION KUSTOMIZE_VERSION [what...]
# what: any of kube-apiserver etcd kustomize helm kubectl crane kube-controller-manager hollow-node
# kubemark peer-signer ceiling-signer bench-populate kcm-signer traefik (default: the first three; helm,
# kubectl and crane are for the install tests, which run the documented commands; hollow-node is
# kubemark's hollow kubelet, ported, with loopback-only ports: hollownode/; peer-signer,
# ceiling-signer, bench-populate and kcm-signer are the benchmarks' Go programs under bench/,
# kcm-signer a module of its own with its versions pinned in its go.mod and go.sum)
# A binary already in OUT is kept, unless REBUILD (space-separated names) lists it: then it
# is built beside it and moved over it, so a running test never finds it missing.
# The replace list for the staging modules is generated from the upstream go.mod, so a
# staging repository added in a later release does not break the build.
set -euo pipefail
OUT=$1 KV=$2 EV=$3 ZV=$4
HV=${HELM_VERSION:-v4.3.2}  # helm (chart tests): built like kustomize
CV=${CRANE_VERSION:-v0.22.1}  # crane (go-containerregistry): the README's image push, and a registry
# traefik (the Gateway tests' data plane) needs TRAEFIK_VERSION; OUT is then its own cache
# directory (.../service-serving-signer/traefik/<version>), not a Kubernetes version's
shift 4
WHAT=${*:-kube-apiserver etcd kustomize}
SV="v0.${KV#v1.}"
# The Go toolchain: the caller's GOTOOLCHAIN (controlplane/binaries.py passes go1.27.3, which
# Kubernetes 1.38's go.mod needs; the go command fetches it from the module proxy once), else
# the machine's own go.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$OUT"
log() { printf '[controlplane build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

k8s_module() {  # $1: dir; writes a wrapper module requiring k8s.io/kubernetes with staging replaced
  local W=$1 GOMOD GOVER m
  GOMOD=$(cd "$W" && go mod download -json "k8s.io/kubernetes@$KV" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  GOVER=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$GOMOD")
  printf 'module local.invalid/k8s-tools\n\ngo %s\n' "$GOVER" > "$W/go.mod"
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$GOMOD"); do
    (cd "$W" && go mod edit -replace="$m=$m@$SV")
  done
  # 1.38's kubelet imports sigs.k8s.io/iptables-wrappers, which the module proxy does not
  # serve (403): a stand-in declaring what the kubelet uses (hollownode/iptables-wrappers).
  if grep -q '^[[:space:]]*sigs\.k8s\.io/iptables-wrappers ' "$GOMOD"; then
    (cd "$W" && go mod edit -replace="sigs.k8s.io/iptables-wrappers=$HERE/hollownode/iptables-wrappers")
  fi
  (cd "$W" && go mod edit -require="k8s.io/kubernetes@$KV")
}

version_ldflags() {  # -ldflags stamping the Kubernetes version (a kubelet reports it on its Node)
  local BD MIN p LD="-s -w"
  BD=$(date -u +%Y-%m-%dT%H:%M:%SZ); MIN=$(echo "$KV" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=$KV -X $p.gitMajor=1 -X $p.gitMinor=$MIN -X $p.gitTreeState=clean -X $p.buildDate=$BD"
  done
  echo "$LD"
}

build_k8s() {  # $1: package under k8s.io/kubernetes, $2: output name
  local W LD
  W=$(mktemp -d); trap 'rm -rf "$W"' RETURN
  k8s_module "$W"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/%s"\n' "$1" > "$W/tools.go"
  log "resolving modules for $2 $KV (downloads a few hundred MB the first time)"
  (cd "$W" && go mod tidy)
  LD=$(version_ldflags)
  log "compiling $2 $KV (about 5-7 min cold on 2 cores)"
  (cd "$W" && go build -trimpath -ldflags "$LD" -o "$OUT/$2.tmp" "k8s.io/kubernetes/$1")
  mv "$OUT/$2.tmp" "$OUT/$2"
  log "built $OUT/$2"
}

build_module_main() {  # $1 module@version, $2 package, $3 output name
  local W
  W=$(mktemp -d); trap 'rm -rf "$W"' RETURN
  printf 'module local.invalid/tool\n\ngo 1.26.0\n' > "$W/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$2" > "$W/tools.go"
  (cd "$W" && go mod edit -require="$1" && go mod tidy)
  log "compiling $3 ($1)"
  (cd "$W" && go build -trimpath -ldflags "-s -w" -o "$OUT/$3.tmp" "$2")
  mv "$OUT/$3.tmp" "$OUT/$3"
  log "built $OUT/$3"
}

build_k8s_main() {  # $1 source dir of a main package (its *.go), $2 output name: a main in the wrapper module;
  # $3 (hollow-node only): the kubelet's Pod resync period in seconds instead of hollownode's 10
  local W SRC=$1 RESYNC=${3:-} LINE='	c.SyncFrequency.Duration = 10 * time.Second'
  W=$(mktemp -d); trap 'rm -rf "$W"' RETURN
  k8s_module "$W"
  mkdir -p "$W/main" && cp "$SRC"/*.go "$W/main/"
  # an older release's API differences, as a patch beside the source (hollownode-v1.36.patch)
  local COMPAT="$SRC-${KV%.*}.patch"
  if [ -f "$COMPAT" ]; then
    log "$2: applying $(basename "$COMPAT") for $KV"
    patch --quiet -d "$W/main" -p1 < "$COMPAT"
  fi
  if [ -n "$RESYNC" ]; then
    [[ $RESYNC =~ ^[0-9]+$ ]] && [ "$(grep -cxF "$LINE" "$W/main/kubelet.go")" = 1 ] \
      || { log "$2: cannot set SyncFrequency to ${RESYNC}s in hollownode/kubelet.go"; exit 2; }
    sed -i "s/^\tc\.SyncFrequency\.Duration = 10 \* time\.Second\$/\tc.SyncFrequency.Duration = $RESYNC * time.Second/" "$W/main/kubelet.go"
    grep -qxF "	c.SyncFrequency.Duration = $RESYNC * time.Second" "$W/main/kubelet.go"
  fi
  log "resolving modules for $2 (k8s.io/kubernetes $KV)"
  (cd "$W" && go mod tidy)
  log "compiling $2 (a few minutes cold; seconds when kube-apiserver's packages are cached)"
  (cd "$W" && go build -trimpath -ldflags "$(version_ldflags)" -o "$OUT/$2.tmp" ./main)
  mv "$OUT/$2.tmp" "$OUT/$2"
  log "built $OUT/$2"
}

build_own_module() {  # $1 a directory holding its own go.mod and go.sum (versions pinned there), $2 output name
  log "compiling $2 (its go.mod's pinned modules, from the module cache or proxy)"
  (cd "$1" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$OUT/$2.tmp" .)
  mv "$OUT/$2.tmp" "$OUT/$2"
  log "built $OUT/$2"
}

build_module_dir() {  # $1 module@version, $2 package in it, $3 output name: built inside a
  # copy of the module's own directory, so its go.mod's replace directives apply (`go install
  # module@version` ignores them, and Traefik's build needs them)
  local W DIR
  W=$(mktemp -d); trap 'chmod -R u+w "$W"; rm -rf "$W"' RETURN
  log "downloading $1 source from the Go module proxy"
  DIR=$(cd "$W" && go mod download -json "$1" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$DIR" "$W/src" && chmod -R u+w "$W/src"
  log "compiling $3 ($1; about 5 min cold on 2 cores)"
  (cd "$W/src" && go build -trimpath -ldflags "-s -w" -o "$OUT/$3.tmp" "$2")
  mv "$OUT/$3.tmp" "$OUT/$3"
  log "built $OUT/$3"
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
have() { [ -x "$OUT/$1" ] && [[ " ${REBUILD:-} " != *" $1 "* ]]; }

for w in $WHAT; do
  case $w in
    kube-apiserver) have kube-apiserver || build_k8s cmd/kube-apiserver kube-apiserver ;;
    kube-controller-manager) have kube-controller-manager || build_k8s cmd/kube-controller-manager kube-controller-manager ;;
    kubemark) have kubemark || build_k8s cmd/kubemark kubemark ;;
    etcd) have etcd || build_module_main "go.etcd.io/etcd/server/v3@$EV" go.etcd.io/etcd/server/v3 etcd ;;
    kustomize) have kustomize || build_module_main "sigs.k8s.io/kustomize/kustomize/v5@$ZV" sigs.k8s.io/kustomize/kustomize/v5 kustomize ;;
    helm) have helm || build_module_main "helm.sh/helm/v4@$HV" helm.sh/helm/v4/cmd/helm helm ;;
    crane) have crane || build_module_main "github.com/google/go-containerregistry@$CV" github.com/google/go-containerregistry/cmd/crane crane ;;
    kubectl) have kubectl || build_k8s cmd/kubectl kubectl ;;
    peer-signer) have peer-signer || build_k8s_main "$HERE/../bench/peer" peer-signer ;;
    ceiling-signer) have ceiling-signer || build_k8s_main "$HERE/../bench/ceiling" ceiling-signer ;;
    bench-populate) have bench-populate || build_k8s_main "$HERE/../bench/populate" bench-populate ;;
    kcm-signer) have kcm-signer || build_own_module "$HERE/../bench/kcmsigner" kcm-signer ;;
    traefik) have traefik || build_module_dir "github.com/traefik/traefik/v3@${TRAEFIK_VERSION:?}" ./cmd/traefik traefik ;;
    hollow-node) have hollow-node || build_k8s_main "$HERE/hollownode" hollow-node ;;
    # the same hollow kubelet resyncing Pods every N s (a real kubelet's default: 60)
    hollow-node-resync-*) have "$w" || build_k8s_main "$HERE/hollownode" "$w" "${w#hollow-node-resync-}" ;;
    *) log "unknown target $w"; exit 2 ;;
  esac
done
