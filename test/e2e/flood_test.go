package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// floodBound is what the node-agent's resident memory may grow by while
// agents flood every channel into it: the chart's nodeAgent.goMemLimit.
const floodBound = 256 << 20

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
)

// Agents flooding every channel into the node-agent from inside real
// sandboxes do not grow its memory past its bound, and another run on the
// same node still passes.
func TestFloodingTheNodeAgentLeavesItsMemoryBounded(t *testing.T) {
	ns := newNamespace(t, "e2e-flood")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	addr := sink(t)
	provider := "http://" + addr + "/v1"

	var peak atomic.Int64
	base := rssBytes()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rssBytes(); r > peak.Load() {
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
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, ProviderURL: provider,
					Command: []string{"bash", "-c", "PROVIDER=" + provider + "\n" + script}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: flood\n"}}},
				MCP:     &harnessv1.MCPSpec{Transport: transport},
				Limits:  harnessv1.Limits{EpisodeSeconds: 150, ProbeSeconds: 30},
				// The node-agent whose memory is measured is this process's.
				NodeSelector: onMainNode,
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
	} {
		fr := flood(f.name, f.script, f.transport)
		hello := helloRun(ns, harnessv1.MCPTransportHTTP)
		hello.Name = "hello-beside-" + f.name
		hello.Spec.NodeSelector = onMainNode
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
	}
	close(stop)
	<-sampled
	if grew := peak.Load() - base; grew > floodBound {
		t.Errorf("the node-agent's RSS grew by %d MiB (from %d to %d MiB) under the flood, over its %d MiB bound",
			grew>>20, base>>20, peak.Load()>>20, floodBound>>20)
	} else {
		t.Logf("RSS %d MiB before, peak %d MiB during the floods (+%d MiB, bound %d MiB)", base>>20, peak.Load()>>20, grew>>20, floodBound>>20)
	}
	waitNoRunDirs(t)
}
