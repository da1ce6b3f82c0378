package registry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestCheckManifest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       v1.Manifest
		max     int64
		tooBig  bool
		refused bool
	}{
		{name: "an image's", m: v1.Manifest{Config: v1.Descriptor{Size: 1500}, Layers: []v1.Descriptor{{Size: 30 << 20}, {Size: 10}}}, max: 1 << 30},
		{name: "config at the bound", m: v1.Manifest{Config: v1.Descriptor{Size: MaxConfigBytes}}},
		{name: "config past the bound", m: v1.Manifest{Config: v1.Descriptor{Size: MaxConfigBytes + 1}}, tooBig: true, refused: true},
		{name: "config of unknown size", m: v1.Manifest{Config: v1.Descriptor{Size: -1}}, tooBig: true, refused: true},
		{name: "config embedded", m: v1.Manifest{Config: v1.Descriptor{Size: -1, Data: []byte("{}")}}},
		{name: "layer of unknown size", m: v1.Manifest{Layers: []v1.Descriptor{{Size: 1}, {Size: -1}}}, refused: true},
		{name: "layers past the bound", m: v1.Manifest{Layers: []v1.Descriptor{{Size: 600}, {Size: 500}}}, max: 1000, tooBig: true, refused: true},
		{name: "layers overflowing", m: v1.Manifest{Layers: []v1.Descriptor{{Size: 1 << 62}, {Size: 1 << 62}, {Size: 1 << 62}}}, max: 1 << 40, tooBig: true, refused: true},
		{name: "layers unbounded", m: v1.Manifest{Layers: []v1.Descriptor{{Size: 1 << 40}}}},
	} {
		err := CheckManifest(&tc.m, tc.max)
		if (err != nil) != tc.refused || errors.Is(err, ErrTooLarge) != tc.tooBig {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// A manifest response is cut at MaxManifestBytes whether the registry says
// how long it is (refused before the body is read) or streams it without a
// length; a blob's response is not cut.
func TestTransportCutsManifests(t *testing.T) {
	long := strings.Repeat("m", MaxManifestBytes+1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush() // no Content-Length
		}
		_, _ = io.WriteString(w, long)
	}))
	defer srv.Close()
	client := &http.Client{Transport: Transport(nil)}
	get := func(path string) (int, error) {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	if _, err := get("/v2/tasks/x/manifests/sha256:ab"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a long manifest with its length: %v", err)
	}
	if n, err := get("/v2/tasks/x/manifests/v1?chunked=1"); !errors.Is(err, ErrTooLarge) || n > MaxManifestBytes+64<<10 {
		t.Errorf("a long manifest streamed: %d bytes, %v", n, err)
	}
	if n, err := get("/v2/tasks/x/blobs/sha256:ab"); err != nil || n != len(long) {
		t.Errorf("a blob: %d bytes, %v", n, err)
	}
}
