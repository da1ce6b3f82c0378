package evidence

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// An evidence folder handed over for verification may hold sparse files of
// many GiB. No part is read when it is larger than the receipt says (or, for
// the receipt, its digest and its envelope, than a ConfigMap holds): each is
// refused by its size, naming the part, without the memory to hold it.
func TestVerifyDirReadsNoMoreThanTheReceiptSays(t *testing.T) {
	atMost := fmt.Sprintf("more than the %d it may have: not read", MaxConfigMapBytes)
	for _, tc := range []struct{ part, want string }{
		{OutputName, "more than the 20 it may have: not read"},
		{ArtifactsDir + "/greeting.txt", "more than the 15 it may have: not read"},
		{ReceiptName, atMost},
		{EnvelopeName, atMost},
		{DigestName, atMost},
	} {
		t.Run(strings.ReplaceAll(tc.part, "/", "_"), func(t *testing.T) {
			dir, key := signedDir(t)
			if err := os.Truncate(filepath.Join(dir, filepath.FromSlash(tc.part)), 256<<20); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rep := verifyDir(t, dir, key.Public())
			runtime.ReadMemStats(&after)
			if read := after.TotalAlloc - before.TotalAlloc; read > 16<<20 {
				t.Errorf("verify allocated %d MiB for a %s of 256 MiB: it was read", read>>20, tc.part)
			}
			var found bool
			for _, p := range rep.Problems {
				found = found || p.Part == tc.part && strings.Contains(p.Detail, "268435456 bytes, "+tc.want)
			}
			if !found {
				t.Errorf("a %s of 256 MiB: problems %v, want %s: 268435456 bytes, ... %s", tc.part, rep.Problems, tc.part, tc.want)
			}
		})
	}
}

// A receipt that lists one stored artifact many times had each entry read
// and hashed again (800 KB of folder, 6 GB hashed): an artifact listed
// twice is a problem and read once, and a receipt listing more artifacts
// than a fixture may ask for is refused before any is read. The error
// names the first few problems, not all of them.
func TestVerifyReadsEachListedArtifactOnce(t *testing.T) {
	for _, tc := range []struct {
		copies int
		want   string
	}{
		{2, "listed more than once in the receipt"},
		{7000, "lists 7000 artifacts, more than the 64 a fixture may ask for: none was read"},
	} {
		dir, _ := signedDir(t)
		raw, err := os.ReadFile(filepath.Join(dir, ReceiptName))
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseReceipt(raw)
		if err != nil {
			t.Fatal(err)
		}
		many := make([]Artifact, tc.copies)
		for i := range many {
			many[i] = r.Artifacts[0]
		}
		r.Artifacts = many
		if raw, err = r.Canonical(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ReceiptName), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, DigestName), []byte(Sum(raw)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rep := verifyDir(t, dir)
		var found bool
		for _, p := range rep.Problems {
			found = found || strings.Contains(p.Detail, tc.want)
		}
		if !found {
			t.Errorf("%d copies: problems %v, want %q", tc.copies, rep.Problems, tc.want)
		}
		if err := rep.Err(); err == nil || strings.Count(err.Error(), "; ") > maxProblemsNamed {
			t.Errorf("%d copies: the error names more than %d problems: %v", tc.copies, maxProblemsNamed, err)
		}
	}
}
