//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// sink is a provider stand-in on the node's loopback that reads and drops
// whatever body it is sent, and answers 200.
func sink(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// floods are bash, run by agents inside real sandboxes, that push as much
// as they can into one channel to the node-agent at once: many
// connections, messages far over any bound, and gigabytes in all.
const (
	// Stdio MCP: 40 mcp-stdio pipes at once, each sending 256 MiB without a
	// newline, then a well-formed but 8 MiB message.
	floodStdio = `set +e
set -- $(printf '%s' "$HARNESSFACTS_MCP_COMMAND" | tr -d '[]"' | tr ',' ' ')
for i in $(seq 40); do
  ( head -c 268435456 /dev/zero | tr '\0' 'a' | "$@" >/dev/null 2>&1 ) &
  ( { printf '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"p":"'; head -c 8388608 /dev/zero | tr '\0' 'b'; printf '"}}\n'; } | "$@" >/dev/null 2>&1 ) &
done
wait; echo flooded stdio`
	// HTTP MCP: 40 curl clients streaming 64 MiB bodies, with a length and
	// chunked (curl -T streams; --data-binary would hold each body in the
	// agent's own memory).
	floodHTTP = `set +e
head -c 67108864 /dev/zero > "$TMPDIR/big"
for i in $(seq 40); do
  ( curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -T "$TMPDIR/big" "$HARNESSFACTS_MCP_URL" ) &
  ( head -c 67108864 /dev/zero | curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -T - "$HARNESSFACTS_MCP_URL" ) &
done
wait; echo flooded http`
	// The provider relay and the egress proxy: 100 connections each (more
	// than the relay serves at once) streaming 8 MiB to the provider on
	// the node's loopback, directly (the relay) and through CONNECT (the
	// proxy).
	floodProvider = `set +e
for i in $(seq 100); do
  ( head -c 8388608 /dev/zero | curl -s -o /dev/null --noproxy '*' -X POST -T - "$PROVIDER" ) &
  ( head -c 8388608 /dev/zero | curl -s -o /dev/null -p -x "$HTTPS_PROXY" -X POST -T - "$PROVIDER" ) &
done
wait; echo flooded provider`
	// The model gateway: a hostile agent in the place of Claude Code's CLI
	// sends 64 requests at once (as many as the gateway's socket serves)
	// with 16 MiB bodies, the most the gateway holds to retry, each a JSON
	// object the gateway reads for the provider's network tools, and 8
	// with 64 MiB bodies, over it, to the model API path at the gateway's
	// URL.
	floodGateway = `set +e
for i in $(seq 64); do
  ( { printf '{"model":"m","max_tokens":1,"messages":[],"pad":"'; head -c 16777000 /dev/zero | tr '\0' 'a'; printf '"}'; } | curl -s -o /dev/null --noproxy '*' -X POST -H 'Content-Type: application/json' -T - "$ANTHROPIC_BASE_URL/v1/messages" ) &
done
for i in $(seq 8); do
  ( head -c 67108864 /dev/zero | curl -s -o /dev/null --noproxy '*' -X POST -H 'Content-Type: application/json' -T - "$ANTHROPIC_BASE_URL/v1/messages" ) &
done
wait; echo flooded gateway`
)

// hostileCLI makes a folder of agent CLIs (--agent-clis) holding one
// command, name, that answers --version with version as the real CLI does
// and otherwise runs script: the agent under test is the attacker, and
// some channels (the model gateway, a CLI's login file) serve only the
// adapters of real CLIs, not exec. The folder is readable by the runs'
// uids, as an install is.
func hostileCLI(t *testing.T, name, version, script string) string {
	t.Helper()
	bin := filepath.Join(openDir(t), "clis", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cli := "#!/bin/bash\nif [ \"$1\" = --version ]; then echo '" + version + "'; exit 0; fi\n" + script + "\n"
	if err := os.WriteFile(filepath.Join(bin, name), []byte(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Agents flooding every channel into the node-agent from inside real
// sandboxes do not take it past its hard memory bound, and another run on
// the same node still passes. The node-agent is a real process started as
// the chart's DaemonSet starts it: in a cgroup of its own (its container's),
// with the chart's nodeAgent.memoryLimit (--memory-limit) and goMemLimit
// (GOMEMLIMIT). It moves into <its cgroup>/agent with that hard limit and
// makes the runs' cgroups beside it; a run that uses more memory than the
// node-agent's whole bound passes too, which it could not if its cgroup
// were below the node-agent's.
func TestFloodingTheNodeAgentLeavesItsMemoryBounded(t *testing.T) {
	ns := newNamespace(t, "e2e-flood")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	addr := sink(t)
	provider := "http://" + addr + "/v1"
	na := startBoundedNodeAgent(t, "flood-node", map[string]string{"harnessfacts.io/e2e": "flood"}, "--agent-clis", hostileCLI(t, "claude", "2.1.197 (Claude Code)", floodGateway))
	onFloodNode := map[string]string{"harnessfacts.io/e2e": "flood"}

	// The node-agent is in its leaf, with the chart's limit.
	self, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", na.pid))
	if !strings.Contains(string(self), na.base+"/"+sandbox.AgentLeaf+"\n") {
		t.Fatalf("the node-agent is not in %s/%s:\n%s", na.base, sandbox.AgentLeaf, self)
	}
	if got := na.leafLimit(t); got != na.limit {
		t.Fatalf("the node-agent's leaf has memory limit %d, want the chart's nodeAgent.memoryLimit %d", got, na.limit)
	}

	var peak atomic.Int64
	base := na.rss()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := na.rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	flood := func(name, script string, transport harnessv1.MCPTransport) *harnessv1.HarnessRun {
		agent := harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, ProviderURL: provider,
			Command: []string{"bash", "-c", "PROVIDER=" + provider + "\n" + script}}
		if script == "" {
			// The hostile claude: its requests go through the run's model
			// gateway to the provider.
			agent = harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode, ProviderURL: provider}
		}
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent:        agent,
				Fixture:      harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: flood\n"}}},
				MCP:          &harnessv1.MCPSpec{Transport: transport},
				Limits:       harnessv1.Limits{EpisodeSeconds: 150, ProbeSeconds: 30},
				NodeSelector: onFloodNode,
			},
		}
		if err := k8s.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Two slots: one flooding run and one honest run at a time.
	for _, f := range []struct {
		name, script string
		transport    harnessv1.MCPTransport
	}{
		{"flood-stdio", floodStdio, harnessv1.MCPTransportStdio},
		{"flood-http", floodHTTP, harnessv1.MCPTransportHTTP},
		{"flood-provider", floodProvider, harnessv1.MCPTransportNone},
		{"flood-gateway", "", harnessv1.MCPTransportNone},
	} {
		fr := flood(f.name, f.script, f.transport)
		hello := helloRun(ns, harnessv1.MCPTransportHTTP)
		hello.Name = "hello-beside-" + f.name
		hello.Spec.NodeSelector = onFloodNode
		if err := k8s.Create(context.Background(), hello); err != nil {
			t.Fatal(err)
		}
		got := waitTerminal(t, client.ObjectKeyFromObject(hello))
		if got.Status.Verdict != harnessv1.VerdictPass {
			t.Errorf("a run beside %s did not pass: %s %s: %s", f.name, got.Status.Verdict, got.Status.Reason, got.Status.Message)
		}
		fg := waitTerminal(t, client.ObjectKeyFromObject(fr))
		if fg.Status.Agent == nil || !strings.Contains(fg.Status.Agent.OutputTail, "flooded") {
			t.Errorf("%s did not flood to its end: %s %s; %+v", f.name, fg.Status.Reason, fg.Status.Message, fg.Status.Agent)
		}
		if f.script == "" && (fg.Status.Usage == nil || fg.Status.Usage.Source != harnessv1.UsageFromGateway || fg.Status.Usage.Requests == 0) {
			t.Errorf("%s did not go through the model gateway: usage %+v", f.name, fg.Status.Usage)
		}
	}
	close(stop)
	<-sampled

	// A run holding more memory than the node-agent's whole bound (its
	// limit is 1.5 times that): its cgroup is beside the node-agent's leaf,
	// so neither is charged for the other.
	hold := na.limit + na.limit/8
	const marker = "harnessfacts-e2e-flood-hold"
	big := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-more-than-the-node-agent", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				Command: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tail -c %d | (sleep 4; cat >/dev/null); echo held; : %s", hold, hold, marker)}},
			Fixture:      harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: hold\n"}}},
			Limits:       harnessv1.Limits{Memory: resource.NewQuantity(na.limit*3/2, resource.BinarySI), EpisodeSeconds: 120},
			NodeSelector: onFloodNode,
		},
	}
	if err := k8s.Create(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	runPeak, runCgroup := int64(0), ""
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, pid := range processesWith(marker) {
			// Only cgroups under the node-agent's own: a process that
			// exits between the two reads shows the root cgroup.
			if cg, peakNow := cgroupMemoryPeak(pid); strings.HasPrefix(cg, na.base+"/") && peakNow > runPeak {
				runPeak, runCgroup = peakNow, cg
			}
		}
		got := &harnessv1.HarnessRun{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(big), got); err == nil && got.Status.Phase.Terminal() {
			break
		}
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(big))
	if got.Status.Verdict != harnessv1.VerdictPass || got.Status.Agent == nil || got.Status.Agent.OOMKilled {
		t.Errorf("a run holding %d MiB beside the node-agent (bound %d MiB): %s %s: %s; %+v", hold>>20, na.limit>>20, got.Status.Verdict, got.Status.Reason, got.Status.Message, got.Status.Agent)
	}
	if !strings.HasPrefix(runCgroup, na.base+"/harnessfacts/run-") || runPeak < hold {
		t.Errorf("the holding run's cgroup %q peaked at %d MiB; want it in %s/harnessfacts, beside the node-agent, above %d MiB", runCgroup, runPeak>>20, na.base, hold>>20)
	}

	if err := na.alive(); err != nil {
		t.Fatal(err)
	}
	if n := na.leafOOMKills(); n != 0 {
		t.Errorf("the node-agent's leaf saw %d OOM kills", n)
	}
	if peak.Load() >= na.limit {
		t.Errorf("the node-agent's RSS reached %d MiB (from %d MiB) under the flood, at or over its hard bound of %d MiB",
			peak.Load()>>20, base>>20, na.limit>>20)
	}
	if grew := peak.Load() - base; grew > na.goMemLimit {
		t.Errorf("the node-agent's RSS grew by %d MiB under the flood, more than its GOMEMLIMIT of %d MiB", grew>>20, na.goMemLimit>>20)
	}
	t.Logf("node-agent RSS %d MiB before, peak %d MiB during the floods; leaf peak %d MiB; hard bound %d MiB, GOMEMLIMIT %d MiB; a run beside it peaked at %d MiB",
		base>>20, peak.Load()>>20, na.leafPeak()>>20, na.limit>>20, na.goMemLimit>>20, runPeak>>20)
	na.waitNoRunDirs(t)
}
