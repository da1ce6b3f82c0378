package runcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvidenceDirIsCheckedBeforeTheRun: where the evidence goes is judged
// before the agent runs (runLocal calls evidenceDirUsable after reading
// the run file). Found unusable only afterwards, a finished run's status
// and evidence were lost.
func TestEvidenceDirIsCheckedBeforeTheRun(t *testing.T) {
	base := t.TempDir()
	full := filepath.Join(base, "full")
	if err := os.MkdirAll(filepath.Join(full, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		full:                          "is not empty",
		file:                          "not a directory",
		empty:                         "",
		filepath.Join(base, "absent"): "",
	} {
		err := evidenceDirUsable(dir, "hello")
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("--evidence %s: %v, want %q", dir, err, want)
		}
	}
}
