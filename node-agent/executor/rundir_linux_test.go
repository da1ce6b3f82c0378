package executor

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// TestGraveyardKeepsMountPointsWhileSandboxesStart: a finished run's dir
// that had a file system of its own is emptied at once; its mount point
// goes at once when no sandbox of the executor is starting, else once those
// that were starting have returned or are past their setup (fixture.RunDir.
// Empty says why), and Close removes what still waits. A dir that had no
// mount goes at once, as does any after Close.
func TestGraveyardKeepsMountPointsWhileSandboxesStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it mounts run dirs' tmpfs (run `go test` as root, as CI does)")
	}
	f, err := fixture.FromInline(map[string]string{"fixture.yaml": "prompt: do it\n", "workspace/a": "x"}, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := func(name string, disk int64) *fixture.RunDir {
		t.Helper()
		d, err := f.MaterializeLimited(root, disk)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	exists := func(d *fixture.RunDir) bool { _, err := os.Stat(d.Path); return err == nil }
	gone := func(d *fixture.RunDir, why string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); exists(d); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the run dir is still there", why)
			}
		}
	}
	ctx := context.Background()
	var g graveyard

	alone := dir("alone", 1<<20)
	g.bury(ctx, alone)
	if exists(alone) {
		t.Error("with no sandbox starting, a run dir that had a mount waits")
	}

	done := g.sandbox()
	limited, plain := dir("limited", 1<<20), dir("plain", 0)
	g.bury(ctx, limited)
	g.bury(ctx, plain)
	if !exists(limited) {
		t.Error("a run dir that had a mount was removed while a sandbox was starting")
	}
	if _, err := os.Stat(limited.Workspace()); !os.IsNotExist(err) {
		t.Errorf("the waiting run dir was not emptied: %v", err)
	}
	if exists(plain) {
		t.Error("a run dir without a mount waits")
	}
	time.Sleep(5 * pollEvery)
	if !exists(limited) {
		t.Error("the run dir went while the sandbox that was starting still ran")
	}
	later := g.sandbox() // started after the unmount: not waited for
	done()
	gone(limited, "after the starting sandbox returned")

	long := graveyard{bound: time.Second}
	slow := dir("slow", 1<<20)
	_ = long.sandbox() // never returns: a long agent
	long.bury(ctx, slow)
	if !exists(slow) {
		t.Error("a run dir that had a mount was removed while a sandbox was starting")
	}
	gone(slow, "after the sandbox was past its setup")
	long.close()

	waits := dir("waits", 1<<20)
	// A sandbox of its own, begun just now: later has run for over a
	// second by here, and a stalled machine could take it past the bound.
	starting := g.sandbox()
	g.bury(ctx, waits)
	if !exists(waits) {
		t.Error("a run dir that had a mount was removed while a sandbox was starting")
	}
	g.close()
	if exists(waits) {
		t.Error("Close left a waiting run dir")
	}
	after := dir("after", 1<<20)
	g.bury(ctx, after)
	if exists(after) {
		t.Error("a run dir buried after Close waits")
	}
	later()
	starting()
	g.close() // twice is allowed
}
