package fixturesource_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/harnessfacts/harnessfacts/node-agent/envimage"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

func helloFixture(t *testing.T, greeting string) *fixture.Fixture {
	t.Helper()
	fix, err := fixture.New(map[string][]byte{
		"fixture.yaml":           []byte("prompt: say hello\nexecutables: [agent.sh]\n"),
		"agent.sh":               []byte("#!/bin/sh\n"),
		"workspace/greeting.txt": []byte(greeting),
	}, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return fix
}

func startRegistry(t *testing.T, user, password string) *oci.Registry {
	t.Helper()
	var reg *oci.Registry
	var err error
	if user != "" {
		reg, err = oci.StartRegistryWithAuth("127.0.0.1", user, password)
	} else {
		reg, err = oci.StartRegistry("127.0.0.1")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg
}

// A pushed fixture is pulled back by digest as the same fixture (same tree
// digest), the same fixture always pushes to the same digest, and the
// second pull comes from the cache.
func TestOCIFixturePushAndPull(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "", "")
	fix := helloFixture(t, "hello\n")
	ref, err := fixturesource.Push(ctx, fix, reg.Host+"/fixtures/hello:v1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := fixturesource.Push(ctx, helloFixture(t, "hello\n"), reg.Host+"/fixtures/hello:v2")
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := ref[strings.LastIndex(ref, "@"):], again[strings.LastIndex(again, "@"):]; d1 != d2 {
		t.Errorf("the same fixture pushed twice has two digests: %s, %s", d1, d2)
	}
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	got, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if got.Fixture.Digest != fix.Digest || got.Cached || got.Digest != ref[strings.LastIndex(ref, "@")+1:] {
		t.Errorf("pulled digest %s (want %s), manifest %s, cached %v", got.Fixture.Digest, fix.Digest, got.Digest, got.Cached)
	}
	if fileOf(t, got.Fixture, "workspace/greeting.txt") != "hello\n" {
		t.Error("greeting.txt differs")
	}
	second, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref})
	if err != nil || !second.Cached || second.Fixture.Digest != fix.Digest {
		t.Errorf("second pull: cached %v err %v", second != nil && second.Cached, err)
	}
}

// A digest the registry does not hold, a tag-only reference and an image
// that is not a fixture artifact are refused with reasons that say so.
func TestOCIWrongDigestAndWrongArtifacts(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "", "")
	ref, err := fixturesource.Push(ctx, helloFixture(t, "hello\n"), reg.Host+"/fixtures/hello:v1")
	if err != nil {
		t.Fatal(err)
	}
	wrong := ref[:strings.LastIndex(ref, "@")] + "@sha256:" + strings.Repeat("0", 64)
	img, err := oci.Build(nil, oci.Config{})
	if err != nil {
		t.Fatal(err)
	}
	imgRef, err := reg.Push(ctx, img, "images/plain", "v1")
	if err != nil {
		t.Fatal(err)
	}
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	for _, tc := range []struct{ ref, want string }{
		{wrong, "MANIFEST_UNKNOWN"},
		{reg.Host + "/fixtures/hello:v1", "not pinned by digest"},
		{imgRef, "is not a fixture artifact"},
	} {
		_, err := cache.OCI(ctx, fixturesource.OCI{Ref: tc.ref})
		if !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrUnavailable saying %q", tc.ref, err, tc.want)
		}
		t.Logf("%v", err)
	}
	if len(cache.Cached()) != 0 {
		t.Error("a refused pull left a cache entry")
	}
}

// A registry that needs credentials: refused without the run's pull
// secret, pulled with it, and the cached copy is never served to a run
// without it.
func TestOCIPullSecret(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "puller", "pull-pass")
	ref, err := fixturesource.Push(ctx, helloFixture(t, "hello\n"), reg.Host+"/fixtures/private:v1",
		remote.WithAuth(&authn.Basic{Username: "puller", Password: "pull-pass"}))
	if err != nil {
		t.Fatal(err)
	}
	host := reg.Host
	kc, err := envimage.DockerConfigKeychain([]byte(`{"auths":{"` + host + `":{"username":"puller","password":"pull-pass"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	if _, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref}); !errors.Is(err, fixturesource.ErrUnavailable) {
		t.Fatalf("anonymous pull of a private fixture: %v", err)
	}
	if _, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref, Keychain: kc}); err != nil {
		t.Fatal(err)
	}
	if res, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref}); err == nil {
		t.Fatalf("the cache served a private fixture to a run without its pull secret (cached %v)", res.Cached)
	}
	if res, err := cache.OCI(ctx, fixturesource.OCI{Ref: ref, Keychain: kc}); err != nil || !res.Cached {
		t.Errorf("with the secret again: cached %v, err %v", res != nil && res.Cached, err)
	}
}

// TestOCIErrorsDoNotQuoteTheServer: the run author names the registry, and
// the node-agent fetches from the node's network: what a service that is
// no registry answered there (its error page, here a 404 on /v2/, on a
// manifest and on a blob) is not quoted in the error the run's status
// shows, only its status code. The errors used to carry the whole body.
func TestOCIErrorsDoNotQuoteTheServer(t *testing.T) {
	const secret = "INTERNAL-SECRET db_password=hunter2"
	for _, path := range []string{"/v2/", "/v2/x/manifests/", "/v2/x/blobs/"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, path) {
				http.Error(w, secret+" "+r.URL.Path, http.StatusNotFound)
				return
			}
			if r.URL.Path == "/v2/" {
				return // 200: no authentication
			}
			http.NotFound(w, r)
		}))
		host := strings.TrimPrefix(srv.URL, "http://")
		cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
		_, err := cache.OCI(context.Background(), fixturesource.OCI{Ref: host + "/x@sha256:" + strings.Repeat("0", 64)})
		srv.Close()
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "404") {
			t.Errorf("a 404 with a body on %s: err %v; want the status without the body", path, err)
		}
	}
}
