package executor

import (
	"sync"
	"time"
)

// The node-agent redacts every byte a run's agent and checks write, on its
// own CPU: outside the run's cgroup and its CPU share. Most output costs
// little (the keyword scan runs at gigabytes a second), but lines dense in
// the keywords of gitleaks' token rules make each rule look, and an agent
// printing nothing but `token=<30 characters>` lines made the node-agent
// redact at half a megabyte a second: a core of the node-agent's, taken by
// one printf loop, for the whole episode, from every other run's output,
// MCP server, proxies and heartbeats.
//
// pace holds one run's redaction (its agent's; its checks' have one of
// their own) to a share of a core: once the time spent
// redacting passes its burst, each write waits until the share has paid
// for it. The agent then blocks on its own output pipe: its output is
// slowed, never less redacted. Real agents' output, tens of kilobytes a
// second, never comes near it.
type pace struct {
	mu     sync.Mutex
	share  float64       // seconds of redaction per second
	burst  time.Duration // redaction time allowed at once
	credit time.Duration
	last   time.Time
	waited time.Duration
}

// Redaction may take a tenth of a core per run, with up to a second of it
// at once.
const (
	redactShare = 0.1
	redactBurst = time.Second
)

func newPace() *pace {
	return &pace{share: redactShare, burst: redactBurst, credit: redactBurst, last: time.Now()}
}

// spend takes d of redaction time from the run's credit, and returns how
// long the writer must wait before it goes on.
func (p *pace) spend(d time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.credit = min(p.burst, p.credit+time.Duration(float64(now.Sub(p.last))*p.share))
	p.last = now
	p.credit -= d
	if p.credit >= 0 {
		return 0
	}
	// One wait is at most maxPaceWait: the debt left is paid by the next
	// writes. A longer one could outlast the few seconds the sandbox
	// waits for its output to be copied once the agent has exited
	// (exec.Cmd's WaitDelay), and the output's end would be dropped.
	wait := min(time.Duration(float64(-p.credit)/p.share), maxPaceWait)
	p.waited += wait
	return wait
}

// maxPaceWait bounds one write's wait.
const maxPaceWait = 2 * time.Second

// slowed is how long the run's writers waited in all.
func (p *pace) slowed() time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waited
}
