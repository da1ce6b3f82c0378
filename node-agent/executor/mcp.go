package executor

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// SandboxMCPPort is the loopback port inside the sandbox on which
// sandbox-init exposes the run's MCP server. Each sandbox has its own
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
	srv, err := a.e.serveMCP(ctx, a.dir, a.transport, int64(a.limits.MaxDecisions))
	if err != nil {
		return fail(harnessv1.ReasonMCPServerFailed, fmt.Errorf("the MCP token server could not start: %w", err))
	}
	a.mcp = srv
	a.deferCleanup(srv.stop)
	return nil
}

// serveMCP starts the token server for transport. HTTP: the server listens
// on 127.0.0.1 outside the sandbox and a unix socket in the run dir relays
// to it; sandbox-init bridges 127.0.0.1:SandboxMCPPort inside the sandbox to
// that socket. Stdio: the node-agent serves MCP on a unix socket, and the
// agent's stdio server is `harnessfacts mcp-stdio`, a pipe to that socket,
// so the token is never in a file the agent could read.
func (e *Executor) serveMCP(ctx context.Context, dir *fixture.RunDir, transport harnessv1.MCPTransport, maxCalls int64) (*mcpServer, error) {
	s := &mcpServer{endpoint: adapters.MCPEndpoint{Transport: transport, Server: "harnessfacts", Tool: "get_token"}, stopped: make(chan struct{})}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	switch transport {
	case harnessv1.MCPTransportHTTP:
		srv, err := mcp.StartHTTP(mcp.Options{MaxCalls: maxCalls, ExtraPorts: []int{SandboxMCPPort}})
		if err != nil {
			return nil, err
		}
		s.http, s.token, s.receipts = srv, srv.Token, srv.Receipts
		u := strings.TrimPrefix(srv.URL, "http://")
		hostPort, path, _ := strings.Cut(u, "/")
		s.httpSocket = dir.Socket(fixture.SocketMCPHTTP)
		ln, err := listenBounded(s.httpSocket, httpMCPChannel)
		if err != nil {
			_ = srv.Shutdown(ctx)
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		go sandboxinit.Relay(ln, func() (net.Conn, error) { return net.Dial("tcp", hostPort) })
		s.endpoint.URL = fmt.Sprintf("http://127.0.0.1:%d/%s", SandboxMCPPort, path)
	case harnessv1.MCPTransportStdio:
		token, err := mcp.NewToken()
		if err != nil {
			return nil, err
		}
		s.token = token
		s.receipts = mcp.NewReceipts(harnessv1.MCPTransportStdio, maxCalls)
		sock := dir.Socket(fixture.SocketMCPStdio)
		ln, err := listenBounded(sock, stdioMCPChannel)
		if err != nil {
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer func() { _ = c.Close() }()
					_ = mcp.ServeStdio(ctx, c, c, token, s.receipts)
				}()
			}
		}()
		s.endpoint.Command = []string{e.opts.InitBinary, "mcp-stdio", "--socket", sock}
	}
	return s, nil
}

func listenUnix(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// The agent runs as another user; connecting needs write permission.
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, err
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
