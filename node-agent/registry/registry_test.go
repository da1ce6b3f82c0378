package registry

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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

// TestDescribeQuotesNoBodyOfTheAnswer: the run author names the registry
// and with it a token endpoint (its WWW-Authenticate realm) anywhere the
// node reaches; go-containerregistry quotes the body of an answer that is
// no registry error document, so an internal service's answer there would
// reach the run's status. Describe keeps the request and status only, and
// a registry's own error codes.
func TestDescribeQuotesNoBodyOfTheAnswer(t *testing.T) {
	var srv *httptest.Server
	var registryErrors atomic.Bool
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/" && registryErrors.Load():
		case r.URL.Path == "/v2/":
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/internal/secret?q=1",service="s"`)
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/internal/secret":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "internal-secret-9z8y")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
		}
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	host := strings.TrimPrefix(srv.URL, "https://")
	ref, err := name.ParseReference(host + "/tasks/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Head(ref, Options(context.Background(), nil, pool)...)
	if err == nil || !strings.Contains(err.Error(), "internal-secret-9z8y") {
		t.Fatalf("go-containerregistry's error %v: the test shows nothing", err)
	}
	wrapped := fmt.Errorf("the environment image x: %w", err)
	got := Describe(wrapped)
	if msg := got.Error(); strings.Contains(msg, "internal-secret") || !strings.Contains(msg, "the registry answered 403 Forbidden") ||
		!strings.HasPrefix(msg, "the environment image x: ") || strings.Contains(msg, "q=1") {
		t.Errorf("Describe: %q", msg)
	}
	if !errors.Is(got, err) {
		t.Error("Describe does not unwrap to the error")
	}
	// Wrapped other than verbatim (quoted), the body is not kept either.
	if msg := Describe(fmt.Errorf("pulling: %q: %w", err.Error(), err)).Error(); strings.Contains(msg, "internal-secret") {
		t.Errorf("Describe of a quoted error: %q", msg)
	}
	// A registry's own error document keeps its codes, the spec's only,
	// and none of its messages: any service that speaks the document
	// chooses those words.
	registryErrors.Store(true)
	_, err = remote.Get(ref, Options(context.Background(), nil, pool)...)
	if msg := Describe(err).Error(); !strings.HasSuffix(msg, "404 Not Found: MANIFEST_UNKNOWN") {
		t.Errorf("Describe of a registry's error: %q (from %v)", msg, err)
	}
	forged := &transport.Error{StatusCode: http.StatusNotFound, Errors: []transport.Diagnostic{
		{Code: "MANIFEST_UNKNOWN", Message: "internal-secret-1"}, {Code: "INTERNAL-SECRET-2"}}}
	if msg := Describe(forged).Error(); strings.Contains(strings.ToLower(msg), "internal-secret") ||
		!strings.Contains(msg, "MANIFEST_UNKNOWN; an error code of its own") {
		t.Errorf("Describe of an internal service's error document: %q", msg)
	}
	if Describe(nil) != nil {
		t.Error("Describe(nil) is not nil")
	}
}

// TestDescribeQuotesNoTokenAnswer: a token endpoint that answers 200 with a
// JSON object holding no token (any internal service's JSON, the realm
// being the run author's to name) has go-containerregistry quote the whole
// answer, up to 64 KiB, in a plain error that is no transport.Error:
// Describe keeps none of it either.
func TestDescribeQuotesNoTokenAnswer(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/":
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/internal/config",service="s"`)
			w.WriteHeader(http.StatusUnauthorized)
		case "/internal/config":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"database_password":"internal-secret-7x6w"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "https://") + "/tasks/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Get(ref, Options(context.Background(), nil, pool)...)
	if err == nil || !strings.Contains(err.Error(), "internal-secret-7x6w") {
		t.Fatalf("go-containerregistry's error %v: the test shows nothing", err)
	}
	got := Describe(fmt.Errorf("the fixture image x: %w", err))
	if msg := got.Error(); strings.Contains(msg, "internal-secret") || !strings.HasPrefix(msg, "the fixture image x: ") {
		t.Errorf("Describe: %q", msg)
	}
	if !errors.Is(got, err) {
		t.Error("Describe does not unwrap to the error")
	}
}
