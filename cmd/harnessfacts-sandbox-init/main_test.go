package main

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// TestSandboxInit: the small program runs the command after "--" with its
// exit status, refuses a malformed configuration, and the command never
// sees the configuration variable (it names the run's sockets).
func TestSandboxInit(t *testing.T) {
	if code := run([]string{"sandbox-init", "--", "sh", "-c", "exit 3"}); code != 3 {
		t.Errorf("exit status %d, want the command's 3", code)
	}
	t.Setenv(sandboxinit.ConfigEnv, `{"forwards":[]}`)
	if code := run([]string{"sandbox-init", "--", "sh", "-c", `test -z "${` + sandboxinit.ConfigEnv + `+set}"`}); code != 0 {
		t.Errorf("the command saw $%s (exit %d)", sandboxinit.ConfigEnv, code)
	}
	t.Setenv(sandboxinit.ConfigEnv, `{"forwards":[{"listen":"0.0.0.0:80","socket":"/x.sock"}]}`)
	if code := run([]string{"sandbox-init", "--", "true"}); code != 1 {
		t.Errorf("a forward listening beyond loopback: exit %d, want 1 (refused)", code)
	}
	t.Setenv(sandboxinit.ConfigEnv, `{"unknown":1}`)
	if code := run([]string{"sandbox-init", "--", "true"}); code != 1 {
		t.Errorf("an unknown configuration field: exit %d, want 1 (refused)", code)
	}
	for _, args := range [][]string{nil, {"sandbox-init"}, {"sandbox-init", "--"}, {"version"}, {"mcp-stdio", "extra"}} {
		if code := run(args); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", args, code)
		}
	}
	t.Setenv(sandboxinit.MCPSocketEnv, "")
	if code := run([]string{"mcp-stdio"}); code != 1 {
		t.Errorf("mcp-stdio without a socket: exit %d, want 1", code)
	}
}

func TestSocketFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		ok   bool
	}{
		{nil, "", true},
		{[]string{"--socket", "/a.sock"}, "/a.sock", true},
		{[]string{"--socket=/b.sock"}, "/b.sock", true},
		{[]string{"-socket", "/c.sock"}, "/c.sock", true},
		{[]string{"--socket"}, "", false},
		{[]string{"--other", "x"}, "", false},
		{[]string{"--socket", "/a", "x"}, "", false},
	} {
		got, err := socketFlag(tc.args)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("socketFlag(%q) = %q, %v; want %q, ok %v", tc.args, got, err, tc.want, tc.ok)
		}
	}
}
