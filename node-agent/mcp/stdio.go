package mcp

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// MaxMessageBytes bounds one JSON-RPC message read from the agent, on
// every transport. The SDK decodes a call's arguments into Go values to
// check them: a message of tiny JSON values (`[],[],...`) costs some 60
// times its size in the node-agent's memory while it is decoded, and up to
// MaxCallsInFlight calls a stdio session (or one per HTTP connection) are
// decoded at once. A get_token call, and the initialize of every CLI, is a
// few hundred bytes.
const MaxMessageBytes = 64 << 10

// MaxCallsInFlight bounds the calls of one run that were read and not yet
// answered, over all its stdio sessions and HTTP connections (Calls). The
// SDK handles each call on a goroutine of its own and reads on while the
// calls wait: an agent that sends calls and never reads the answers made
// the node-agent hold a goroutine and a request for each (1.7 GiB from 8
// MiB of pings). At the bound a session stops reading until an answer is
// written. Bounded per session, a run of 8 stdio sessions could have 32
// calls decoded at once (up to 128 MiB of the node-agent's memory) and a
// run over HTTP 16; a few hostile runs together would pass the
// node-agent's 512 MiB.
const MaxCallsInFlight = 4

// Calls are one run's slots for calls read and not yet answered
// (MaxCallsInFlight), shared by its sessions: a session that holds them
// stalls only its own run's others. A slot is taken once a call is read,
// not before: an idle session holds none.
type Calls chan struct{}

// NewCalls makes a run's slots.
func NewCalls() Calls { return make(Calls, MaxCallsInFlight) }

// ServeStdio serves the token server over newline-delimited JSON-RPC on in
// and out (a stdio MCP server) until the client closes in or ctx ends. Each
// call is recorded with rec, and holds one of calls (the run's; nil: the
// session's own) until it is answered. The node-agent serves it on the run's stdio
// MCP socket, which `harnessfacts mcp-stdio`, the agent's stdio MCP
// command inside the sandbox, connects to: the token never enters the
// sandbox, and the receipts stay in the node-agent, where the agent cannot
// forge or erase them. A client that hangs up is a normal end (nil).
func ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser, token string, rec Recorder, calls Calls) error {
	s := newMCPServer(token, v1alpha1.MCPTransportStdio, rec)
	// The SDK's own bound is 16 MiB a message: a get_token call is a few
	// hundred bytes, and every byte of a message sits in the node-agent's
	// memory while it is decoded.
	if calls == nil {
		calls = NewCalls()
	}
	err := s.Run(ctx, &inFlightTransport{inner: &sdk.IOTransport{Reader: in, Writer: out, MaxLineLength: MaxMessageBytes}, slots: calls})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// inFlightTransport bounds the calls read and not yet answered on its
// connection by slots.
type inFlightTransport struct {
	inner sdk.Transport
	slots Calls
}

func (t *inFlightTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &inFlightConn{Connection: c, slots: t.slots, closed: make(chan struct{})}, nil
}

// MaxReadWhileWriting bounds the messages a stdio session reads while one
// of its answers is being written. The SDK hands notifications (and calls
// before the session is initialized) to one handler in turn, from a queue
// without a bound: while that handler waits to write an answer the agent
// does not read, every notification read waited in the queue (some 13
// bytes of the node-agent's memory for each byte sent).
const MaxReadWhileWriting = 64

type inFlightConn struct {
	sdk.Connection
	// slots holds one token per call read and not yet answered, of every
	// session of the run; held counts this session's.
	slots  Calls
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	held int
	// writing counts the writes under way; readAhead the messages read
	// since the first of them began; drained is closed when the last ends.
	writing   int
	readAhead int
	drained   chan struct{}
}

// Read takes a slot for a call it read, and keeps it until the call's
// answer is written: at the bound it holds the call (one message, at most
// MaxMessageBytes, not yet decoded) until a slot is free. While an answer
// is being written it reads at most MaxReadWhileWriting messages.
func (c *inFlightConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		c.mu.Lock()
		if c.writing == 0 || c.readAhead < MaxReadWhileWriting {
			if c.writing > 0 {
				c.readAhead++
			}
			c.mu.Unlock()
			break
		}
		drained := c.drained
		c.mu.Unlock()
		select {
		case <-drained:
		case <-c.closed:
			return nil, io.EOF
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, err := c.Connection.Read(ctx)
	if req, ok := m.(*jsonrpc.Request); err != nil || !ok || !req.IsCall() {
		return m, err
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
	return m, nil
}

// Write gives back a call's slot once its answer is written (or failed to
// be: the connection is then closed).
func (c *inFlightConn) Write(ctx context.Context, m jsonrpc.Message) error {
	c.mu.Lock()
	if c.writing == 0 {
		c.drained = make(chan struct{})
	}
	c.writing++
	c.mu.Unlock()
	err := c.Connection.Write(ctx, m)
	c.mu.Lock()
	if c.writing--; c.writing == 0 {
		c.readAhead = 0
		close(c.drained)
	}
	c.mu.Unlock()
	if _, ok := m.(*jsonrpc.Response); ok {
		c.release(1)
	}
	return err
}

// release gives back up to n of the slots this session holds.
func (c *inFlightConn) release(n int) {
	c.mu.Lock()
	n = min(n, c.held)
	c.held -= n
	c.mu.Unlock()
	for range n {
		<-c.slots
	}
}

// Close gives back the slots of the calls this session read and did not
// answer (a call the client cancelled, or the session's end), so that
// they are not lost to the run's other sessions.
func (c *inFlightConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.mu.Lock()
		n := c.held
		c.mu.Unlock()
		c.release(n)
	})
	return c.Connection.Close()
}
