package envimage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/harnessfacts/harnessfacts/sandbox"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

// An image's overlay is the root of a real bwrap sandbox: the command is
// root inside and sees the image's /etc/os-release, not the node's; it may
// write anywhere (into the run's upper layer, owned by the run's host uid);
// the cached image never changes; the overlay is nosuid.
func TestOverlayIsAWritableSandboxRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting an overlay needs root")
	}
	files, err := oci.HostBinaries("sh", "cat", "id", "touch")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files,
		oci.File{Path: "/etc", Dir: true, Mode: 0o755},
		oci.File{Path: "/etc/os-release", Content: []byte("ID=envimage-overlay-test\n"), Mode: 0o644})
	reg := startRegistry(t)
	ref, _ := push(t, reg, "tasks/overlay", files)
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	img, release, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	const uid = 60119
	run := t.TempDir()
	for _, d := range []string{filepath.Dir(run), run} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	work := filepath.Join(run, "workspace")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	ov, err := Mount(img.Root, filepath.Join(run, "env"), uid, uid)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ov.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	r, err := sandbox.NewBwrapRunner(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := r.Run(context.Background(), sandbox.Spec{
		Argv: []string{"sh", "-c", `cat /etc/os-release; id -u; echo changed > /etc/os-release && touch /usr/new && echo wrote; cat /etc/os-release; echo hi > out.txt`},
		Dir:  work, Env: []string{"PATH=/usr/bin:/bin"}, ReadWrite: []string{work},
		Root: ov.Root, UID: uid, GID: uid, Stdout: &out, Stderr: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d, %v: %s", res.ExitCode, err, out.String())
	}
	want := "ID=envimage-overlay-test\n0\nwrote\nchanged\n"
	if out.String() != want {
		t.Fatalf("inside the image:\n%s\nwant:\n%s", out.String(), want)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Root, "etc/os-release")); string(b) != "ID=envimage-overlay-test\n" {
		t.Fatalf("the cached image changed: %q", b)
	}
	fi, err := os.Stat(filepath.Join(run, "env", "upper", "usr", "new"))
	if err != nil {
		t.Fatalf("the write is not in the upper layer: %v", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != uid {
		t.Fatalf("the upper layer's file is not the run's host uid's: %+v", fi.Sys())
	}
	if b, _ := os.ReadFile(filepath.Join(work, "out.txt")); strings.TrimSpace(string(b)) != "hi" {
		t.Fatalf("the workspace bind: %q", b)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, ov.Root+" ") && !strings.Contains(line, "nosuid") {
			t.Fatalf("the overlay is not nosuid: %s", line)
		}
	}
}
