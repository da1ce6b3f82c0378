//go:build unix

package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func randomToken(t testing.TB) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// processesWithMarker counts host processes whose environment holds marker.
func processesWithMarker(marker string) int {
	n := 0
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		b, err := os.ReadFile(p + "/environ")
		if err == nil && bytes.Contains(b, []byte(marker)) {
			n++
		}
	}
	return n
}

// openDir is a temporary directory that the unprivileged uid a command runs
// as can enter (t.TempDir's parent is private to root).
func openDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hf-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	return run
}
