package executor

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// SandboxMCPPort is the loopback port inside the sandbox on which
// the run's MCP server is bridged (see loopback). Each sandbox has its own
// network namespace, so every run can use the same port.
const SandboxMCPPort = 7700

// mcpServer is the run's MCP token server as the executor runs it.
type mcpServer struct {
	token      string
	endpoint   adapters.MCPEndpoint
	httpSocket string
	http       *mcp.Server
	receipts   *mcp.Receipts
	listeners  []net.Listener
	stopped    chan struct{}
	cancel     context.CancelFunc
}

// startMCP starts the run's MCP token server, on the transport the run
// names or else the fixture's, until the attempt ends.
func (a *attempt) startMCP(ctx context.Context) error {
	a.transport = a.fix.Manifest.Transport()
	if a.run.Spec.MCP != nil {
		a.transport = a.run.Spec.MCP.Transport
	}
	srv, err := a.e.serveMCP(ctx, a.dir, a.transport, int64(a.limits.MaxDecisions), a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonMCPServerFailed, fmt.Errorf("the MCP token server could not start: %w", err))
	}
	a.mcp = srv
	a.deferCleanup(srv.stop)
	return nil
}

// serveMCP starts the token server for transport. HTTP: the server listens
// on 127.0.0.1 outside the sandbox and a unix socket in the run dir relays
// to it; the runner bridges 127.0.0.1:SandboxMCPPort inside the sandbox to
// that socket (loopback). Stdio: the node-agent serves MCP on a unix socket, and the
// agent's stdio server is `harnessfacts mcp-stdio`, a pipe to that socket,
// so the token is never in a file the agent could read.
func (e *Executor) serveMCP(ctx context.Context, dir *fixture.RunDir, transport harnessv1.MCPTransport, maxCalls int64, owner socketOwner) (*mcpServer, error) {
	s := &mcpServer{endpoint: adapters.MCPEndpoint{Transport: transport, Server: "harnessfacts", Tool: "get_token"}, stopped: make(chan struct{})}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	switch transport {
	case harnessv1.MCPTransportHTTP:
		// The server listens on a socket of the run dir's top level, the
		// node-agent's alone (not on a loopback port, which every run's
		// relay to a loopback provider could name); the run's socket
		// relays to it.
		server := dir.Join(mcpServerSocket)
		srv, err := mcp.StartHTTP(mcp.Options{MaxCalls: maxCalls, ExtraPorts: []int{SandboxMCPPort}, Socket: server})
		if err != nil {
			return nil, err
		}
		s.http, s.token, s.receipts = srv, srv.Token, srv.Receipts
		s.httpSocket = dir.Socket(fixture.SocketMCPHTTP)
		ln, err := listenBounded(s.httpSocket, httpMCPChannel, owner)
		if err != nil {
			_ = srv.Shutdown(ctx)
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		go sandboxinit.Relay(ln, func() (net.Conn, error) { return net.Dial("unix", server) })
		s.endpoint.URL = srv.URL
	case harnessv1.MCPTransportStdio:
		token, err := mcp.NewToken()
		if err != nil {
			return nil, err
		}
		s.token = token
		s.receipts = mcp.NewReceipts(harnessv1.MCPTransportStdio, maxCalls)
		sock := dir.Socket(fixture.SocketMCPStdio)
		ln, err := listenBounded(sock, stdioMCPChannel, owner)
		if err != nil {
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		// The run's sessions share its slots for calls in flight.
		calls := mcp.NewCalls()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer func() { _ = c.Close() }()
					_ = mcp.ServeStdio(ctx, c, c, token, s.receipts, calls)
				}()
			}
		}()
		// The socket in the server's environment, which the adapter puts
		// in the CLI's settings: an argument would be on a command line.
		s.endpoint.Command = []string{e.opts.InitBinary, "mcp-stdio"}
		s.endpoint.Env = map[string]string{sandboxinit.MCPSocketEnv: sock}
	}
	return s, nil
}

// mcpServerSocket is where a run's HTTP MCP server listens, in the run
// dir's top level.
const mcpServerSocket = "mcp-server.sock"

// socketOwner is the host uid and gid a run's sockets belong to: its
// agent's.
type socketOwner struct{ uid, gid int }

// listenUnix serves a unix socket that only owner (and root) may connect
// to: 0600, owned by the run's agent's uid, in the run's sockets folder,
// which is 0700 and theirs too (so the moment between bind and chmod
// exposes nothing). Another user of the node who learns the path can
// neither call the run's get_token nor use its egress proxy.
func listenUnix(path string, owner socketOwner) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	err = os.Chmod(path, 0o600)
	if err == nil {
		err = os.Lchown(path, owner.uid, owner.gid)
	}
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("giving %s to the run's uid: %w", path, err)
	}
	return ln, nil
}

func (s *mcpServer) summary() mcp.Summary {
	if s.receipts == nil {
		return mcp.Summary{}
	}
	return s.receipts.Summary()
}

func (s *mcpServer) stop() {
	s.cancel()
	for _, l := range s.listeners {
		_ = l.Close()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.http.Shutdown(ctx)
	}
}
