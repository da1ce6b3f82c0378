package agents

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// rateLimited answers its first model request with a rate limit as the
// providers document it (429, retry-after in seconds, the provider's own
// error body), and every later one as the fake provider does.
type rateLimited struct {
	retryAfter string
	mu         sync.Mutex
	limitedAt  time.Time // when the 429 was sent
	nextAt     time.Time // when the next model request came
}

func (p *rateLimited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		p.mu.Lock()
		first := p.limitedAt.IsZero()
		if first {
			p.limitedAt = time.Now()
		} else if p.nextAt.IsZero() {
			p.nextAt = time.Now()
		}
		p.mu.Unlock()
		if first {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", p.retryAfter)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50 requests per minute."}}`)
			return
		}
	}
	provider.ServeHTTP(w, r)
}

// TestClaudeWaitsOutARateLimit: a provider's rate limit asks for a longer
// wait than the model gateway keeps (8 s); the gateway hands the 429 to
// Claude Code at once, Retry-After and all, and the run goes on: the CLI
// waits as asked, tries again and passes, and status says a request
// failed so. (The gateway used to retry before the provider's time was up
// and then end the run as ProviderUnavailable.)
func TestClaudeWaitsOutARateLimit(t *testing.T) {
	const key = "sk-ant-api03-planted-ratelimit-8c1d"
	p := &rateLimited{retryAfter: "10"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	o := Run(t, Case{Name: "claude-rate-limited", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}},
		ProviderURL: "http://" + ln.Addr().String() + "/s/hello"})
	requireClaudeHello(t, o, harnessv1.MCPTransportHTTP)
	p.mu.Lock()
	waited := p.nextAt.Sub(p.limitedAt)
	p.mu.Unlock()
	if p.nextAt.IsZero() || waited < 9*time.Second {
		t.Errorf("the next model request came %s after the 429 with Retry-After 10 s", waited)
	}
	noted := false
	for _, n := range o.Run.Status.Agent.Notes {
		noted = noted || strings.Contains(n, "the provider failed 1 of the agent's model requests")
	}
	if !noted {
		t.Errorf("status.agent.notes %q do not say the provider failed a request", o.Run.Status.Agent.Notes)
	}
	RequireUsage(t, o, key)
}
