package evidence

import (
	"strings"
	"testing"
)

func cmSize(data map[string]string, bin map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	for k, v := range bin {
		n += len(k) + len(v)
	}
	return n
}

func TestConfigMapAlwaysFits(t *testing.T) {
	big := func(c string, n int) string { return strings.Repeat(c, n) }
	tests := []struct {
		name           string
		output         string
		arts           []string
		wantLogCut     bool
		wantDropped    int // artifacts whose content is left out
		wantLogAtLeast int
	}{
		{name: "small", output: "ok\n", arts: []string{"a"}, wantDropped: 0},
		{name: "log cut before artifacts", output: big("l", 400<<10), arts: []string{big("a", 300<<10), big("b", 300<<10)}, wantLogCut: true, wantLogAtLeast: minLog},
		{name: "huge log and artifacts", output: big("l", 3<<20), arts: []string{big("a", 400<<10), big("b", 500<<10), big("c", 10)}, wantLogCut: true, wantDropped: 1, wantLogAtLeast: minLog},
		{name: "artifacts alone too big", output: "ok\n", arts: []string{big("a", 600<<10), big("b", 600<<10), big("c", 600<<10)}, wantDropped: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var arts = sampleArtifacts()[:0]
			for i, c := range tc.arts {
				arts = append(arts, art(string(rune('a'+i))+".txt", c))
			}
			b := seal(t, tc.output, arts, 0)
			data, bin := b.ConfigMapData()
			if n := cmSize(data, bin); n > MaxConfigMapBytes {
				t.Fatalf("ConfigMap data is %d bytes, more than %d", n, MaxConfigMapBytes)
			}
			r := b.Receipt
			if r.Output.Digest != Sum([]byte(tc.output)) || r.Output.Bytes != int64(len(tc.output)) {
				t.Error("the receipt lost the digest of the whole output")
			}
			if cut := r.Output.StoredBytes < r.Output.Bytes; cut != tc.wantLogCut {
				t.Errorf("log cut = %v, want %v (stored %d of %d)", cut, tc.wantLogCut, r.Output.StoredBytes, r.Output.Bytes)
			}
			if tc.wantLogCut && r.Output.StoredBytes < int64(tc.wantLogAtLeast) {
				t.Errorf("log cut to %d bytes, below %d, before artifacts were dropped", r.Output.StoredBytes, tc.wantLogAtLeast)
			}
			dropped := 0
			for _, a := range r.Artifacts {
				if !a.Stored {
					dropped++
					if a.SHA256 == "" {
						t.Errorf("dropped artifact %s lost its digest", a.Path)
					}
				}
			}
			if dropped != tc.wantDropped {
				t.Errorf("%d artifacts dropped, want %d", dropped, tc.wantDropped)
			}
			if (dropped > 0 || tc.wantLogCut) && len(r.Dropped) == 0 {
				t.Error("the receipt does not say what was left out")
			}
			if rep := VerifyConfigMap(data, bin, b.Digest); !rep.OK() {
				t.Fatalf("shrunk evidence does not verify: %v", rep.Err())
			}
		})
	}
}
