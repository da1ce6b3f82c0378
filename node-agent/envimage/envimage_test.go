package envimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/harnessfacts/harnessfacts/test/oci"
)

// push builds an image of the layers' files and pushes it to reg.
func push(t *testing.T, reg *oci.Registry, repo string, layers ...[]oci.File) (string, v1.Image) {
	t.Helper()
	var ls []v1.Layer
	for _, files := range layers {
		l, err := oci.LayerFromFiles(t.TempDir(), files)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := oci.Build(ls, oci.Config{Env: []string{"PATH=/usr/bin:/bin", "IMAGE_VAR=from-the-image"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reg.Push(context.Background(), img, repo, "v1")
	if err != nil {
		t.Fatal(err)
	}
	return ref, img
}

func startRegistry(t *testing.T) *oci.Registry {
	t.Helper()
	reg, err := oci.StartRegistry("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg
}

// An image is pulled by digest, unpacked with its whiteouts applied, its
// device nodes left out and its setuid bits cleared, recorded with the
// manifest's and the config's digests, and served from the cache once the
// registry is gone.
func TestPullUnpackAndCache(t *testing.T) {
	reg := startRegistry(t)
	ref, img := push(t, reg, "tasks/base",
		[]oci.File{
			{Path: "/etc", Dir: true, Mode: 0o755},
			{Path: "/etc/os-release", Content: []byte("ID=envimage-test\n"), Mode: 0o644},
			{Path: "/etc/gone", Content: []byte("removed by the next layer"), Mode: 0o644},
			{Path: "/opaque", Dir: true, Mode: 0o755},
			{Path: "/opaque/old", Content: []byte("hidden by an opaque whiteout"), Mode: 0o644},
			{Path: "/usr/bin", Dir: true, Mode: 0o755},
			{Path: "/usr/bin/su", Content: []byte("#!/bin/sh\n"), Mode: 0o755, SetUID: true},
			{Path: "/bin", Link: "usr/bin"},
			{Path: "/dev", Dir: true, Mode: 0o755},
			{Path: "/dev/null-ish", CharDevice: true, Mode: 0o666},
			{Path: "/pipe", Fifo: true, Mode: 0o644},
			{Path: "/usr/bin/su-link", Hardlink: "usr/bin/su"},
			{Path: "/tmp", Dir: true, Mode: 0o777},
		},
		[]oci.File{
			{Path: "/etc/.wh.gone", Content: nil, Mode: 0o644},
			{Path: "/opaque/.wh..wh..opq", Content: nil, Mode: 0o644},
			{Path: "/opaque/new", Content: []byte("new"), Mode: 0o644},
		})
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, release, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	wantDigest, _ := img.Digest()
	wantConfig, _ := img.ConfigName()
	if got.Digest != wantDigest.String() || got.ConfigDigest != wantConfig.String() {
		t.Fatalf("digests %s, %s; want %s, %s", got.Digest, got.ConfigDigest, wantDigest, wantConfig)
	}
	if !strings.Contains(strings.Join(got.Config.Env, " "), "IMAGE_VAR=from-the-image") {
		t.Fatalf("config env %v", got.Config.Env)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(got.Root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if s := read("etc/os-release"); s != "ID=envimage-test\n" {
		t.Fatalf("os-release: %q", s)
	}
	for _, gone := range []string{"etc/gone", "opaque/old", "dev/null-ish", "pipe"} {
		if _, err := os.Lstat(filepath.Join(got.Root, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is in the unpacked image (%v)", gone, err)
		}
	}
	if s := read("opaque/new"); s != "new" {
		t.Errorf("opaque/new: %q", s)
	}
	fi, err := os.Stat(filepath.Join(got.Root, "usr/bin/su"))
	if err != nil || fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/su: %v %v, want 0755 without setuid", fi.Mode(), err)
	}
	if s := read("bin/su-link"); s != "#!/bin/sh\n" {
		t.Errorf("the hard link through the bin symlink: %q", s)
	}

	// Asked again: the cache serves the same unpacked image, once the
	// registry has said this caller may pull it (a HEAD, no layer again).
	again, release2, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release2()
	if again.Root != got.Root || again.Digest != got.Digest {
		t.Fatalf("cached %+v, first %+v", again, got)
	}
	// The registry is gone: nothing confirms the caller may pull it.
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cache.Get(context.Background(), ref, PullOptions{}); err == nil || !strings.Contains(err.Error(), "did not confirm") {
		t.Fatalf("a cached image served with the registry gone: %v", err)
	}
}

// A cached image is served only to a caller the registry lets pull it: a
// digest is no secret, and the cache is keyed by digest. Another tenant's
// run on the node, without the pull secret, or naming the digest under
// another registry, is refused; the tenant with the secret is served from
// the cache.
func TestCachedPrivateImageNeedsTheRunsCredentials(t *testing.T) {
	const user, password = "puller", "pull-secret-6b1e0c"
	reg, err := oci.StartRegistryWithAuth("127.0.0.1", user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ref, _ := push(t, reg, "team-a/private-env", []oci.File{{Path: "/etc/secret.txt", Content: []byte("team-a proprietary\n"), Mode: 0o644}})
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	kc, err := DockerConfigKeychain([]byte(`{"auths":{"` + reg.Host + `":{"auth":"` + auth + `"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := DockerConfigKeychain([]byte(`{"auths":{"` + reg.Host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(user+":guess")) + `"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	img, release, err := cache.Get(context.Background(), ref, PullOptions{Keychain: kc})
	if err != nil {
		t.Fatal(err)
	}
	release()
	_, digest, _ := strings.Cut(ref, "@")
	for _, c := range []struct {
		name, ref string
		kc        authn.Keychain
	}{
		{"no pull secret", ref, nil},
		{"a wrong pull secret", ref, wrong},
		{"the digest under a registry that does not exist", "nowhere.invalid/anything@" + digest, nil},
		{"the digest under another repository of the registry", reg.Host + "/team-b/mine@" + digest, kc},
	} {
		if got, rel, err := cache.Get(context.Background(), c.ref, PullOptions{Keychain: c.kc}); err == nil {
			rel()
			t.Errorf("%s: the cached private image was served (%s)", c.name, got.Root)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
	}
	// A registry of the attacker's that answers every HEAD with the digest
	// asked for: its word is no proof of content it never served.
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digest)
		w.Header().Set("Content-Length", "500")
		if r.Method != http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(forger.Close)
	forged := strings.TrimPrefix(forger.URL, "http://") + "/me/anything@" + digest
	if got, rel, err := cache.Get(context.Background(), forged, PullOptions{}); err == nil {
		rel()
		t.Errorf("a registry that claims the digest got the cached private image (%s)", got.Root)
	} else {
		t.Logf("a registry that claims the digest: refused: %v", err)
	}
	again, release, err := cache.Get(context.Background(), ref, PullOptions{Keychain: kc})
	if err != nil {
		t.Fatalf("the tenant with the pull secret: %v", err)
	}
	release()
	if again.Root != img.Root {
		t.Errorf("served from %s, cached at %s", again.Root, img.Root)
	}
}

// A reference without a digest, or with a digest the registry does not
// have, is refused with a reason that says so.
func TestWrongOrMissingDigestIsRefused(t *testing.T) {
	reg := startRegistry(t)
	ref, _ := push(t, reg, "tasks/pinned", []oci.File{{Path: "/etc/os-release", Content: []byte("ID=x\n"), Mode: 0o644}})
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	repo, _, _ := strings.Cut(ref, "@")
	_, _, err = cache.Get(context.Background(), repo, PullOptions{})
	if !errors.Is(err, ErrNotPinned) {
		t.Fatalf("a tag-only reference: %v, want ErrNotPinned", err)
	}
	wrong := repo + "@sha256:" + strings.Repeat("ab", 32)
	_, _, err = cache.Get(context.Background(), wrong, PullOptions{})
	if err == nil || !strings.Contains(err.Error(), "pulling the environment image "+strings.TrimSuffix(wrong, "")) ||
		!strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
		t.Fatalf("a digest the registry does not have: %v", err)
	}
	if n := len(cache.Cached()); n != 0 {
		t.Fatalf("the cache holds %d images after refusals", n)
	}
	t.Logf("refused: %v", err)
}

// Hostile layers: each entry that would write outside the image's root
// fails the unpack with ErrUnsafeEntry, and nothing appears outside.
func TestHostileLayersStayInTheirRoot(t *testing.T) {
	reg := startRegistry(t)
	cases := []struct {
		name  string
		files []oci.File
	}{
		{"dot-dot name", []oci.File{{Path: "../../escaped", RawName: true, Content: []byte("x"), Mode: 0o644}}},
		{"dot-dot inside a name", []oci.File{{Path: "etc/../../escaped", RawName: true, Content: []byte("x"), Mode: 0o644}}},
		{"absolute symlink then a file through it", []oci.File{
			{Path: "/evil", Link: "OUTSIDE"},
			{Path: "/evil/escaped", Content: []byte("x"), Mode: 0o644}}},
		{"relative symlink climbing out then a file through it", []oci.File{
			{Path: "/up", Link: "../../../../../../../../OUTSIDE"},
			{Path: "/up/escaped", Content: []byte("x"), Mode: 0o644}}},
		{"hard link to a file outside", []oci.File{{Path: "/passwd", Hardlink: "../../../../etc/passwd"}}},
		{"hard link through a symlink out", []oci.File{
			{Path: "/hostetc", Link: "/etc"},
			{Path: "/stolen", Hardlink: "hostetc/passwd"}}},
		{"symlinked folder then a folder through it", []oci.File{
			{Path: "/evildir", Link: "OUTSIDE"},
			{Path: "/evildir/sub", Dir: true, Mode: 0o755}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			for i := range tc.files {
				tc.files[i].Link = strings.ReplaceAll(tc.files[i].Link, "OUTSIDE", outside)
			}
			ref, _ := push(t, reg, "tasks/hostile", tc.files)
			cache, err := NewCache(filepath.Join(t.TempDir(), "cache"), 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = cache.Get(context.Background(), ref, PullOptions{})
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Errorf("unpacked without ErrUnsafeEntry: %v", err)
			} else {
				t.Logf("refused: %v", err)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 0 {
				t.Errorf("the layer wrote outside its root: %v", ents)
			}
			parent := filepath.Dir(cache.Dir())
			if _, err := os.Lstat(filepath.Join(parent, "escaped")); err == nil {
				t.Errorf("escaped beside the cache")
			}
			if n := len(cache.Cached()); n != 0 {
				t.Errorf("a refused image is cached")
			}
		})
	}
}

// A node whose runs use no environment image has no cache folder (the run
// root stays as the runs left it); the first pull makes it, 0700.
func TestCacheFolderMadeAtFirstPull(t *testing.T) {
	reg := startRegistry(t)
	ref, _ := push(t, reg, "tasks/first", []oci.File{{Path: "/f", Content: []byte("x"), Mode: 0o644}})
	dir := filepath.Join(t.TempDir(), ".images")
	cache, err := NewCache(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("NewCache made %s before any pull: %v", dir, err)
	}
	_, release, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("after the first pull: %v, %v", fi, err)
	}
}

// An image larger than the cache's bound is refused, whether its layers
// say so (compressed) or only its unpacked files do.
func TestSizeBound(t *testing.T) {
	reg := startRegistry(t)
	zeros := make([]byte, 3<<20) // compresses to a few KiB
	ref, _ := push(t, reg, "tasks/huge", []oci.File{{Path: "/big", Content: zeros, Mode: 0o644}})
	cache, err := NewCache(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cache.Get(context.Background(), ref, PullOptions{})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 3 MiB image in a 1 MiB cache: %v", err)
	}
	t.Logf("refused: %v", err)
	if ents, _ := os.ReadDir(cache.Dir()); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// Images pulled at once are bounded together, not each alone: with 3 MiB
// being unpacked by another pull, a 2 MiB image does not fit a 4 MiB cache
// and is refused, saying why; once that pull is done it is pulled, and what
// it reserved is given back.
func TestSizeBoundAcrossPullsAtOnce(t *testing.T) {
	reg := startRegistry(t)
	ref, _ := push(t, reg, "tasks/two", []oci.File{{Path: "/two", Content: make([]byte, 2<<20), Mode: 0o644}})
	cache, err := NewCache(t.TempDir(), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	cache.unpacking.Store(3 << 20) // another pull's, in progress
	_, _, err = cache.Get(context.Background(), ref, PullOptions{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "at the same time") {
		t.Fatalf("a 2 MiB image beside 3 MiB being unpacked, in a 4 MiB cache: %v", err)
	}
	if n := cache.unpacking.Load(); n != 3<<20 {
		t.Fatalf("the refused pull left %d bytes reserved", n-3<<20)
	}
	cache.unpacking.Store(0)
	_, release, err := cache.Get(context.Background(), ref, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if n := cache.unpacking.Load(); n != 0 {
		t.Fatalf("the pull left %d bytes reserved", n)
	}
}

// A layer of a few hundred KiB that inflates to 64 MiB of bytes nothing
// writes (a folder header's content, which a tar reader skips, and zeros
// after the tar's end, read only for the digest) is refused once it has
// inflated past what its entries and the cache's bound allow, not inflated
// to its end.
func TestInflationBound(t *testing.T) {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	zeros := make([]byte, 1<<20)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/os-release", Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("ID\n"))
	_ = tw.Close()
	for range 64 {
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	img, err := oci.Build([]v1.Layer{static.NewLayer(gz.Bytes(), types.DockerLayer)}, oci.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(t)
	ref, err := reg.Push(context.Background(), img, "tasks/inflating", "v1")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(t.TempDir(), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cache.Get(context.Background(), ref, PullOptions{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "inflate") {
		t.Fatalf("a %d-byte layer inflating to 64 MiB in a 4 MiB cache: %v", gz.Len(), err)
	}
	t.Logf("refused: %v", err)
}

// The cache evicts the least recently used image that no run uses.
func TestEvictionSparesImagesInUse(t *testing.T) {
	reg := startRegistry(t)
	mk := func(name string) string {
		ref, _ := push(t, reg, "tasks/"+name, []oci.File{{Path: "/f", Content: []byte(strings.Repeat(name, 300<<10/len(name))), Mode: 0o644}})
		return ref
	}
	a, b, c := mk("a"), mk("bb"), mk("ccc")
	cache, err := NewCache(t.TempDir(), 700<<10) // two of them fit
	if err != nil {
		t.Fatal(err)
	}
	get := func(ref string) (*Image, func()) {
		img, rel, err := cache.Get(context.Background(), ref, PullOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return img, rel
	}
	imgA, relA := get(a)
	relA()
	imgB, relB := get(b) // in use from here on
	imgC, relC := get(c)
	relC()
	has := func(img *Image) bool { _, err := os.Stat(img.Root); return err == nil }
	if has(imgA) || !has(imgB) || !has(imgC) {
		t.Fatalf("after a, b, c in a cache of two: a %v b %v c %v; want a evicted", has(imgA), has(imgB), has(imgC))
	}
	// b is in use: a new image evicts c, not b.
	imgA, relA = get(a)
	relA()
	if !has(imgB) || has(imgC) || !has(imgA) {
		t.Fatalf("b in use: a %v b %v c %v; want c evicted", has(imgA), has(imgB), has(imgC))
	}
	relB()
}

// A whiteout in an upper layer, through a lower layer's symbolic link out
// of the root, must not remove the host's file it points at.
func TestWhiteoutThroughASymlinkRemovesNothingOutside(t *testing.T) {
	reg := startRegistry(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{outside, "../../../../../../../../" + outside} {
		ref, _ := push(t, reg, "tasks/whiteout",
			[]oci.File{{Path: "/evil", Link: link}},
			[]oci.File{{Path: "/evil/.wh.victim", Mode: 0o644}, {Path: "/evil/.wh..wh..opq", Mode: 0o644}})
		cache, err := NewCache(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = cache.Get(context.Background(), ref, PullOptions{})
		if !errors.Is(err, ErrUnsafeEntry) {
			t.Errorf("link %s: %v, want ErrUnsafeEntry", link, err)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
			t.Fatalf("the host's file behind the link: %q, %v", b, err)
		}
	}
}

// A registry that wants credentials: the image is pulled with the run's
// .dockerconfigjson (as imagePullSecrets deliver it), refused without it
// or with a wrong password, and the error never quotes the document.
func TestPullWithAPullSecret(t *testing.T) {
	const user, password = "puller", "pull-secret-6b1e0c"
	reg, err := oci.StartRegistryWithAuth("127.0.0.1", user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ref, _ := push(t, reg, "private/env", []oci.File{{Path: "/etc/os-release", Content: []byte("ID=private\n"), Mode: 0o644}})
	doc := func(pw string) []byte {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
		return []byte(`{"auths":{"other.example":{"auth":"b3RoZXI6eA=="},"` + reg.Host + `":{"auth":"` + auth + `"}}}`)
	}
	get := func(kc authn.Keychain) error {
		cache, err := NewCache(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		_, release, err := cache.Get(context.Background(), ref, PullOptions{Keychain: kc})
		if err == nil {
			release()
		}
		return err
	}
	if err := get(nil); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("anonymous: %v, want UNAUTHORIZED", err)
	}
	wrong, err := DockerConfigKeychain(doc("wrong"))
	if err != nil {
		t.Fatal(err)
	}
	if err := get(wrong); err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("a wrong password: %v", err)
	}
	right, err := DockerConfigKeychain([]byte(`{"auths":{}}`), doc(password))
	if err != nil {
		t.Fatal(err)
	}
	if err := get(right); err != nil {
		t.Fatalf("with the pull secret: %v", err)
	}
	if _, err := DockerConfigKeychain([]byte("not json " + password)); err == nil || strings.Contains(err.Error(), password) {
		t.Fatalf("a bad document: %v", err)
	}
}

// A run author names the image and the node-agent pulls it from the node:
// the instance metadata service is refused at connect.
func TestPullRefusesTheMetadataService(t *testing.T) {
	t.Setenv("HTTP_PROXY", "")
	t.Setenv("HTTPS_PROXY", "")
	cache, err := NewCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, err = cache.Get(ctx, "169.254.169.254/images/x@sha256:"+strings.Repeat("ab", 32), PullOptions{})
	if err == nil || !strings.Contains(err.Error(), "refusing to connect") {
		t.Fatalf("pulling from the metadata address: %v, want the refusal", err)
	}
}
