package executor

import (
	"net"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
)

// The bounds of each channel an agent can open to the node-agent: its
// connections at once, its bytes over the run, its idle time. The
// node-agent's memory is shared by every run on the node and lies outside
// each run's cgroup; see docs/node-agent.md, "Channels into the
// node-agent".
var (
	// A stdio MCP session lasts the agent's run and is quiet between calls:
	// no idle bound. A message is at most mcp.MaxMessageBytes.
	stdioMCPChannel = bounded.Limits{MaxConns: 8, MaxBytes: 64 << 20}
	// The HTTP MCP relay; the server behind it bounds its own listener
	// (mcp.DefaultChannel) and each body (64 KiB).
	httpMCPChannel = bounded.Limits{MaxConns: 16, MaxBytes: 64 << 20, Idle: 2 * time.Minute}
	// A provider on the node's loopback: a model may think for minutes
	// before it answers.
	providerChannel = bounded.Limits{MaxConns: 64, MaxBytes: 4 << 30, Idle: 10 * time.Minute}
	// The egress proxy bounds its connections (64) and idle time itself.
	egressChannel = bounded.Limits{MaxBytes: 4 << 30}
)

// listenBounded listens on a unix socket in the run dir for the agent,
// with the channel's bounds.
func listenBounded(path string, lim bounded.Limits, owner socketOwner) (net.Listener, error) {
	ln, err := listenUnix(path, owner)
	if err != nil {
		return nil, err
	}
	return bounded.NewListener(ln, lim), nil
}
