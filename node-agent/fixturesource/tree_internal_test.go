package fixturesource

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// store encodes o into st and returns its hash.
func store(t *testing.T, st *memory.Storage, o interface {
	Encode(plumbing.EncodedObject) error
}) plumbing.Hash {
	t.Helper()
	enc := st.NewEncodedObject()
	if err := o.Encode(enc); err != nil {
		t.Fatal(err)
	}
	h, err := st.SetEncodedObject(enc)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func blob(t *testing.T, st *memory.Storage, s string) plumbing.Hash {
	t.Helper()
	o := st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, err := o.Writer()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	h, err := st.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTreesGitDoesNotWriteAreRefused: a tree with an entry twice, or an
// entry named with a slash beside the folder it names, is what no git
// writes but a plain git server accepts (hash-object --literally). Git
// and every web view of the commit take the first entry; the node-agent
// read the last, so the fixture that ran (a check of `true`, an expected
// answer of the agent's choosing) was not the one a reviewer of the pinned
// commit saw. Such a tree is refused.
func TestTreesGitDoesNotWriteAreRefused(t *testing.T) {
	cases := map[string]func(st *memory.Storage) []object.TreeEntry{
		"an entry twice": func(st *memory.Storage) []object.TreeEntry {
			return []object.TreeEntry{
				{Name: "fixture.yaml", Mode: filemode.Regular, Hash: blob(t, st, "prompt: reviewed\n")},
				{Name: "fixture.yaml", Mode: filemode.Regular, Hash: blob(t, st, "prompt: unreviewed\n")},
			}
		},
		"a name with a slash beside its folder": func(st *memory.Storage) []object.TreeEntry {
			tests := store(t, st, &object.Tree{Entries: []object.TreeEntry{{Name: "expected.txt", Mode: filemode.Regular, Hash: blob(t, st, "GOOD\n")}}})
			return []object.TreeEntry{
				{Name: "fixture.yaml", Mode: filemode.Regular, Hash: blob(t, st, "prompt: p\n")},
				{Name: "tests", Mode: filemode.Dir, Hash: tests},
				{Name: "tests/expected.txt", Mode: filemode.Regular, Hash: blob(t, st, "EVIL\n")},
			}
		},
		"a file and a folder of one name": func(st *memory.Storage) []object.TreeEntry {
			sub := store(t, st, &object.Tree{Entries: []object.TreeEntry{{Name: "a", Mode: filemode.Regular, Hash: blob(t, st, "x\n")}}})
			return []object.TreeEntry{
				{Name: "fixture.yaml", Mode: filemode.Regular, Hash: blob(t, st, "prompt: p\n")},
				{Name: "workspace", Mode: filemode.Regular, Hash: blob(t, st, "y\n")},
				{Name: "workspace", Mode: filemode.Dir, Hash: sub},
			}
		},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			st := memory.NewStorage()
			root := store(t, st, &object.Tree{Entries: entries(st)})
			when := object.Signature{Name: "a", When: time.Unix(0, 0)}
			commit, err := object.GetCommit(st, store(t, st, &object.Commit{Author: when, Committer: when, TreeHash: root, Message: "m"}))
			if err != nil {
				t.Fatal(err)
			}
			files, err := readTree(context.Background(), st, commit, Git{URL: "https://git.test/r", Commit: commit.Hash.String()}, fixture.Limits{})
			if !errors.Is(err, fixture.ErrBadSource) {
				t.Fatalf("read %d files (%v), want the tree refused as a bad source", len(files), err)
			}
		})
	}
	// A tree git writes is read.
	st := memory.NewStorage()
	root := store(t, st, &object.Tree{Entries: []object.TreeEntry{{Name: "fixture.yaml", Mode: filemode.Regular, Hash: blob(t, st, "prompt: p\n")}}})
	when := object.Signature{Name: "a", When: time.Unix(0, 0)}
	commit, err := object.GetCommit(st, store(t, st, &object.Commit{Author: when, Committer: when, TreeHash: root, Message: "m"}))
	if err != nil {
		t.Fatal(err)
	}
	if files, err := readTree(context.Background(), st, commit, Git{Commit: commit.Hash.String()}, fixture.Limits{}); err != nil || string(files["fixture.yaml"]) != "prompt: p\n" {
		t.Errorf("a plain tree: %v, %q", err, files)
	}
}
