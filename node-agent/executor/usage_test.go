package executor

import (
	"context"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// TestUsageModelsAreRedacted: a model's name read from the CLI's output is
// the JSON decoded, so a credential written escaped there passed the
// output's redaction; it is redacted again before status.usage.
func TestUsageModelsAreRedacted(t *testing.T) {
	const secret = "hfsecret-9f8e7d6c5b4a39281706"
	r, err := redact.New(redact.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	escaped := strings.Replace(secret, "s", `\u0073`, 1)
	log := `{"type":"assistant","message":{"id":"m1","model":"` + escaped + `","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n" +
		`{"type":"result","usage":{"input_tokens":3,"output_tokens":1}}` + "\n"
	if out := r.String(log); !strings.Contains(out, escaped) {
		t.Fatalf("the escaped credential was redacted in the output itself (%q): the test shows nothing", out)
	}
	a := &attempt{
		e:        &Executor{},
		run:      &harnessv1.HarnessRun{Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode}}},
		adapter:  adapters.ClaudeCode{},
		redactor: r,
	}
	st := a.usageStatus(context.Background(), []byte(log))
	if st.Source != harnessv1.UsageFromAgentOutput || len(st.Models) != 1 {
		t.Fatalf("usage %+v", st)
	}
	if strings.Contains(st.Models[0], secret) {
		t.Errorf("status.usage.models holds the credential: %q", st.Models[0])
	}
}

// TestUsageModelsCutAreRedacted: status.usage.models keeps 256 bytes of a
// name; a credential that the cut went through is no longer whole for the
// redactor, so what is left of it (all of it but its last byte, with the
// padding chosen) is cut off too, from the CLI's names as from the
// provider's.
func TestUsageModelsCutAreRedacted(t *testing.T) {
	const secret = "hfsecret-9f8e7d6c5b4a39281706"
	r, err := redact.New(redact.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	escaped := strings.Replace(secret, "s", `\u0073`, 1)
	pad := strings.Repeat("m", 256-len(secret)+1)
	log := `{"type":"assistant","message":{"id":"m1","model":"` + pad + escaped + `","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n" +
		`{"type":"assistant","message":{"id":"m2","model":"x` + pad + escaped + `","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n" +
		`{"type":"result","usage":{"input_tokens":3,"output_tokens":1}}` + "\n"
	a := &attempt{
		e:        &Executor{},
		run:      &harnessv1.HarnessRun{Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode}}},
		adapter:  adapters.ClaudeCode{},
		redactor: r,
	}
	st := a.usageStatus(context.Background(), []byte(log))
	if st.Source != harnessv1.UsageFromAgentOutput || len(st.Models) != 2 {
		t.Fatalf("usage %+v", st)
	}
	for _, m := range st.Models {
		if strings.Contains(m, secret[:8]) {
			t.Errorf("status.usage.models holds what the cut left of the credential: %q", m[len(m)-len(secret):])
		}
	}
}
