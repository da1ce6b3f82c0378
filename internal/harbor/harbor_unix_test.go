//go:build !windows

package harbor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTaskFilesAreReadAsRegularFilesOnly: instruction.md and task.toml are
// read as the task's folders are. A link (to a file of the importing
// user's, its target absolute or relative), a device or a FIFO is refused,
// never read: a link's target became the prompt every run sends to the
// agent and the provider, /dev/zero ran the import out of memory and a
// FIFO held it for ever.
func TestTaskFilesAreReadAsRegularFilesOnly(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(secret, []byte("token: the importing user's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(p string) error{
		"a link": func(p string) error { return os.Symlink(secret, p) },
		"a relative link": func(p string) error {
			r, err := filepath.Rel(filepath.Dir(p), secret)
			if err != nil {
				return err
			}
			return os.Symlink(r, p)
		},
		"a link to a device": func(p string) error { return os.Symlink("/dev/zero", p) },
		"a FIFO":             func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		for _, file := range []string{"instruction.md", "task.toml"} {
			files := map[string]string{"instruction.md": "Do it.", "tests/test.sh": "exit 0"}
			delete(files, file)
			dir := makeTask(t, "task", files)
			if err := plant(filepath.Join(dir, file)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := Read(dir, Options{}); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), file+" is not a regular file") {
					t.Errorf("%s as %s: %v, want it refused as not a regular file", name, file, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s as %s: the import still waits after 10 s", name, file)
			}
		}
	}
}
