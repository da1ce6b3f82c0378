//go:build linux

package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIBinaryAsTheSandboxSeesIt: the command is found where the sandbox
// finds it (the image's PATH inside its root, the workspace for a relative
// path, links resolved there and not on the node), and digested only where
// the sandbox could read it: a file only root reads and a pseudo-file get
// no digest, so the receipt is no oracle on the node's files.
func TestCLIBinaryAsTheSandboxSeesIt(t *testing.T) {
	dir := t.TempDir()
	// t.TempDir's folders are 0700: the node's folders of a CLI are not.
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := &Executor{opts: Options{Hidden: []string{filepath.Join(dir, "hidden")}}}
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
	inPrivate := write(filepath.Join(dir, "private", "tool"), 0o755, "in a private folder")
	if err := os.Chmod(filepath.Dir(inPrivate), 0o700); err != nil {
		t.Fatal(err)
	}
	inHidden := write(filepath.Join(dir, "hidden", "tool"), 0o755, "in a hidden folder")
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
		{"a node file all may read in a private folder", inPrivate, node, inPrivate, ""},
		{"a node file in a folder the sandbox hides", inHidden, node, inHidden, ""},
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
