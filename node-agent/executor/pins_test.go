//go:build linux

package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestCLIDigestOfWhatEverySandboxCovers: a node file all may read in a
// folder every sandbox covers (/run, /tmp: sandboxMasks) is no file the
// agent could read, so it is not digested, unless it is in one of the
// adapter's CLI folders, which the sandbox binds over the cover; and a
// hidden folder is hidden by the path its links lead to as well (the
// sandbox hides /var/run/secrets, which is /run/secrets on most nodes).
func TestCLIDigestOfWhatEverySandboxCovers(t *testing.T) {
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, body string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	covered := write("run/state/tool", "a covered file")
	cli := write("run/cli/agent", "the adapter's CLI")
	token := write("srv/secrets/token", "a token")
	if err := os.Symlink("srv", filepath.Join(dir, "varsrv")); err != nil {
		t.Fatal(err)
	}
	e := &Executor{opts: Options{Hidden: []string{filepath.Join(dir, "varsrv", "secrets")}}, masked: []string{filepath.Join(dir, "run")}}
	v := cliView{pathDirs: []string{filepath.Dir(cli)}}
	sum := sha256.Sum256([]byte("the adapter's CLI"))
	for _, c := range []struct {
		name, argv0, digest string
	}{
		{"in a covered folder", covered, ""},
		{"in a CLI folder bound over the cover", cli, "sha256:" + hex.EncodeToString(sum[:])},
		{"in a hidden folder named through a link", token, ""},
	} {
		if _, d := e.cliBinary(c.argv0, v); d != c.digest {
			t.Errorf("%s: digest %q, want %q", c.name, d, c.digest)
		}
	}
}

// TestCLIBinaryDigestsOnlyWhatItChecked: the checks and the read are of
// one file. A user of the node who owns a folder all may search swaps the
// command named (a world-readable decoy, which every check passes) for a
// link to a file only root reads, or for a FIFO, between the checks and the
// read: the receipt must never carry the private file's digest, and the
// node-agent never block on the FIFO.
func TestCLIBinaryDigestsOnlyWhatItChecked(t *testing.T) {
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root's only"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("root's only"))
	secretDigest := "sha256:" + hex.EncodeToString(sum[:])
	sum = sha256.Sum256([]byte("a decoy"))
	decoyDigest := "sha256:" + hex.EncodeToString(sum[:])
	cmd, other := filepath.Join(dir, "tool"), filepath.Join(dir, "swap")
	if err := os.WriteFile(cmd, []byte("a decoy"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func() error
	}{
		{"a link to a file only root reads", func() error { return os.Symlink(secret, other) }},
		{"a FIFO", func() error { return unix.Mkfifo(other, 0o666) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(other)
			if err := c.make(); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			swapped := make(chan struct{})
			go func() {
				defer close(swapped)
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = unix.Renameat2(unix.AT_FDCWD, cmd, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE)
				}
			}()
			done := make(chan string)
			decoys := 0
			go func() {
				defer close(done)
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
					e := &Executor{} // no cache: the decoy's owner changes its time at will
					switch _, d := e.cliBinary(cmd, cliView{}); d {
					case secretDigest:
						done <- d
						return
					case decoyDigest:
						decoys++
					}
				}
			}()
			select {
			case d, ok := <-done:
				if ok {
					t.Errorf("the receipt's digest is of the file only root reads: %s", d)
				}
			case <-time.After(10 * time.Second):
				t.Error("cliBinary blocked (opening a FIFO swapped in after its checks)")
			}
			close(stop)
			<-swapped
			if decoys == 0 && !t.Failed() {
				t.Error("the decoy was never digested: the test shows nothing")
			}
			// Whatever still waits on the FIFO is let go.
			if f, err := os.OpenFile(cmd, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
			if f, err := os.OpenFile(other, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
			// Put the decoy back where the command is.
			if st, err := os.Lstat(cmd); err == nil && !st.Mode().IsRegular() {
				_ = unix.Renameat2(unix.AT_FDCWD, cmd, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE)
			}
		})
	}
}
