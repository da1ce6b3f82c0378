//go:build unix

package sandboxinit

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseForward(t *testing.T) {
	f, err := ParseForward("127.0.0.1:7701=unix:/run/x/sockets/egress.sock")
	if err != nil || f.Listen != "127.0.0.1:7701" || f.Socket != "/run/x/sockets/egress.sock" {
		t.Errorf("got %+v, %v", f, err)
	}
	for _, bad := range []string{"0.0.0.0:7701=unix:/s", "127.0.0.1:7701=tcp:1.2.3.4:5", "127.0.0.1:7701", "127.0.0.1=unix:/s", "127.0.0.1:1=unix:"} {
		if _, err := ParseForward(bad); err == nil {
			t.Errorf("ParseForward(%q) accepted it", bad)
		}
	}
}

// TestRunWithProxy: the agent gets the proxy environment, and its port
// reaches the socket's server.
func TestRunWithProxy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			_, _ = io.WriteString(c, "proxy got "+line)
			_ = c.Close()
		}
	}()
	probe, err := net.Listen("tcp", "127.0.0.1:0") // a free port
	if err != nil {
		t.Fatal(err)
	}
	listen := probe.Addr().String()
	_ = probe.Close()

	var out bytes.Buffer
	script := `echo "$HTTPS_PROXY $https_proxy $HTTP_PROXY $http_proxy $NO_PROXY $no_proxy"
exec 3<>/dev/tcp/127.0.0.1/` + listen[strings.LastIndex(listen, ":")+1:] + `
echo hello >&3
cat <&3`
	code, err := Run(context.Background(), Config{Proxy: &Forward{Listen: listen, Socket: sock}}, []string{"bash", "-c", script}, &out, &out)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out.String())
	}
	u := "http://" + listen
	want := strings.Join([]string{u, u, u, u, NoProxy, NoProxy}, " ") + "\nproxy got hello\n"
	if out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

// The node-agent hands sandbox-init its forwards in the environment, never
// on argv; sandbox-init takes the entry out, and refuses a forward that
// would listen beyond the sandbox's loopback.
func TestConfigTravelsInTheEnvironment(t *testing.T) {
	cfg := Config{Forwards: []Forward{{Listen: "127.0.0.1:7700", Socket: "/r/sockets/mcp-http.sock"}}, Proxy: &Forward{Listen: "127.0.0.1:7701", Socket: "/r/sockets/egress.sock"}}
	entry, err := cfg.EnvEntry()
	if err != nil {
		t.Fatal(err)
	}
	got, rest, err := ConfigFromEnv([]string{"PATH=/bin", entry, "HOME=/h"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Forwards) != 1 || got.Forwards[0] != cfg.Forwards[0] || got.Proxy == nil || *got.Proxy != *cfg.Proxy {
		t.Errorf("got %+v, want %+v", got, cfg)
	}
	if strings.Join(rest, " ") != "PATH=/bin HOME=/h" {
		t.Errorf("the rest of the environment is %q", rest)
	}
	for _, bad := range []string{
		ConfigEnv + `={"forwards":[{"listen":"0.0.0.0:7700","socket":"/s"}]}`,
		ConfigEnv + `={"proxy":{"listen":"127.0.0.1:7701","socket":""}}`,
		ConfigEnv + `={"forwards":[],"extra":1}`,
		ConfigEnv + `=not json`,
	} {
		if _, _, err := ConfigFromEnv([]string{bad}); err == nil {
			t.Errorf("ConfigFromEnv(%q) accepted it", bad)
		}
	}
}
