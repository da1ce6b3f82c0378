package artifacts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type setup func(t *testing.T, ws string)

func file(name, content string) setup {
	return func(t *testing.T, ws string) {
		p := filepath.Join(ws, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func TestCollect(t *testing.T) {
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("host secret"), 0o644))
	tests := []struct {
		name     string
		setup    []setup
		path     string
		want     string // collected content, when collected
		rejected string // a part of the reason, when rejected
	}{
		{name: "regular file", setup: []setup{file("out/result.txt", "done\n")}, path: "out/result.txt", want: "done\n"},
		{name: "empty file", setup: []setup{file("empty", "")}, path: "empty", want: ""},
		{name: "symlink to /etc/passwd", setup: []setup{func(t *testing.T, ws string) {
			must(t, os.Symlink("/etc/passwd", filepath.Join(ws, "passwd")))
		}}, path: "passwd", rejected: "symbolic link"},
		{name: "symlink inside the workspace", setup: []setup{file("real", "x"), func(t *testing.T, ws string) {
			must(t, os.Symlink("real", filepath.Join(ws, "alias")))
		}}, path: "alias", rejected: "symbolic link"},
		{name: "symlinked parent directory", setup: []setup{func(t *testing.T, ws string) {
			must(t, os.Symlink(outside, filepath.Join(ws, "dir")))
		}}, path: "dir/secret.txt", rejected: `folder "dir" is a symbolic link`},
		{name: "hard link", setup: []setup{func(t *testing.T, ws string) {
			must(t, os.Link(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "hard")))
		}}, path: "hard", rejected: "2 hard links"},
		{name: "too large", setup: []setup{file("big", strings.Repeat("x", 101))}, path: "big", rejected: "too large: 101 bytes"},
		{name: "FIFO", setup: []setup{func(t *testing.T, ws string) {
			mkfifo(t, filepath.Join(ws, "pipe"))
		}}, path: "pipe", rejected: "not a regular file (a FIFO)"},
		{name: "directory", setup: []setup{file("d/x", "")}, path: "d", rejected: "not a regular file (a directory)"},
		{name: "dot-dot", path: "../x", rejected: "outside the workspace"},
		{name: "dot-dot inside", setup: []setup{file("a/x", "")}, path: "a/../../x", rejected: "outside the workspace"},
		{name: "absolute", path: "/etc/passwd", rejected: "outside the workspace"},
		{name: "missing", path: "nothing.txt", rejected: "missing"},
		{name: "file as a parent", setup: []setup{file("f", "")}, path: "f/x", rejected: "not a directory"},
	}
	openers := map[string]opener{"default": openBeneath, "portable": openPortable}
	for oname, open := range openers {
		for _, tc := range tests {
			t.Run(oname+"/"+tc.name, func(t *testing.T) {
				ws := t.TempDir()
				for _, s := range tc.setup {
					s(t, ws)
				}
				done := make(chan []Result, 1)
				go func() { done <- collect(ws, []string{tc.path}, Options{MaxBytes: 100}, open) }()
				var res []Result
				select {
				case res = <-done:
				case <-time.After(10 * time.Second):
					// A FIFO opened for reading without O_NONBLOCK waits for
					// a writer forever; unblock it so the test can end.
					if f, err := os.OpenFile(filepath.Join(ws, tc.path), os.O_WRONLY, 0); err == nil {
						f.Close()
					}
					t.Fatal("Collect blocked")
				}
				r := res[0]
				if tc.rejected != "" {
					if !strings.Contains(r.Rejected, tc.rejected) {
						t.Fatalf("rejected = %q, want a reason with %q", r.Rejected, tc.rejected)
					}
					if r.Data != nil || r.SHA256 != "" {
						t.Fatal("a rejected artifact has content or a digest")
					}
					return
				}
				if r.Rejected != "" {
					t.Fatalf("rejected: %s", r.Rejected)
				}
				sum := sha256.Sum256([]byte(tc.want))
				if string(r.Data) != tc.want || r.Size != int64(len(tc.want)) || r.SHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("collected %q size %d sha %s", r.Data, r.Size, r.SHA256)
				}
				st := r.Status()
				if st.Path != tc.path || st.SHA256 != r.SHA256 || st.Rejected != "" {
					t.Fatalf("status = %+v", st)
				}
			})
		}
	}
}

func TestCollectRefusesASymlinkedWorkspace(t *testing.T) {
	target := t.TempDir()
	must(t, os.WriteFile(filepath.Join(target, "a"), []byte("x"), 0o644))
	link := filepath.Join(t.TempDir(), "workspace")
	must(t, os.Symlink(target, link))
	for name, open := range map[string]opener{"default": openBeneath, "portable": openPortable} {
		r := collect(link, []string{"a"}, Options{MaxBytes: 10}, open)[0]
		if !strings.Contains(r.Rejected, "workspace folder") {
			t.Errorf("%s: rejected = %q, want the workspace link refused", name, r.Rejected)
		}
	}
}

func TestCollectRedactsBeforeHashing(t *testing.T) {
	ws := t.TempDir()
	must(t, os.WriteFile(filepath.Join(ws, "log"), []byte("key=s3cr3t\n"), 0o644))
	red := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("s3cr3t"), []byte("[REDACTED]")) }
	r := Collect(ws, []string{"log", "log2"}, Options{MaxBytes: 100, Redact: red})
	sum := sha256.Sum256([]byte("key=[REDACTED]\n"))
	if string(r[0].Data) != "key=[REDACTED]\n" || r[0].SHA256 != hex.EncodeToString(sum[:]) || !r[0].Redacted {
		t.Fatalf("result = %+v", r[0])
	}
	if len(r) != 2 || r[1].Path != "log2" || r[1].Rejected == "" {
		t.Fatalf("every requested path has a result in order: %+v", r)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
