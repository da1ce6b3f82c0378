package envimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/harnessfacts/harnessfacts/test/oci"
)

// bombRegistry is a registry of one image whose manifest says what the
// test wants: the run author's own registry, answering under the pinned
// digest. It counts the bytes of blobs it serves.
type bombRegistry struct {
	manifest []byte
	blobs    map[string]func(w io.Writer) // digest → content
	served   atomic.Int64
}

func (b *bombRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v2/":
		w.WriteHeader(http.StatusOK)
	case strings.Contains(r.URL.Path, "/manifests/"):
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digestOf(b.manifest))
		w.Header().Set("Content-Length", fmt.Sprint(len(b.manifest)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(b.manifest)
		}
	case strings.Contains(r.URL.Path, "/blobs/"):
		blob, ok := b.blobs[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]
		if !ok {
			http.NotFound(w, r)
			return
		}
		blob(countingWriter{w, &b.served})
	default:
		http.NotFound(w, r)
	}
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// A config blob of 64 MiB: valid JSON (an image config with one long
// environment variable), its digest the one the manifest names, so that
// every check go-containerregistry makes on it passes.
func hugeConfig(size int) (string, func(io.Writer)) {
	head, tail := []byte(`{"os":"linux","config":{"Env":["X=`), []byte(`"]}}`)
	chunk := []byte(strings.Repeat("a", 1<<20))
	fill := size - len(head) - len(tail)
	write := func(w io.Writer) {
		_, _ = w.Write(head)
		for n := fill; n > 0; n -= len(chunk) {
			_, _ = w.Write(chunk[:min(n, len(chunk))])
		}
		_, _ = w.Write(tail)
	}
	h := sha256.New()
	write(h)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), write
}

func manifestJSON(t *testing.T, configSize int64, configDigest string, layerSize int64) []byte {
	t.Helper()
	m := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "size": configSize, "digest": configDigest},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": layerSize,
			"digest": "sha256:" + strings.Repeat("0", 64)}},
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A registry whose manifest names a config of 64 MiB (go-containerregistry
// reads a config whole: 600 MiB took a pull's heap to 4.5 GiB, and the
// node-agent, bounded at 512Mi, would be killed with every run of its
// node), or one of unknown size (-1, read to its end), or a layer of
// unknown size, is refused from the manifest: not one byte of a blob is
// fetched, and the error says why.
func TestHugeConfigIsRefusedUnread(t *testing.T) {
	const huge = 64 << 20
	digest, write := hugeConfig(huge)
	for _, tc := range []struct {
		name                  string
		configSize, layerSize int64
		want                  string
	}{
		{"a 64 MiB config", huge, 10, "config of 67108864 bytes"},
		{"a config of unknown size", -1, 10, "config of -1 bytes"},
		{"a layer of unknown size", 2, -1, "no size for layer 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &bombRegistry{manifest: manifestJSON(t, tc.configSize, digest, tc.layerSize),
				blobs: map[string]func(io.Writer){digest: write}}
			srv := httptest.NewServer(reg)
			defer srv.Close()
			ref := strings.TrimPrefix(srv.URL, "http://") + "/tasks/bomb@" + digestOf(reg.manifest)
			cache, err := NewCache(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = cache.Get(context.Background(), ref, PullOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal naming %q, got %v", tc.want, err)
			}
			if tc.configSize != -1 && tc.layerSize != -1 && !errors.Is(err, ErrTooLarge) {
				t.Errorf("not ErrTooLarge: %v", err)
			}
			if n := reg.served.Load(); n != 0 {
				t.Fatalf("the registry served %d bytes of blobs before the refusal", n)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// An image whose config is 64 KiB (a long environment, well past a usual
// config's few KiB, well under the bound) still pulls.
func TestLargeButBoundedConfigPulls(t *testing.T) {
	reg := startRegistry(t)
	l, err := oci.LayerFromFiles(t.TempDir(), []oci.File{{Path: "/f", Content: []byte("x"), Mode: 0o644}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := oci.Build([]v1.Layer{l}, oci.Config{Env: []string{"BIG=" + strings.Repeat("b", 64<<10)}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reg.Push(context.Background(), img, "tasks/bigconfig", "v1")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, release, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if len(got.Config.Env) != 1 || len(got.Config.Env[0]) != 4+64<<10 {
		t.Fatalf("the config's environment: %d entries", len(got.Config.Env))
	}
}
