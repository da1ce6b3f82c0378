// Package sandboxinit is the entry point inside the sandbox
// (`harnessfacts sandbox-init`). The sandbox has its own network namespace
// with only a loopback interface, so the agent cannot reach anything on the
// host; the few things it may reach (the run's MCP server, later the egress
// proxy) are unix sockets in the run dir, and sandboxinit bridges a
// 127.0.0.1 port inside the sandbox to each of them. The egress proxy's
// forward also points the agent's HTTPS_PROXY and HTTP_PROXY at its port,
// with NO_PROXY keeping the sandbox's own loopback (the MCP bridge) direct.
// Then it starts the agent, forwards signals to it and exits with its
// status.
package sandboxinit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// Forward bridges TCP connections to Listen (127.0.0.1:PORT inside the
// sandbox) to the unix socket Socket.
type Forward struct {
	Listen string
	Socket string
}

// ParseForward parses "127.0.0.1:PORT=unix:/path/to.sock".
func ParseForward(s string) (Forward, error) {
	listen, target, ok := strings.Cut(s, "=")
	sock, isUnix := strings.CutPrefix(target, "unix:")
	if !ok || !isUnix || sock == "" {
		return Forward{}, fmt.Errorf("forward %q: want 127.0.0.1:PORT=unix:/path", s)
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return Forward{}, fmt.Errorf("forward %q: %w", s, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return Forward{}, fmt.Errorf("forward %q: only loopback addresses may listen", s)
	}
	return Forward{Listen: listen, Socket: sock}, nil
}

// NoProxy is the agent's NO_PROXY: the sandbox's own loopback, where
// sandbox-init bridges the run's MCP server, is reached directly.
const NoProxy = "127.0.0.1,localhost,::1"

// ProxyEnv is the environment that sends an agent's HTTP and HTTPS
// connections through the proxy listening on listen (127.0.0.1:PORT), in
// both cases, since tools disagree on which they read (curl reads only the
// lower-case http_proxy).
func ProxyEnv(listen string) []string {
	u := "http://" + listen
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"NO_PROXY=" + NoProxy, "no_proxy=" + NoProxy,
	}
}

// Config is what sandbox-init sets up before it starts the agent.
type Config struct {
	// Forwards are bridged as they are (the MCP server).
	Forwards []Forward
	// Proxy, when set, is the run's egress proxy: bridged like a forward,
	// and the agent's environment gets ProxyEnv of its Listen address.
	Proxy *Forward
}

// Run listens on every forward, runs argv with the current environment (plus
// ProxyEnv when cfg has a proxy) and returns its exit code. The listeners
// close when the agent exits.
func Run(ctx context.Context, cfg Config, argv []string, stdout, stderr io.Writer) (int, error) {
	if len(argv) == 0 {
		return 127, errors.New("sandbox-init: no command to run")
	}
	forwards := cfg.Forwards
	env := os.Environ()
	if cfg.Proxy != nil {
		forwards = append(append([]Forward(nil), forwards...), *cfg.Proxy)
		env = append(env, ProxyEnv(cfg.Proxy.Listen)...)
	}
	var wg sync.WaitGroup
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
		wg.Wait()
	}()
	for _, f := range forwards {
		l, err := net.Listen("tcp", f.Listen)
		if err != nil {
			return 127, fmt.Errorf("sandbox-init: listening on %s: %w", f.Listen, err)
		}
		listeners = append(listeners, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			Relay(l, func() (net.Conn, error) { return net.Dial("unix", f.Socket) })
		}()
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = nil, stdout, stderr, env
	if err := cmd.Start(); err != nil {
		return 127, fmt.Errorf("sandbox-init: starting %s: %w", argv[0], err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				return
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 127, err
}

// Relay accepts connections on l until it is closed and copies each, both
// ways, to a connection dial makes. The node-agent uses it outside the
// sandbox too (a unix socket in the run dir relayed to a loopback server).
func Relay(l net.Listener, dial func() (net.Conn, error)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe(c, dial)
		}()
	}
}

func pipe(c net.Conn, dial func() (net.Conn, error)) {
	defer func() { _ = c.Close() }()
	u, err := dial()
	if err != nil {
		return
	}
	defer func() { _ = u.Close() }()
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(u, c)
	go copyHalf(c, u)
	<-done
	<-done
}

// Stdio copies stdin to a connection to the unix socket and the connection
// to stdout: the stdio MCP server an agent starts (`harnessfacts
// mcp-stdio`), whose real server is the node-agent on the other end, so the
// token never sits in a file the agent could read.
func Stdio(socket string, stdin io.Reader, stdout io.Writer) error {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("mcp-stdio: reaching the run's MCP server: %w", err)
	}
	defer func() { _ = c.Close() }()
	errs := make(chan error, 2)
	go func() {
		_, err := io.Copy(c, stdin)
		if uc, ok := c.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		errs <- err
	}()
	go func() {
		_, err := io.Copy(stdout, c)
		errs <- err
	}()
	// The session ends when the server hangs up (after stdin closed).
	first := <-errs
	return errors.Join(first, <-errs)
}
