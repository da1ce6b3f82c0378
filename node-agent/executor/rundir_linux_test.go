package executor

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// TestGraveyardKeepsMountPointsUntilGraceOrClose: a finished run's dir
// that had a file system of its own is emptied at once and removed only
// later (fixture.RunDir.Empty says why), and Close removes what still
// waits; a dir that had no mount goes at once, as does any after Close.
func TestGraveyardKeepsMountPointsUntilGraceOrClose(t *testing.T) {
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
		d, err := f.MaterializeLimited(root, name, 1, disk)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	exists := func(d *fixture.RunDir) bool { _, err := os.Stat(d.Path); return err == nil }
	var g graveyard
	limited, plain := dir("limited", 1<<20), dir("plain", 0)
	g.bury(context.Background(), limited)
	g.bury(context.Background(), plain)
	if !exists(limited) {
		t.Error("a run dir that had a mount was removed at once")
	}
	if _, err := os.Stat(limited.Workspace()); !os.IsNotExist(err) {
		t.Errorf("the waiting run dir was not emptied: %v", err)
	}
	if exists(plain) {
		t.Error("a run dir without a mount waits")
	}
	g.close()
	if exists(limited) {
		t.Error("Close left a waiting run dir")
	}
	late := dir("late", 1<<20)
	g.bury(context.Background(), late)
	if exists(late) {
		t.Error("a run dir buried after Close waits")
	}
	g.close() // twice is allowed

	timed := graveyard{grace: 50 * time.Millisecond}
	alone := dir("alone", 1<<20)
	timed.bury(context.Background(), alone)
	for deadline := time.Now().Add(10 * time.Second); exists(alone); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a waiting run dir was not removed after its grace")
		}
	}
	timed.close()
}
