package crdschema

import (
	"bytes"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/config/crd"
	"github.com/harnessfacts/harnessfacts/internal/crdcompact"
)

// TestCompactIsTheBases: validation reads config/crd/compact, so each file
// there must be its CRD of config/crd/bases as crdcompact makes it, byte
// for byte, and every CRD must have one (else `make manifests`).
func TestCompactIsTheBases(t *testing.T) {
	bases, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil || len(bases) == 0 {
		t.Fatal(bases, err)
	}
	compact, err := fs.Glob(crd.Compact, "compact/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(compact) != len(bases) {
		t.Errorf("%d compact CRDs for %d CRDs: run make manifests", len(compact), len(bases))
	}
	for _, b := range bases {
		y, err := fs.ReadFile(crd.Bases, b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := crdcompact.Compact(y)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		c := "compact/" + strings.TrimSuffix(path.Base(b), ".yaml") + ".json"
		got, err := fs.ReadFile(crd.Compact, c)
		if err != nil || !bytes.Equal(bytes.TrimSuffix(got, []byte("\n")), want) {
			t.Errorf("%s is not %s as crdcompact makes it (%v): run make manifests", c, b, err)
		}
		if bytes.Contains(got, []byte(`"description"`)) {
			t.Errorf("%s holds a description", c)
		}
	}
}
