package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A dynamically linked init program is refused, with what to do, only where
// the environment image lacks its loader; a static one, or a run on the
// node's own root, is never refused.
func TestInitBinaryLoaderInTheImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ELF programs: linux")
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "harnessfacts-sandbox-init")
	build := exec.Command("go", "build", "-o", static, "github.com/harnessfacts/harnessfacts/cmd/harnessfacts-sandbox-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if got := elfInterpreter(static); got != "" {
		t.Fatalf("a CGO_ENABLED=0 build names a loader: %q", got)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	interp := elfInterpreter(sh)
	if !strings.HasPrefix(interp, "/") || !strings.Contains(interp, "ld") {
		t.Fatalf("%s's loader: %q, want a path like /lib64/ld-linux-x86-64.so.2", sh, interp)
	}
	if got := elfInterpreter(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("a missing file names a loader: %q", got)
	}
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := elfInterpreter(notELF); got != "" {
		t.Errorf("a script names a loader: %q", got)
	}

	musl := t.TempDir() // an image without the node's loader
	glibc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(glibc, filepath.Dir(interp)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(glibc, interp), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	// Debian's loader is an absolute symlink, resolved in the image.
	linked := t.TempDir()
	target := filepath.Join("/usr/lib/x86_64-linux-gnu", filepath.Base(interp))
	if err := os.MkdirAll(filepath.Join(linked, filepath.Dir(target)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(linked, target), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(linked, filepath.Dir(interp)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(linked, interp)); err != nil {
		t.Fatal(err)
	}
	// An image's link to a path only the node has is not the loader.
	escaping := t.TempDir()
	if err := os.MkdirAll(filepath.Join(escaping, filepath.Dir(interp)), 0o755); err != nil {
		t.Fatal(err)
	}
	onNode, err := filepath.EvalSymlinks(interp) // the node's loader file
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(onNode, filepath.Join(escaping, interp)); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{musl, escaping} {
		err = initLoaderProblem("/opt/hf/harnessfacts-sandbox-init", interp, root)
		if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") || !strings.Contains(err.Error(), interp) {
			t.Errorf("dynamic init, image %s without its loader: %v", root, err)
		}
	}
	for _, tc := range []struct{ interp, root string }{
		{interp, glibc},  // the image has the loader
		{interp, linked}, // through the image's own link
		{"", musl},       // static
		{interp, ""},     // the node's own root
	} {
		if err := initLoaderProblem("/opt/hf/harnessfacts-sandbox-init", tc.interp, tc.root); err != nil {
			t.Errorf("interp %q root %q: %v", tc.interp, tc.root, err)
		}
	}
}

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
