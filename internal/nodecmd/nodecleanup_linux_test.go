package nodecmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// makeRunDir makes a run dir with its owner lock file, as a node-agent
// does, and returns the lock file's path.
func makeRunDir(t *testing.T, root, name string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workspace", "out.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, fixture.LockFileName)
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return lock
}

// After helm uninstall: the run dirs a killed node-agent left, the run root
// and its parent (the kubelet made both for the hostPath) are removed.
func TestNodeCleanupRemovesRunDirsAndTheRoot(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "harnessfacts")
	root := filepath.Join(parent, "runs")
	makeRunDir(t, root, fixture.RunDirPrefix+"killed-1-000000000000")
	var out bytes.Buffer
	if err := cleanupNode(context.Background(), &out, root, time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, p := range []string{root, parent} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left:\n%s", p, out.String())
		}
	}
}

// A run dir still held (a node-agent still stopping) is waited for, and
// after --wait it is an error that says so; what is not a run dir stays.
func TestNodeCleanupWaitsForHeldRunDirsAndKeepsOthers(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "harnessfacts")
	root := filepath.Join(parent, "runs")
	lock := makeRunDir(t, root, fixture.RunDirPrefix+"running-1-000000000000")
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = cleanupNode(context.Background(), &out, root, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("a held run dir: %v", err)
	}
	// The node-agent stops (its lock goes) while the cleanup waits.
	go func() { time.Sleep(1500 * time.Millisecond); _ = f.Close() }()
	if err := os.WriteFile(filepath.Join(root, "operator-notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := cleanupNode(context.Background(), &out, root, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(root, fixture.RunDirPrefix+"running-1-000000000000")); err == nil {
		t.Errorf("the run dir is left once its lock was released:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "operator-notes.txt")); err != nil || !strings.Contains(out.String(), "operator-notes.txt") {
		t.Errorf("a file that is no run dir must stay, and be named: %v\n%s", err, out.String())
	}
}

// The node-agent's image cache and the node's signing key go too: after
// helm uninstall, nothing of it is on the host, a private key least of all.
// A file the operator put beside the key stays, and keeps its folder.
func TestNodeCleanupRemovesTheImageCacheAndTheSigningKey(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "harnessfacts")
	root := filepath.Join(parent, "runs")
	keys := filepath.Join(parent, "keys")
	makeRunDir(t, root, fixture.RunDirPrefix+"killed-1-000000000000")
	for _, f := range []string{filepath.Join(root, imageCache, "0123abcd", "rootfs", "etc", "os-release"),
		filepath.Join(root, executor.FixtureCacheDir, "89ef", "fixture.tar"),
		filepath.Join(keys, "evidence-key.pem"), filepath.Join(keys, ".evidence-key-123")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := removeEvidenceKey(&out, keys); err != nil {
		t.Fatal(err)
	}
	if err := cleanupNode(context.Background(), &out, root, time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if _, err := os.Stat(parent); err == nil {
		t.Fatalf("%s is left:\n%s", parent, out.String())
	}

	// An operator's own file beside the key is not the node-agent's.
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"evidence-key.pem", "operator-backup.pem"} {
		if err := os.WriteFile(filepath.Join(keys, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := removeEvidenceKey(&out, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(keys, "evidence-key.pem")); err == nil {
		t.Errorf("the key is left:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(keys, "operator-backup.pem")); err != nil {
		t.Errorf("the operator's file is gone: %v\n%s", err, out.String())
	}
}
