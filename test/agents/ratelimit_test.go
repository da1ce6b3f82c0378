package agents

import (
	"io"
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

// TestCLIsWaitOutARateLimit: a provider's rate limit asks for a longer wait
// than the model gateway keeps (8 s); the gateway hands the 429 to the CLI at
// once, Retry-After and all, and the run goes on: Claude Code, Codex, Gemini
// CLI and OpenCode (hello) and Aider (edit) each try again and pass, and
// status says a request failed so. Claude Code, Codex and OpenCode wait as
// asked; Gemini CLI retries on its own backoff, sooner (about 5 s here);
// Aider's wait is not held to. (The gateway used to retry
// before the provider's time was up and then end the run as
// ProviderUnavailable.)
func TestCLIsWaitOutARateLimit(t *testing.T) {
	for _, c := range providerCLIs {
		// One after another: the hello checks read the provider's log of
		// the run's time, which another CLI's run would mix into.
		t.Run(string(c.adapter), func(t *testing.T) {
			p := &rateLimited{retryAfter: "10"}
			o, key := runAgainst(t, c, "ratelimit", serveProvider(t, p))
			p.mu.Lock()
			waited := p.nextAt.Sub(p.limitedAt)
			p.mu.Unlock()
			waits := c.adapter != harnessv1.AdapterGemini && c.adapter != harnessv1.AdapterAider
			if p.nextAt.IsZero() || waits && waited < 9*time.Second {
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
		})
	}
}
