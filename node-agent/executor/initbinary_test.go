package executor

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestInitBinaryBeside: the small init program is used only when an
// executable file of that name lies beside the harnessfacts binary.
func TestInitBinaryBeside(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the executable bit is a unix check")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "harnessfacts")
	init := filepath.Join(dir, InitBinaryName)
	if got := InitBinaryBeside(exe); got != exe {
		t.Errorf("nothing beside: %s, want the binary itself", got)
	}
	if err := os.Mkdir(init, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := InitBinaryBeside(exe); got != exe {
		t.Errorf("a folder of that name: %s, want the binary itself", got)
	}
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(init, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := InitBinaryBeside(exe); got != exe {
		t.Errorf("a file that is not executable: %s, want the binary itself", got)
	}
	if err := os.Chmod(init, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := InitBinaryBeside(exe); got != init {
		t.Errorf("the init program beside: %s, want %s", got, init)
	}
}
