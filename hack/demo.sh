#!/usr/bin/env bash
# `make demo`: a real HarnessRun end to end on this machine, with no cluster
# and no credentials. It starts `harnessfacts dev` (a local kube-apiserver and
# etcd, the controller and a node-agent for this machine), applies the hello
# fixture (a ConfigMap made by kustomize) and its run with kubectl, follows the
# agent's output live (harnessfacts logs -f), waits for the verdict
# (harnessfacts wait, the Finished condition), shows the runs, the nodes and the evidence, verifies the
# evidence; then, when an agent CLI is installed, runs the same fixture with
# the real CLI against `harnessfacts fake-provider`; and stops everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

assets=$(hack/control-plane.sh)
hack/install-deps.sh
CGO_ENABLED=0 go build -o bin/ ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent ./cmd/harnessfacts-sandbox-init # as make build

work=$(mktemp -d /tmp/harnessfacts-demo-XXXXXX)
chmod 755 "$work" # the sandboxed agent's user must pass through to its run dir
kubeconfig="$work/kubeconfig"
bin/harnessfacts dev --assets "$assets" --kubeconfig "$kubeconfig" --run-root "$work/runs" --evidence-key "$work/keys/evidence-key.pem" >"$work/dev.log" 2>&1 &
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

hf() { bin/harnessfacts "$@" --kubeconfig "$kubeconfig" -n default; }
# The agent's output as it runs: from the node-agent's live-output server,
# which asks the API server who the caller is and whether it may get
# harnessruns/log (once the run has ended, the stored output.log).
printf '\n$ harnessfacts logs hello -f\n'
hf logs hello -f --timeout=2m || fail "harnessfacts logs -f failed"
printf '\n$ harnessfacts wait hello --for=condition=Finished --timeout=2m\n'
hf wait hello --for=condition=Finished --timeout=2m || fail "the run did not finish in 2 minutes"

show get harnessruns,harnessnodes
printf '\n$ harnessfacts get -o wide\n'
hf get -o wide
printf '\n$ kubectl get harnessrun hello -o jsonpath=...\n'
k get harnessrun hello -o jsonpath='verdict:       {.status.verdict}{"\n"}message:       {.status.message}{"\n"}sandbox:       {.status.sandbox.mode}{"\n"}MCP:           {.status.mcp.transport}, {.status.mcp.calls} call(s), token seen: {.status.mcp.tokenSeen}{"\n"}checks:        {range .status.checks[*]}{.name}={.passed} {end}{"\n"}artifacts:     {range .status.artifacts[*]}{.path} sha256:{.sha256} {end}{"\n"}evidence:      ConfigMap {.status.evidence.configMapName}, receipt {.status.evidence.digest}{"\n"}fixture:       {.status.evidence.fixtureDigest}{"\n"}'
# The receipt is signed by the node's key, whose public part the HarnessNode
# publishes; a third party would check it against a trusted-keys file.
k get harnessnodes -o jsonpath='{.items[0].status.evidenceKey.publicKey}' >"$work/node-key.pem"
printf '\n$ harnessfacts evidence verify hello --key node-key.pem\n'
hf evidence verify hello --key "$work/node-key.pem" || fail "the hello run's evidence does not verify"

verdict=$(k get harnessrun hello -o jsonpath='{.status.verdict}')
[ "$verdict" = Pass ] || fail "the hello run's verdict is ${verdict:-none}, not Pass"
printf '\n==> the hello run passed\n'

# The same fixture with a real agent CLI, when this machine has one
# (`make agent-clis`): the CLI runs in the sandbox against
# `harnessfacts fake-provider`, a scripted model on this machine's loopback,
# so no credential is needed and nothing leaves the machine.
adapters=" $(k get harnessnodes -o jsonpath='{.items[0].status.adapters[*].name}') "
cli=""
for a in claude-code gemini codex opencode; do
  case "$adapters" in *" $a "*) cli=$a; break ;; esac
done
if [ -z "$cli" ]; then
  printf '\n==> no agent CLI is installed on this machine (make agent-clis installs them): the exec run above is the demo\n'
  exit 0
fi
bin/harnessfacts fake-provider --fixtures fixtures --listen 127.0.0.1:0 >"$work/provider.out" 2>"$work/provider.log" &
provider=$!
trap 'kill -TERM "$provider" 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 40); do
  url=$(sed -n 's/^fake-provider listening on //p' "$work/provider.out")
  [ -n "$url" ] && break
  sleep 0.25
done
[ -n "$url" ] || fail "harnessfacts fake-provider did not start: $(cat "$work/provider.log")"
printf '\n==> %s against harnessfacts fake-provider at %s/s/hello\n' "$cli" "$url"
run="hello-$cli"
cat >"$work/run-cli.yaml" <<YAML
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata:
  name: $run
  namespace: default
spec:
  agent:
    adapter: $cli
    providerURL: $url/s/hello
  fixture:
    configMapRef:
      name: fixture-hello
YAML
printf '\n$ kubectl apply -f - <<EOF\n%s\nEOF\n' "$(cat "$work/run-cli.yaml")"
k apply -f "$work/run-cli.yaml"
printf '\n$ harnessfacts logs %s -f\n' "$run"
hf logs "$run" -f --timeout=3m || fail "harnessfacts logs -f $run failed"
printf '\n$ harnessfacts wait %s --timeout=3m\n' "$run"
hf wait "$run" --timeout=3m || fail "the $run run did not finish in 3 minutes"
show get harnessruns
printf '\n$ kubectl get harnessrun %s -o jsonpath=...\n' "$run"
k get harnessrun "$run" -o jsonpath='verdict:       {.status.verdict}{"\n"}message:       {.status.message}{"\n"}agent:         {.status.agent.adapter} {.status.agent.cliVersion}, {.status.agent.turns} turn(s), {.status.agent.toolCalls} tool call(s){"\n"}MCP:           {.status.mcp.transport}, {.status.mcp.calls} call(s), token seen: {.status.mcp.tokenSeen}{"\n"}network:       egress {.status.network.egress}{"\n"}evidence:      {.status.evidence.digest}{"\n"}'
printf '\n$ harnessfacts evidence verify %s --key node-key.pem\n' "$run"
hf evidence verify "$run" --key "$work/node-key.pem" || fail "the $run run's evidence does not verify"
verdict=$(k get harnessrun "$run" -o jsonpath='{.status.verdict}')
[ "$verdict" = Pass ] || fail "the $run run's verdict is ${verdict:-none}, not Pass (provider log: $(tail -n 20 "$work/provider.log"))"
printf '\n==> %s passed against the scripted provider; stopping everything\n' "$cli"
