package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// asProgram makes this test binary the program itself, for the cases where
// sandbox-init replaces its own process with the command (nothing to
// bridge): run in the test process, it would replace the test.
const asProgram = "HARNESSFACTS_TEST_SANDBOX_INIT_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asProgram) != "" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// program runs this binary as harnessfacts-sandbox-init with args and env
// added to the test's environment: its exit code, stdout, and its pid.
func program(t *testing.T, env []string, args ...string) (int, string, int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), asProgram+"=1"), env...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), cmd.Process.Pid
}

// TestSandboxInit: the small program runs the command after "--" with its
// exit status, refuses a malformed configuration, and the command never
// sees the configuration variable (it names the run's sockets). With
// nothing to bridge it becomes the command (same pid: no Go parent left
// waiting); with a forward it stays the command's parent, bridging.
func TestSandboxInit(t *testing.T) {
	if code, _, _ := program(t, nil, "sandbox-init", "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("exit status %d, want the command's 3", code)
	}
	if code, _, _ := program(t, nil, "sandbox-init", "--", "sh", "-c", "kill -TERM $$"); code != -1 {
		t.Errorf("a command killed by a signal: exit %d, want the signal's death (-1 here; bwrap reports it as 128+N)", code)
	}
	if code, _, _ := program(t, nil, "sandbox-init", "--", "no-such-command-here"); code != 127 {
		t.Errorf("a command not found: exit %d, want 127", code)
	}
	noConfig := `test -z "${` + sandboxinit.ConfigEnv + `+set}" && echo $$`
	code, out, pid := program(t, []string{sandboxinit.ConfigEnv + `={"forwards":[]}`}, "sandbox-init", "--", "sh", "-c", noConfig)
	if code != 0 {
		t.Errorf("nothing to bridge: the command saw $%s (exit %d)", sandboxinit.ConfigEnv, code)
	}
	if strings.TrimSpace(out) != strconv.Itoa(pid) {
		t.Errorf("nothing to bridge: the command ran as pid %q, want sandbox-init's own %d (exec'd in its place)", strings.TrimSpace(out), pid)
	}
	bridge := sandboxinit.ConfigEnv + `={"forwards":[{"listen":"127.0.0.1:0","socket":"/nonexistent.sock"}]}`
	code, out, pid = program(t, []string{bridge}, "sandbox-init", "--", "sh", "-c", noConfig)
	if code != 0 {
		t.Errorf("bridging: the command saw $%s (exit %d)", sandboxinit.ConfigEnv, code)
	}
	if got := strings.TrimSpace(out); got == "" || got == strconv.Itoa(pid) {
		t.Errorf("bridging: the command ran as pid %q, want a child of sandbox-init (%d), which bridges", got, pid)
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
