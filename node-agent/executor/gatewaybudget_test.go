package executor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
)

// TestBudgetedRunEndsWhenItCutsAnswers: a run under a namespace's spend
// budget alone (no maxTokensPerRun) whose agent closes each streamed
// answer once it has the text, before the provider's closing figures,
// and asks again. The budget is charged from the gateway's count, which
// then lacked every answer's output: the run went on, its usage a lower
// bound that read as whole. Now its second request gets 429 and the run
// ends with GatewayTokenLimit, naming the budget (verdict Fail, class
// Agent). Real bwrap, the
// executor's own gateway, a stand-in for Claude Code's CLI.
func TestBudgetedRunEndsWhenItCutsAnswers(t *testing.T) {
	root := rootRunRoot(t, "hf-budget-")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the stand-in agent uses curl")
	}
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"all the text\"}}\n\n"
	var served atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, start)
		w.(http.Flusher).Flush()
		// The closing figures would come later: the agent is gone before
		// them (sent once it had gone, they raced its leaving to the
		// gateway, which then counted that answer whole).
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer provider.Close()

	// Each answer read up to its text, then the connection closed (curl
	// notices its reader gone only at its next write: its time limit
	// closes it).
	script := fmt.Sprintf(`#!/bin/sh
[ "$1" = --version ] && { echo "2.0.0 (Claude Code)"; exit 0; }
for i in 1 2 3; do
  curl -sN -m 2 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H 'content-type: application/json' \
    -d '{"model":"m","stream":true,"max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}' \
    -w "status %%{http_code}\n" | head -c %d | grep -q 'all the text' && echo "answer $i cut"
  sleep 0.3
done
sleep 5
`, len(start))
	clis := standInCLI(t, "claude", script)
	const budget = "HarnessPolicy p spend.namespaceTokens"
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: sandboxInitBinary(t),
		Adapters: adapters.New(adapters.Config{CLIDir: clis}),
		GatewayLimits: func(context.Context, *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error) {
			return harnessv1.GatewayLimits{Budgets: []string{budget}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	out := e.Execute(context.Background(), &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "budget", Namespace: "tenant", UID: types.UID("uid-budget")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode, ProviderURL: provider.URL},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	})
	st := out.Status
	tail := ""
	if st.Agent != nil {
		tail = st.Agent.OutputTail
	}
	if !strings.Contains(tail, "answer 1 cut") {
		t.Fatalf("the stand-in did not get its first answer: %s %s %s\n%s", st.Phase, st.Reason, st.Message, tail)
	}
	// The run ran; the agent broke its policy: verdict Fail, class Agent.
	if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictFail || st.FailureClass != harnessv1.FailureAgent ||
		st.Reason != harnessv1.ReasonGatewayTokenLimit || !strings.Contains(st.Message, budget) {
		t.Errorf("phase %s, verdict %s, class %s, reason %s: %s; want verdict Fail, class Agent, %s, naming %s\n%s",
			st.Phase, st.Verdict, st.FailureClass, st.Reason, st.Message, harnessv1.ReasonGatewayTokenLimit, budget, tail)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the provider served %d requests, want 1: the one after a cut answer is refused\n%s", n, tail)
	}
}
