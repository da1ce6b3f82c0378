package agents

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// refusing answers every model request as its provider documents a key it
// does not take: Anthropic's 401 authentication_error, OpenAI's 401
// invalid_api_key, Gemini's 400 API_KEY_INVALID.
type refusing struct{ posts atomic.Int64 }

func (p *refusing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		provider.ServeHTTP(w, r)
		return
	}
	p.posts.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.Contains(r.URL.Path, "/messages"):
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CRefused"}`)
	case strings.Contains(r.URL.Path, "/models/"):
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",`+
			`"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`)
	default:
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: sk-proj-****9e4f. You can find your API key at the provider's console.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
	}
}

// TestCLIsWithARefusedKey: a provider that refuses the run's key fails the
// run as the key's failure, not the agent's: each real CLI gets the
// provider's refusal as it was sent and ends as it does, and the run ends
// Failed, verdict Error, class Infrastructure, reason
// ProviderRefusedCredential, naming the status and the provider's code and
// saying how the agent ended; a CLI that retries the refused key (Claude
// Code, ten tries over about three minutes) is stopped at the third
// refusal rather than left to its episode's end. (It was judged the
// agent's failure before: Fail, AgentFailed, or a timeout.)
func TestCLIsWithARefusedKey(t *testing.T) {
	for _, c := range providerCLIs {
		t.Run(string(c.adapter), func(t *testing.T) {
			p := &refusing{}
			key := c.keyHead + "refused-" + string(c.adapter) + "-7d2a9e4f"
			transport := harnessv1.MCPTransportHTTP
			if c.fixture != "hello" {
				transport = ""
			}
			o := Run(t, Case{Name: "refused-" + string(c.adapter), Adapter: c.adapter, Fixture: c.fixture,
				Transport: transport, Creds: []Cred{{Env: c.env, Value: key}}, ProviderURL: serveProvider(t, p) + "/s/" + c.fixture})
			st := o.Run.Status
			code := "invalid_api_key"
			switch c.adapter {
			case harnessv1.AdapterClaudeCode:
				code = "authentication_error"
			case harnessv1.AdapterGemini:
				code = "API_KEY_INVALID"
			}
			if p.posts.Load() == 0 {
				t.Fatal("the CLI sent no model request")
			}
			if st.Phase != harnessv1.RunFailed || st.Verdict != harnessv1.VerdictError || st.FailureClass != harnessv1.FailureInfrastructure ||
				st.Reason != harnessv1.ReasonProviderRefusedCredential || !strings.Contains(st.Message, "("+code+")") ||
				!strings.Contains(st.Message, "; then ") && !strings.Contains(st.Message, "process tree was killed") {
				t.Errorf("phase %s, verdict %s, class %s, reason %s: %s\nwant Failed, Error, Infrastructure, %s naming %s and how the agent ended\noutput: %s",
					st.Phase, st.Verdict, st.FailureClass, st.Reason, st.Message, harnessv1.ReasonProviderRefusedCredential, code, st.Agent.OutputTail)
			}
			if st.Agent.TimedOut {
				t.Errorf("the run waited out its episode on a refused key: %s", st.Message)
			}
			RequireClean(t, o, key)
		})
	}
}
