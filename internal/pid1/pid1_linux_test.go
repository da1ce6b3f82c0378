package pid1_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/pid1"
)

// The test binary plays each part, chosen by roleEnv: "init" is PID 1 of a
// new pid namespace and calls pid1.Run with the same binary as "payload".
// The payload leaves an orphan behind (a shell that backgrounds a process
// and exits at once), waits until that orphan has exited, says "ready",
// and exits 42 on SIGTERM.
const roleEnv = "HARNESSFACTS_PID1_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "init":
		if !pid1.IsPID1() {
			fmt.Fprintln(os.Stderr, "the init is not PID 1")
			os.Exit(2)
		}
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, roleEnv+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, roleEnv+"=payload")
		code, err := pid1.Run("/proc/self/exe", os.Args, env)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(code)
	case "payload":
		payload()
	}
	os.Exit(m.Run())
}

func payload() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	r, w, err := os.Pipe()
	if err != nil {
		os.Exit(3)
	}
	// The subshell outlives sh, so it is reparented to PID 1; it says
	// "gone" on fd 3 as its last act.
	sh := exec.Command("sh", "-c", `(sleep 0.1; echo gone >&3) & exit 0`)
	sh.ExtraFiles = []*os.File{w}
	if err := sh.Run(); err != nil {
		os.Exit(4)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	if strings.TrimSpace(line) != "gone" {
		os.Exit(5)
	}
	fmt.Println("ready")
	<-term
	os.Exit(42)
}

// TestReapsOrphansAndForwardsSignals: the init reaps the orphan its child's
// shell left (no zombie stays below it), forwards SIGTERM to its child and
// ends with the child's exit code; its child's own Wait (os/exec in the
// payload) is not disturbed.
func TestReapsOrphansAndForwardsSignals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a new pid namespace needs root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=init")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("the payload said %q, not ready (its exit code tells which step failed)", line)
	}
	// The orphan has exited: it must not stay a zombie of the init.
	deadline := time.Now().Add(5 * time.Second)
	for {
		z := zombiesOf(cmd.Process.Pid)
		if len(z) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zombies left below the init: %v", z)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 42 {
		t.Fatalf("the init ended with %v, want the payload's exit code 42 after the forwarded SIGTERM", err)
	}
}

// zombiesOf lists the zombie children of pid, from the host's /proc.
func zombiesOf(pid int) []string {
	var z []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so from the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			z = append(z, s[:i+1])
		}
	}
	return z
}
