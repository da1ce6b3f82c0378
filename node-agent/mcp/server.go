package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/version"
	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
)

// ToolName is the one tool the server offers.
const ToolName = "get_token"

// ServerName is the MCP server's name; agents see its tools under it.
const ServerName = "harnessfacts"

// DefaultMaxBodyBytes bounds an HTTP request body when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = MaxMessageBytes

// DefaultChannel bounds the HTTP server's listener when Options.Channel is
// zero: the connections at once, the bytes in all and the idle time of a
// connection. An agent needs one or two connections and a few KiB per call;
// with egress Unrestricted or in a plain child it can reach the listener
// directly, so the listener is bounded itself, not only the relay.
var DefaultChannel = bounded.Limits{MaxConns: 16, MaxBytes: 64 << 20, Idle: 2 * time.Minute}

// NewToken returns a fresh per-run token: 24 random bytes, base64url
// ("hft_" + 32 characters), unguessable and easy to grep for.
func NewToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "hft_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// newMCPServer builds the SDK server with the get_token tool, recording each
// call with rec.
func newMCPServer(token string, transport v1alpha1.MCPTransport, rec Recorder) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: ServerName, Version: version.String()}, nil)
	sdk.AddTool(s, &sdk.Tool{
		Name:        ToolName,
		Description: "Returns this run's token. Call it when the task asks for the token and report the token exactly as returned.",
	}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		rc := Receipt{Time: time.Now().UTC(), Transport: transport, Tool: ToolName, Outcome: OutcomeIssued}
		if !rec.Record(rc) {
			return &sdk.CallToolResult{
				IsError: true,
				Content: []sdk.Content{&sdk.TextContent{Text: "get_token refused: this run's call limit is reached"}},
			}, nil, nil
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: token}}}, nil, nil
	})
	return s
}

// Options configure StartHTTP.
type Options struct {
	// Token is the run's token; NewToken's when empty.
	Token string
	// MaxCalls bounds the answered calls (the run's limits.maxDecisions); no
	// limit when 0.
	MaxCalls int64
	// MaxBodyBytes bounds a request body (DefaultMaxBodyBytes when 0).
	MaxBodyBytes int64
	// ExtraPorts are further ports the Host header may name, for a bridge
	// that exposes the server inside the sandbox on another loopback port.
	ExtraPorts []int
	// Channel bounds the listener (DefaultChannel when zero).
	Channel bounded.Limits
	// Socket, when set, is a unix socket path the server listens on
	// (0600, its owner's alone) instead of a TCP port on 127.0.0.1: a port
	// there is open to every process of the node's (or the pod's) network
	// namespace, other runs' relays to a loopback provider among them.
	// Requests must then name one of ExtraPorts in their Host.
	Socket string
}

// Server is a running HTTP token server.
type Server struct {
	// URL is the endpoint to give the agent (HARNESSFACTS_MCP_URL); with
	// a Socket, its port is the first of ExtraPorts.
	URL string
	// Path is the URL's path, a random one.
	Path string
	// Token is the run's token.
	Token string
	// Receipts records the calls.
	Receipts *Receipts

	srv  *http.Server
	done chan error
}

// StartHTTP serves the token server on 127.0.0.1, a random port and a random
// path (or on Options.Socket), until Shutdown.
func StartHTTP(opts Options) (*Server, error) {
	var err error
	if opts.Token == "" {
		t, err := NewToken()
		if err != nil {
			return nil, err
		}
		opts.Token = t
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	var p [16]byte
	if _, err := rand.Read(p[:]); err != nil {
		return nil, err
	}
	path := "/mcp/" + hex.EncodeToString(p[:])
	var ln net.Listener
	var ports []int
	if opts.Socket != "" {
		if len(opts.ExtraPorts) == 0 {
			return nil, errors.New("MCP server: a unix socket without a port for its requests' Host")
		}
		if ln, err = net.Listen("unix", opts.Socket); err == nil {
			if err = os.Chmod(opts.Socket, 0o600); err != nil {
				_ = ln.Close()
			}
		}
		ports = opts.ExtraPorts
	} else if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err == nil {
		ports = append([]int{ln.Addr().(*net.TCPAddr).Port}, opts.ExtraPorts...)
	}
	if err != nil {
		return nil, fmt.Errorf("MCP server: %w", err)
	}
	if opts.Channel == (bounded.Limits{}) {
		opts.Channel = DefaultChannel
	}
	bl := bounded.NewListener(ln, opts.Channel)
	rec := NewReceipts(v1alpha1.MCPTransportHTTP, opts.MaxCalls)
	mcpServer := newMCPServer(opts.Token, v1alpha1.MCPTransportHTTP, rec)
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpServer }, &sdk.StreamableHTTPOptions{
		// Stateless with JSON responses: each POST is answered on its own,
		// so the simplest clients (curl) work and no session outlives a call.
		Stateless:    true,
		JSONResponse: true,
	})
	s := &Server{
		URL:      fmt.Sprintf("http://127.0.0.1:%d%s", ports[0], path),
		Path:     path,
		Token:    opts.Token,
		Receipts: rec,
		done:     make(chan error, 1),
	}
	s.srv = &http.Server{
		Handler: guard(path, ports, opts.MaxBodyBytes, NewCalls(), handler),
		// Stateless JSON answers are immediate: a client that takes longer
		// than this to send or read one is stuck or hostile.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		err := s.srv.Serve(bl)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Summary is what the server recorded.
func (s *Server) Summary() Summary { return s.Receipts.Summary() }

// Shutdown stops the server: no new request is accepted, running ones get
// until ctx ends, then every connection is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return errors.Join(err, <-s.done)
}

// guard wraps an MCP handler with the checks of the package documentation:
// path, Host, Origin, body size; and a request with a body, read whole,
// waits for one of calls (the server's, which is one run's) before the SDK
// decodes it, and holds it until it is answered (MaxCallsInFlight).
func guard(path string, ports []int, maxBody int64, calls Calls, next http.Handler) http.Handler {
	hosts := map[string]bool{}
	for _, p := range ports {
		hosts["127.0.0.1:"+strconv.Itoa(p)] = true
		hosts["localhost:"+strconv.Itoa(p)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		if !hosts[strings.ToLower(r.Host)] {
			http.Error(w, "forbidden: Host "+strconv.Quote(r.Host)+" is not this loopback server", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
			http.Error(w, "forbidden: Origin "+strconv.Quote(origin)+" may not call this server", http.StatusForbidden)
			return
		}
		if r.ContentLength > maxBody {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			// Read up to the bound to decide (the length may be unknown:
			// chunked); the SDK reads the whole body anyway.
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			_ = r.Body.Close()
			if err != nil {
				http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			if int64(len(body)) > maxBody {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			// A JSON-RPC batch (an array) is refused: the SDK answers
			// each of its calls on a goroutine of its own and holds all
			// the answers until the last, so that a body of 1 MiB held
			// about 25 MiB of the node-agent's memory and sixteen at once
			// about 450 MiB. MCP has no batches since 2025-06-18, and a
			// get_token call needs none.
			if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
				http.Error(w, "JSON-RPC batches are not served", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			select {
			case calls <- struct{}{}:
				defer func() { <-calls }()
			case <-r.Context().Done():
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin accepts http(s) origins on 127.0.0.0/8, ::1 and localhost.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
