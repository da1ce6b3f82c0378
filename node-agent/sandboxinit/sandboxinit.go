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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Forward bridges TCP connections to Listen (127.0.0.1:PORT inside the
// sandbox) to the unix socket Socket.
type Forward struct {
	Listen string `json:"listen"`
	Socket string `json:"socket"`
}

// ParseForward parses "127.0.0.1:PORT=unix:/path/to.sock".
func ParseForward(s string) (Forward, error) {
	listen, target, ok := strings.Cut(s, "=")
	sock, isUnix := strings.CutPrefix(target, "unix:")
	if !ok || !isUnix || sock == "" {
		return Forward{}, fmt.Errorf("forward %q: want 127.0.0.1:PORT=unix:/path", s)
	}
	f := Forward{Listen: listen, Socket: sock}
	return f, f.check()
}

func (f Forward) check() error {
	if f.Socket == "" {
		return fmt.Errorf("forward of %s: no socket", f.Listen)
	}
	host, _, err := net.SplitHostPort(f.Listen)
	if err != nil {
		return fmt.Errorf("forward of %s: %w", f.Listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("forward of %s: only loopback addresses may listen", f.Listen)
	}
	return nil
}

// ConfigEnv is the environment variable that carries a Config (JSON) from
// the node-agent to sandbox-init. An environment value is on no command
// line (the sandbox's variables travel to bwrap in a sealed memfd), while
// an argument is readable by every host user in /proc/PID/cmdline: the
// run's socket paths would tell them where to call another run's MCP
// server or egress proxy. sandbox-init removes it before the agent starts.
const ConfigEnv = "HARNESSFACTS_SANDBOX_INIT"

// EnvEntry is cfg as the KEY=value entry of ConfigEnv.
func (c Config) EnvEntry() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return ConfigEnv + "=" + string(b), nil
}

// ConfigFromEnv reads the Config that environ carries in ConfigEnv (an
// empty Config when it carries none) and returns environ without it.
func ConfigFromEnv(environ []string) (Config, []string, error) {
	var cfg Config
	rest := make([]string, 0, len(environ))
	for _, kv := range environ {
		v, ok := strings.CutPrefix(kv, ConfigEnv+"=")
		if !ok {
			rest = append(rest, kv)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return Config{}, nil, fmt.Errorf("sandbox-init: %s: %w", ConfigEnv, err)
		}
	}
	for _, f := range cfg.Forwards {
		if err := f.check(); err != nil {
			return Config{}, nil, fmt.Errorf("sandbox-init: %s: %w", ConfigEnv, err)
		}
	}
	if cfg.Proxy != nil {
		if err := cfg.Proxy.check(); err != nil {
			return Config{}, nil, fmt.Errorf("sandbox-init: %s: %w", ConfigEnv, err)
		}
	}
	return cfg, rest, nil
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
	Forwards []Forward `json:"forwards,omitempty"`
	// Proxy, when set, is the run's egress proxy: bridged like a forward,
	// and the agent's environment gets ProxyEnv of its Listen address.
	Proxy *Forward `json:"proxy,omitempty"`
	// Stdin is passed on to the agent (the prompt, for CLIs that read it
	// there); nil is /dev/null.
	Stdin io.Reader `json:"-"`
}

// Run listens on every forward, runs argv with the current environment (plus
// ProxyEnv when cfg has a proxy) and returns its exit code. The listeners
// close when the agent exits.
func Run(ctx context.Context, cfg Config, argv []string, stdout, stderr io.Writer) (int, error) {
	if len(argv) == 0 {
		return 127, errors.New("sandbox-init: no command to run")
	}
	// Relaying a few connections needs no parallelism, and every thread
	// the runtime would start for more comes out of the agent's process
	// limit (Tasks). The threads are made first, while nothing else runs:
	// the listeners' and the signal handler's goroutines then use them.
	runtime.GOMAXPROCS(1)
	reserveThreads(Tasks)
	forwards := cfg.Forwards
	// The agent never sees the configuration: it names the run's sockets.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ConfigEnv+"=") {
			env = append(env, kv)
		}
	}
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

	// Before the agent starts: a signal that comes while it does waits
	// here for it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = cfg.Stdin, stdout, stderr, env
	if err := cmd.Start(); err != nil {
		return 127, fmt.Errorf("sandbox-init: starting %s: %w", argv[0], err)
	}
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
// Once l is closed, the connections still open are closed too and Relay
// returns: a server that holds its end without a word (a model thinking,
// or one that hangs) would otherwise keep Relay, and whoever waits for it
// (the end of a run), for as long as it likes.
func Relay(l net.Listener, dial func() (net.Conn, error)) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool
	)
	// hold keeps c to be closed with l; false once l is closed (c is then
	// closed at once).
	hold := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			_ = c.Close()
			return false
		}
		open[c] = struct{}{}
		return true
	}
	let := func(c net.Conn) {
		mu.Lock()
		delete(open, c)
		mu.Unlock()
		_ = c.Close()
	}
	defer func() {
		mu.Lock()
		closed = true
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !hold(c) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer let(c)
			u, err := dial()
			if err != nil || !hold(u) {
				return
			}
			defer let(u)
			pipe(c, u)
		}()
	}
}

// pipe copies c and u both ways until both directions have ended.
func pipe(c, u net.Conn) {
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

// MCPSocketEnv names the run's MCP socket for `harnessfacts mcp-stdio`. The
// adapters put it in each CLI's settings for the stdio server (its env), so
// that the socket path is on no command line.
const MCPSocketEnv = "HARNESSFACTS_MCP_SOCKET"

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
