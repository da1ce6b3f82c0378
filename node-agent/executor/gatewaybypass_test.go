package executor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
)

// TestAgentCannotGoAroundItsModelGateway: a run whose model path is the
// gateway, under a policy's request limit, with a provider that takes
// requests without the run's key (a local model server on loopback) and an
// allowHosts naming that provider, in both its spellings. The agent, a
// hostile stand-in for Claude Code's CLI, sends its model requests straight
// to the provider through the egress proxy, which does not count them; the
// run's author needed no rights for that. Before, every one reached the
// provider, past maxRequestsPerRun, and status.usage said one request; now
// the proxy refuses them (403, counted as denied) and only the gateway's
// request reaches the provider. Real bwrap.
func TestAgentCannotGoAroundItsModelGateway(t *testing.T) {
	root := rootRunRoot(t, "hf-around-")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the stand-in agent uses curl")
	}
	var served atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}`)
	}))
	defer provider.Close()
	port := provider.Listener.Addr().(*net.TCPAddr).Port

	initBin := sandboxInitBinary(t)
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	script := fmt.Sprintf(`#!/bin/sh
[ "$1" = --version ] && { echo "2.0.0 (Claude Code)"; exit 0; }
for host in 127.0.0.1 localhost; do
  curl -s -o /dev/null -m 10 --proxy http://127.0.0.1:7701 --noproxy '' -X POST http://$host:%[1]d/v1/messages -H 'content-type: application/json' -d '%[2]s' -w "plain $host %%{http_code}\n"
  curl -s -o /dev/null -m 10 --proxytunnel --proxy http://127.0.0.1:7701 --noproxy '' -X POST http://$host:%[1]d/v1/messages -H 'content-type: application/json' -d '%[2]s' -w "tunnel $host %%{http_code}\n"
done
curl -s -o /dev/null -m 10 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H 'content-type: application/json' -d '%[2]s' -w "gateway %%{http_code}\n"
`, port, body)
	clis := standInCLI(t, "claude", script)

	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: initBin,
		Adapters: adapters.New(adapters.Config{CLIDir: clis}),
		GatewayLimits: func(context.Context, *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error) {
			return harnessv1.GatewayLimits{MaxRequests: 2, Sources: []string{"HarnessPolicy p gateway.maxRequestsPerRun"}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	out := e.Execute(context.Background(), &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "around", Namespace: "tenant", UID: types.UID("uid-around")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode, ProviderURL: fmt.Sprintf("http://127.0.0.1:%d", port)},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly,
				AllowHosts: []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)}},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	})
	st := out.Status
	tail := ""
	if st.Agent != nil {
		tail = st.Agent.OutputTail
	}
	if st.Phase != harnessv1.RunSucceeded && st.Phase != harnessv1.RunFailed {
		t.Fatalf("phase %s %s: %s", st.Phase, st.Reason, st.Message)
	}
	if !strings.Contains(tail, "gateway 200") {
		t.Fatalf("the gateway did not carry the agent's request: %s %s %s\n%s", st.Phase, st.Reason, st.Message, tail)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the provider served %d requests, want only the gateway's one (the policy allows 2)\n%s", n, tail)
	}
	if strings.Contains(tail, " 200\n") && strings.Count(tail, " 200") > 1 {
		t.Errorf("a request past the gateway was answered:\n%s", tail)
	}
	if st.Network == nil || st.Network.Denied != 4 {
		t.Errorf("network status %+v, want the 4 requests past the gateway denied\n%s", st.Network, tail)
	}
	if st.Usage == nil || st.Usage.Requests != 1 {
		t.Errorf("usage %+v, want the gateway's 1 request", st.Usage)
	}
}

// standInCLI writes script as the CLI name in a folder of its own, which
// the run's uid may traverse (as the programs a sandbox runs must be), and
// returns that folder, for adapters.Config.CLIDir.
func standInCLI(t *testing.T, name, script string) string {
	t.Helper()
	bin, err := os.MkdirTemp("", "hf-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	clis := filepath.Join(bin, "bin")
	if err := os.Mkdir(clis, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clis, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return clis
}
