package executor

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestAgentSeesTheRunsSocketsOnlyForAStdioServer: the run's unix sockets
// (its MCP server's, its egress proxy's) and sandbox-init are in the
// agent's sandbox only when something there connects to them, the stdio
// MCP server; with MCP over HTTP or none the runner relays the bridges from
// outside and the agent reaches the node-agent through its loopback ports
// alone, which it still does (the HTTP server answers its token). Real bwrap.
func TestAgentSeesTheRunsSocketsOnlyForAStdioServer(t *testing.T) {
	root := rootRunRoot(t, "hf-socks-")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the agent asks its MCP server with curl")
	}
	initBin := sandboxInitBinary(t)
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: initBin})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	probe := `ls -A "$HARNESSFACTS_RUN/sockets" >/dev/null 2>&1 && echo sockets=seen || echo sockets=absent
[ -e "` + initBin + `" ] && echo init=seen || echo init=absent
[ -n "${HARNESSFACTS_MCP_URL:-}" ] && curl -s -m 5 -X POST "$HARNESSFACTS_MCP_URL" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}' | grep -q '"result"' && echo mcp=answered
true`
	for transport, want := range map[harnessv1.MCPTransport][]string{
		harnessv1.MCPTransportNone:  {"sockets=absent", "init=absent"},
		harnessv1.MCPTransportHTTP:  {"sockets=absent", "init=absent", "mcp=answered"},
		harnessv1.MCPTransportStdio: {"sockets=seen", "init=seen"},
	} {
		t.Run(string(transport), func(t *testing.T) {
			run := &harnessv1.HarnessRun{
				ObjectMeta: metav1.ObjectMeta{Name: "socks-" + strings.ToLower(string(transport)), Namespace: "tenant", UID: types.UID("uid-socks-" + string(transport))},
				Spec: harnessv1.HarnessRunSpec{
					Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", probe}},
					Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
						"fixture.yaml": "prompt: nothing\nmcp:\n  transport: " + string(transport) + "\n"}}},
				},
				Status: harnessv1.HarnessRunStatus{Attempt: 1},
			}
			st := e.Execute(context.Background(), run).Status
			if st.Agent == nil {
				t.Fatalf("%s %s: %s", st.Phase, st.Reason, st.Message)
			}
			for _, w := range want {
				if !strings.Contains(st.Agent.OutputTail, w) {
					t.Errorf("want %s in the agent's output:\n%s", w, st.Agent.OutputTail)
				}
			}
		})
	}
}
