//go:build linux

package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestCLIBinaryAsTheSandboxSeesIt: the command is found where the sandbox
// finds it (the image's PATH inside its root, the workspace for a relative
// path, links resolved there and not on the node), and digested only where
// the sandbox could read it: a file only root reads and a pseudo-file get
// no digest, so the receipt is no oracle on the node's files.
func TestCLIBinaryAsTheSandboxSeesIt(t *testing.T) {
	e := &Executor{}
	dir := t.TempDir()
	write := func(p string, mode os.FileMode, body string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	digest := func(body string) string {
		s := sha256.Sum256([]byte(body))
		return "sha256:" + hex.EncodeToString(s[:])
	}
	secret := write(filepath.Join(dir, "node", "secret"), 0o600, "root's only")
	public := write(filepath.Join(dir, "node", "tool"), 0o755, "#!/bin/sh\n")
	root := filepath.Join(dir, "image")
	write(filepath.Join(root, "usr", "bin", "tool"), 0o755, "the image's tool")
	if err := os.Symlink(secret, filepath.Join(root, "usr", "bin", "evil")); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "workspace")
	write(filepath.Join(ws, "run.sh"), 0o755, "the workspace's script")
	if err := os.Symlink(secret, filepath.Join(ws, "link.sh")); err != nil {
		t.Fatal(err)
	}
	node := cliView{path: []string{filepath.Dir(public)}, workdir: ws}
	image := cliView{path: []string{"/usr/bin"}, root: root, workdir: ws}
	for _, c := range []struct {
		name, argv0   string
		v             cliView
		shown, digest string
	}{
		{"a node file all may read", public, node, public, digest("#!/bin/sh\n")},
		{"on the node's PATH", "tool", node, public, digest("#!/bin/sh\n")},
		{"a node file only root reads", secret, node, secret, ""},
		{"a pseudo-file", "/proc/self/status", node, "", ""},
		{"in the image's PATH", "tool", image, "/usr/bin/tool", digest("the image's tool")},
		{"an absolute path in the image", "/usr/bin/tool", image, "/usr/bin/tool", digest("the image's tool")},
		{"an image's link to the node's file", "evil", image, "", ""},
		{"relative, in the workspace", "./run.sh", node, filepath.Join(ws, "run.sh"), digest("the workspace's script")},
		{"a workspace link to the node's file", "./link.sh", node, "", ""},
	} {
		shown, d := e.cliBinary(c.argv0, c.v)
		if d != c.digest || c.shown != "" && shown != c.shown {
			t.Errorf("%s: cliBinary(%q) = %q, %q; want %q, %q", c.name, c.argv0, shown, d, c.shown, c.digest)
		}
	}
}
