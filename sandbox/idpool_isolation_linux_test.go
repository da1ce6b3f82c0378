package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// peerProbeEnv makes the test binary try to signal, read and ptrace the
// process whose host pid is the variable's value, and print what happened.
const peerProbeEnv = "HF_PEER_PROBE"

func init() {
	if v := os.Getenv(peerProbeEnv); v != "" {
		os.Exit(peerProbe(v))
	}
}

func peerProbe(v string) int {
	pid, err := strconv.Atoi(v)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	res := func(err error) string {
		if err == nil {
			return "ok"
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return unix.ErrnoName(errno)
		}
		return "error"
	}
	fmt.Printf("signal=%s\n", res(unix.Kill(pid, 0)))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	fmt.Printf("environ=%s\n", res(err))
	fmt.Printf("environ-bytes=%d\n", len(b))
	err = unix.PtraceAttach(pid)
	if err == nil {
		_ = unix.PtraceDetach(pid)
	}
	fmt.Printf("ptrace=%s\n", res(err))
	return 0
}

// peerRuns runs a victim (a sleeper holding a secret in its environment)
// and, while it lives, an attacker probing the victim's host pid, each with
// the given ids, and returns what the attacker could do and the host uids
// the two ran as.
func peerRuns(t *testing.T, r Runner, victimUID, attackerUID int) (probe map[string]string, victimHostUID, attackerHostUID int) {
	t.Helper()
	base := testBase(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "probe")
	copyFile(t, self, bin, 0o755)

	secret := "victim-secret-" + randomToken(t)
	vdir := filepath.Join(base, "victim")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := Spec{
		Argv: []string{"/bin/sh", "-c", `echo $$ > pid; exec sleep 60`},
		Dir:  vdir, ReadWrite: []string{vdir},
		Env:    []string{"PATH=/usr/bin:/bin", "SECRET=" + secret},
		Limits: Limits{Timeout: 90 * time.Second},
		UID:    victimUID, GID: victimUID,
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = r.Run(ctx, victim)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	// The victim's host pid: inside bwrap $$ is a pid of its own namespace,
	// so look it up from here by the secret in its environment.
	var hostPid int
	deadline := time.Now().Add(30 * time.Second)
	for hostPid == 0 && time.Now().Before(deadline) {
		pids, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range pids {
			b, err := os.ReadFile(p + "/environ")
			cmd, _ := os.ReadFile(p + "/comm")
			if err == nil && strings.Contains(string(b), secret) && strings.TrimSpace(string(cmd)) == "sleep" {
				hostPid, _ = strconv.Atoi(filepath.Base(p))
				victimHostUID = hostUID(t, hostPid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hostPid == 0 {
		t.Fatal("the victim did not start")
	}

	adir := filepath.Join(base, "attacker")
	if err := os.MkdirAll(adir, 0o755); err != nil {
		t.Fatal(err)
	}
	attacker := Spec{
		Argv: []string{bin}, Dir: adir, ReadWrite: []string{adir}, ReadOnly: []string{bin},
		Env:    []string{"PATH=/usr/bin:/bin", peerProbeEnv + "=" + strconv.Itoa(hostPid)},
		Limits: Limits{Timeout: 60 * time.Second},
		UID:    attackerUID, GID: attackerUID,
	}
	// Not run(): the victim's cgroup is still there.
	var buf bytes.Buffer
	w := &lockedWriter{w: &buf}
	attacker.Stdout, attacker.Stderr = w, w
	res, err := r.Run(context.Background(), attacker)
	out := buf.String()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("attacker: exit %d, %v: %s", res.ExitCode, err, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the attacker printed the victim's secret")
	}
	probe = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			probe[k] = v
		}
	}
	// The attacker's host uid: what its files in the run dir are owned by.
	fi, err := os.Stat(adir)
	if err != nil {
		t.Fatal(err)
	}
	attackerHostUID = int(fi.Sys().(*syscall.Stat_t).Uid)
	return probe, victimHostUID, attackerHostUID
}

func hostUID(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// TestConcurrentRunsOfAPoolCannotReachEachOther: two runs holding
// different ids of an IDPool cannot signal, read or ptrace each other, in
// the plain fallback (where only the uid separates them) and in bwrap
// (where the pid namespace hides the other run too). The control run with
// one shared uid, what every run had before the pool, shows the plain
// attacker succeeding.
func TestConcurrentRunsOfAPoolCannotReachEachOther(t *testing.T) {
	requireBwrapHost(t)
	bw, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewIDPool(IDRange{First: 60200, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, relA, _ := pool.Acquire()
	defer relA()
	b, relB, _ := pool.Acquire()
	defer relB()

	t.Run("plain", func(t *testing.T) {
		probe, vu, au := peerRuns(t, &PlainRunner{}, a, b)
		if vu != a || au != b {
			t.Errorf("host uids %d and %d, want %d and %d", vu, au, a, b)
		}
		want := map[string]string{"signal": "EPERM", "environ": "EACCES", "ptrace": "EPERM"}
		for k, v := range want {
			if probe[k] != v {
				t.Errorf("plain: %s of the other run: %s, want %s", k, probe[k], v)
			}
		}
	})
	t.Run("plain, one shared uid (control)", func(t *testing.T) {
		probe, _, _ := peerRuns(t, &PlainRunner{}, DefaultUID, DefaultUID)
		if probe["signal"] != "ok" || probe["environ"] != "ok" {
			t.Errorf("with one uid the attacker should reach the victim, and this test could not fail: %v", probe)
		}
	})
	t.Run("bwrap", func(t *testing.T) {
		probe, vu, au := peerRuns(t, bw, a, b)
		if vu != a || au != b {
			t.Errorf("host uids %d and %d, want %d and %d", vu, au, a, b)
		}
		for _, k := range []string{"signal", "environ", "ptrace"} {
			if v := probe[k]; v == "ok" || v == "" {
				t.Errorf("bwrap: %s of the other run: %q", k, v)
			}
		}
		if probe["environ-bytes"] != "0" {
			t.Errorf("bwrap: read %s bytes of the other run's environment", probe["environ-bytes"])
		}
	})
}

// runAsProbeEnv makes the test binary try a plain run as uid 60001.
const runAsProbeEnv = "HF_RUNAS_PROBE"

func init() {
	if os.Getenv(runAsProbeEnv) != "" {
		_, err := (&PlainRunner{}).Run(context.Background(), Spec{Argv: []string{"/bin/true"}, Dir: "/", UID: 60001, GID: 60001})
		fmt.Println(err)
		os.Exit(0)
	}
}

// TestNonRootCannotSilentlyIgnoreAUID: a process that is not root asked to
// run a command as another uid gets an error; it used to run the command
// as itself.
func TestNonRootCannotSilentlyIgnoreAUID(t *testing.T) {
	requireBwrapHost(t)
	base := testBase(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "probe")
	copyFile(t, self, bin, 0o755)
	cmd := exec.Command(bin)
	cmd.Env = []string{runAsProbeEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: DefaultUID, Gid: DefaultGID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cannot run the command as uid 60001") {
		t.Fatalf("as uid %d, a run as uid 60001: %v: %s", DefaultUID, err, out)
	}
}
