package main

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestMain lets the test binary be harnessfacts itself: a copy named
// "harnessfacts" (see harnessfactsBinary) runs main, so tests can run the
// real commands, sandbox-init included, as separate processes without
// building the binary again.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "harnessfacts" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if binaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
	os.Exit(code)
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// harnessfactsBinary is a copy of the test binary named harnessfacts in a
// folder every uid may enter (the sandboxed agent's user runs it as
// sandbox-init); it is removed when the tests end.
func harnessfactsBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		var dir string
		if dir, binaryErr = os.MkdirTemp("", "hf-cmd-test-"); binaryErr != nil {
			return
		}
		if binaryErr = os.Chmod(dir, 0o755); binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(dir, "harnessfacts")
		binaryErr = copyExecutable(binaryPath)
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
