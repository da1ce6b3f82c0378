#!/usr/bin/env bash
# `make demo`: a real HarnessRun end to end on this machine, with no cluster
# and no credentials. It starts `harnessfacts dev` (a local kube-apiserver and
# etcd, the controller and a node-agent for this machine), applies the hello
# fixture (a ConfigMap made by kustomize) and its run with kubectl, waits for
# the verdict, shows the runs, the nodes and the evidence, verifies the
# evidence, and stops everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

assets=$(hack/control-plane.sh)
hack/install-deps.sh
go build -o bin/harnessfacts ./cmd/harnessfacts

work=$(mktemp -d /tmp/harnessfacts-demo-XXXXXX)
chmod 755 "$work" # the sandboxed agent's user must pass through to its run dir
kubeconfig="$work/kubeconfig"
bin/harnessfacts dev --assets "$assets" --kubeconfig "$kubeconfig" --run-root "$work/runs" >"$work/dev.log" 2>&1 &
dev=$!
cleanup() {
  kill -TERM "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "demo: $*" >&2
  echo "--- harnessfacts dev log (last 40 lines) ---" >&2
  tail -n 40 "$work/dev.log" >&2
  exit 1
}
k() { "$assets/kubectl" --kubeconfig "$kubeconfig" "$@"; }
show() { printf '\n$ kubectl %s\n' "$*"; k "$@"; }

echo "==> starting harnessfacts dev (local control plane, controller, node-agent)"
for _ in $(seq 1 120); do
  kill -0 "$dev" 2>/dev/null || fail "harnessfacts dev exited"
  if [ -f "$kubeconfig" ] && [ -n "$(k get harnessnodes -o name 2>/dev/null)" ]; then break; fi
  sleep 0.5
done
[ -n "$(k get harnessnodes -o name 2>/dev/null)" ] || fail "no HarnessNode registered in 60 s"

show apply -k fixtures/hello
show apply -f fixtures/hello/run.yaml

phase=""
for _ in $(seq 1 240); do
  phase=$(k get harnessrun hello -o jsonpath='{.status.phase}')
  case "$phase" in Succeeded|Failed) break ;; esac
  sleep 0.5
done
case "$phase" in Succeeded|Failed) ;; *) fail "the run did not finish in 120 s (phase ${phase:-none})" ;; esac

show get harnessruns,harnessnodes
printf '\n$ kubectl get harnessrun hello -o jsonpath=...\n'
k get harnessrun hello -o jsonpath='verdict:       {.status.verdict}{"\n"}message:       {.status.message}{"\n"}sandbox:       {.status.sandbox.mode}{"\n"}MCP:           {.status.mcp.transport}, {.status.mcp.calls} call(s), token seen: {.status.mcp.tokenSeen}{"\n"}checks:        {range .status.checks[*]}{.name}={.passed} {end}{"\n"}artifacts:     {range .status.artifacts[*]}{.path} sha256:{.sha256} {end}{"\n"}evidence:      ConfigMap {.status.evidence.configMapName}, receipt {.status.evidence.digest}{"\n"}fixture:       {.status.evidence.fixtureDigest}{"\n"}'
printf '\n$ harnessfacts evidence verify hello\n'
bin/harnessfacts evidence verify --kubeconfig "$kubeconfig" -n default hello

verdict=$(k get harnessrun hello -o jsonpath='{.status.verdict}')
[ "$verdict" = Pass ] || fail "the hello run's verdict is ${verdict:-none}, not Pass"
printf '\n==> the hello run passed; stopping everything\n'
