package evidence

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/test/oci"
)

// Stored evidence is fetched from a registry that is not trusted. Each part
// is bounded by what a ConfigMap holds, but a manifest may name many parts:
// here 48 titles over one blob just under that bound, which the registry
// stores once. Pull must refuse them by what the manifest says, before it
// holds more than any evidence is (every part together fits a ConfigMap),
// not fetch 45 MiB (or, with a manifest of 100 MiB, hundreds of GiB).
func TestPullHoldsNoMoreThanEvidenceCan(t *testing.T) {
	reg, err := oci.StartRegistry("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	part := bytes.Repeat([]byte("x"), maxStoredPart-1024)
	files := map[string][]byte{}
	for i := range 48 {
		files[fmt.Sprintf("artifacts/a%02d", i)] = part
	}
	img, err := Image(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reg.Push(context.Background(), img, "evidence/bomb", "v1")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := Pull(context.Background(), ref)
	runtime.ReadMemStats(&after)
	if read := after.TotalAlloc - before.TotalAlloc; read > 8<<20 {
		t.Errorf("Pull allocated %d MiB for parts that together are more than any evidence", read>>20)
	}
	if err == nil || !strings.Contains(err.Error(), "more than any evidence holds") {
		n := 0
		for _, b := range got {
			n += len(b)
		}
		t.Errorf("Pull of 48 parts of %d bytes: %d bytes in %d parts, error %v; want a refusal", len(part), n, len(got), err)
	}

	// Parts more than any evidence has, each empty: refused by their count.
	files = map[string][]byte{}
	for i := range maxStoredParts + 1 {
		files[fmt.Sprintf("artifacts/e%03d", i)] = nil
	}
	if img, err = Image(files, nil); err != nil {
		t.Fatal(err)
	}
	if ref, err = reg.Push(context.Background(), img, "evidence/many", "v1"); err != nil {
		t.Fatal(err)
	}
	if got, err := Pull(context.Background(), ref); err == nil || !strings.Contains(err.Error(), "parts, more than any evidence holds") {
		t.Errorf("Pull of %d empty parts: %d parts, error %v; want a refusal", maxStoredParts+1, len(got), err)
	}
}
