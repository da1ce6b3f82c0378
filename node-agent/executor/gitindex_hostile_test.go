//go:build unix

package executor

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The agent's .git/index cannot hold the node-agent before the checks: a
// FIFO (open(2) waited for a writer for good), a sparse file of 8 TiBs
// with an empty extension header (read eight bytes at a time for ever), an
// entry count the file cannot hold, a config of 8 TiBs read for the
// hash length. Each is judged within seconds; a real index still works.
func TestHostileGitIndexEndsQuickly(t *testing.T) {
	header := func(count uint32) []byte {
		b := []byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x00")
		binary.BigEndian.PutUint32(b[8:], count)
		return b
	}
	sparse := func(t *testing.T, p string, b []byte) {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 1<<43); err != nil {
			t.Skipf("no sparse file of 8 TiB here: %v", err)
		}
	}
	cases := []struct {
		name    string
		plant   func(t *testing.T, gitdir string)
		wantErr bool
	}{
		{"a FIFO as the index", func(t *testing.T, gitdir string) {
			if err := syscall.Mkfifo(filepath.Join(gitdir, "index"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a sparse index of an 8 TiB, no entries", func(t *testing.T, gitdir string) {
			sparse(t, filepath.Join(gitdir, "index"), header(0))
		}, true},
		{"a sparse index of an 8 TiB, 4 billion entries", func(t *testing.T, gitdir string) {
			sparse(t, filepath.Join(gitdir, "index"), header(1<<32-1))
		}, true},
		{"more entries than bytes", func(t *testing.T, gitdir string) {
			if err := os.WriteFile(filepath.Join(gitdir, "index"), append(header(1<<20), make([]byte, 4096)...), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"empty extension headers to the end", func(t *testing.T, gitdir string) {
			if err := os.WriteFile(filepath.Join(gitdir, "index"), append(header(0), make([]byte, 64<<20)...), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a sparse config of an 8 TiB", func(t *testing.T, gitdir string) {
			sparse(t, filepath.Join(gitdir, "config"), []byte("[core]\n"))
		}, false},
		{"a sharedindex FIFO", func(t *testing.T, gitdir string) {
			b := append(header(0), []byte("link\x00\x00\x00\x14")...)
			raw := make([]byte, 20)
			for i := range raw {
				raw[i] = byte(i + 1)
			}
			b = append(b, raw...)
			oid := "0102030405060708090a0b0c0d0e0f1011121314"
			if err := os.WriteFile(filepath.Join(gitdir, "index"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(gitdir, "sharedindex."+oid), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	// A thousand nested repositories, each with a sparse index of a
	// gigabyte of zeros that fits every bound of its own: their sum is
	// bounded (three are enough to pass it).
	entry := func(name string) []byte {
		e := make([]byte, 62)
		binary.BigEndian.PutUint32(e[24:28], 0o160000)
		binary.BigEndian.PutUint16(e[60:62], uint16(len(name)))
		e = append(e, name...)
		return append(e, make([]byte, 8-(62+len(name))%8)...)
	}
	cases = append(cases, struct {
		name    string
		plant   func(t *testing.T, gitdir string)
		wantErr bool
	}{"gitlinks whose sparse indexes add up", func(t *testing.T, gitdir string) {
		top := header(3)
		for i := range 3 {
			top = append(top, entry(fmt.Sprintf("r%d", i))...)
		}
		if err := os.WriteFile(filepath.Join(gitdir, "index"), top, 0o644); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			sub := filepath.Join(filepath.Dir(gitdir), fmt.Sprintf("r%d", i), ".git")
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			const size = maxGitIndexes/2 + 4096
			if err := os.WriteFile(filepath.Join(sub, "index"), header(uint32((size-12)/64)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(sub, "index"), size); err != nil {
				t.Fatal(err)
			}
		}
	}, true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			gitRepo(t, ws)
			gitdir := filepath.Join(ws, ".git")
			if err := os.Remove(filepath.Join(gitdir, "index")); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, gitdir)
			done := make(chan error, 1)
			go func() {
				_, err := sanitizeGitConfig(ws)
				done <- err
			}()
			select {
			case err := <-done:
				t.Logf("err: %v", err)
				if (err != nil) != tc.wantErr {
					t.Errorf("err %v, want an error: %v", err, tc.wantErr)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("sanitizeGitConfig still reads the agent's index after 20 s")
			}
		})
	}
	// A FIFO swapped in after the Lstat (by a process the agent left
	// behind) is opened without waiting for a writer, and refused.
	t.Run("a FIFO opened as a regular file", func(t *testing.T) {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, "index"), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		done := make(chan error, 1)
		go func() {
			f, err := openRegular(root, "index")
			if err == nil {
				_ = f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Error("a FIFO was opened as a regular file")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("opening a FIFO still waits for a writer after 20 s")
		}
	})
	// A real index (with a gitlink) is still read.
	ws := t.TempDir()
	gitRepo(t, ws)
	if code, out := gitIn(t, ws, "update-index", "--add", "--cacheinfo", "160000,0123456789abcdef0123456789abcdef01234567,sub"); code != 0 {
		t.Fatal(out)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	links, err := gitlinksIn(root, ".git", new(int64(maxGitIndexes)))
	if err != nil || len(links) != 1 || links[0] != "sub" {
		t.Errorf("a real index: gitlinks %v, err %v", links, err)
	}
}
