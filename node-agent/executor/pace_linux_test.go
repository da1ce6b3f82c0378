package executor

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/race"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// An agent that prints nothing but lines the token rules must look at
// (`token=` and 30 characters, which the redactor takes at about half a
// megabyte a second) held a node-agent core for its whole episode. With
// the run's pace, the node-agent spends about its share on it, and the
// agent's output is slowed instead; what it printed is redacted as before.
// Real bwrap, the executor's own output path.
func TestRedactionIsPacedPerRun(t *testing.T) {
	if race.Enabled {
		t.Skip("measures a run's share of a core, which the race detector multiplies")
	}
	if _, err := exec.LookPath("bwrap"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and bwrap")
	}
	runner, err := sandbox.NewBwrapRunner(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678"
	red, err := redact.New(redact.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := newSpooledOutput(red, "", 8<<20, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer out.release()
	p := &pace{share: 0.1, burst: 100 * time.Millisecond, credit: 100 * time.Millisecond, last: time.Now()}
	out.pace = p
	// Lines for 3 seconds, then the run's secret.
	script := `l="$1"; i=0; while [ $i -lt 10 ]; do l="$l$l"; i=$((i+1)); done; end=$(( $(date +%s) + 3 )); ` +
		`while [ $(date +%s) -lt $end ]; do printf %s "$l"; done; echo "key: $2"`
	before, start := cpuSelf(), time.Now()
	res, err := runner.Run(context.Background(), sandbox.Spec{
		Argv: []string{"/bin/sh", "-c", script, "sh", "token=abcdefghij0123456789ABCDEFGHIJ\n", secret}, Dir: "/",
		Env:    []string{"PATH=/usr/bin:/bin"},
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, MaxProcesses: 64, Timeout: time.Minute},
		Stdout: out.writer(), Stderr: out.writer(),
	})
	out.close()
	wall, used := time.Since(start), cpuSelf()-before
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the agent: %+v, %v", res, err)
	}
	share := used.Seconds() / wall.Seconds()
	t.Logf("agent wrote %d bytes in %v; this process used %v of CPU (%.0f%% of a core); the writes waited %v", out.rawBytes(), wall.Round(time.Millisecond), used.Round(time.Millisecond), share*100, p.slowed().Round(time.Millisecond))
	if share > 0.45 {
		t.Errorf("redacting one run's output took %.0f%% of a core, its share is %.0f%%", share*100, p.share*100)
	}
	if p.slowed() == 0 {
		t.Error("the output was never slowed")
	}
	tail := string(out.tail(4096))
	if strings.Contains(tail, secret) || !strings.Contains(tail, "key: [REDACTED") {
		t.Errorf("the run's secret at the end: %q", tail[max(0, len(tail)-200):])
	}
}
