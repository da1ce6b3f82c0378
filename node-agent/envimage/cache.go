// Package envimage turns a run's environment image (an OCI image pinned by
// digest) into a root file system the sandbox can use: it pulls the image
// with go-containerregistry, which checks every digest on the way, unpacks
// it once into a content-addressed cache on the node, bounded in size with
// least-recently-used eviction, and (on Linux) mounts a throwaway writable
// overlay over it for one run.
//
// The image is the attacker's: a layer may name paths with "..", absolute
// paths, symbolic links out of the root, hard links to host files, device
// nodes, setuid binaries, or simply be huge. The unpacker (unpack.go) writes
// only through an os.Root confined to the image's directory, skips device
// nodes, fifos and sockets, clears setuid, setgid and sticky bits, gives
// every file to root (the only id the sandbox maps, see overlay_linux.go),
// and stops at the cache's size and entry bounds.
package envimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/harnessfacts/harnessfacts/node-agent/diskcache"
	"github.com/harnessfacts/harnessfacts/node-agent/registry"
)

// DefaultMaxBytes bounds the cache (the unpacked images together) when the
// operator names no bound: 20 GiB holds a few Terminal-Bench images.
const DefaultMaxBytes int64 = 20 << 30

// DefaultMaxEntries bounds the files of one image: a layer of a million
// empty files costs inodes, not bytes.
const DefaultMaxEntries = 1 << 20

// Image is an unpacked environment image in the cache.
type Image struct {
	// Ref is the reference asked for.
	Ref string
	// Digest is the digest of the image manifest that was unpacked; for a
	// reference to an index it is the manifest of this node's platform.
	Digest string
	// ConfigDigest is the digest of the image's config.
	ConfigDigest string
	// Config is the image's runtime config (its Env, WorkingDir, User).
	Config v1.Config
	// Root is the unpacked file system, to be used read-only (as an
	// overlay's lower layer).
	Root string
	// Size is what the unpacked files take, in bytes.
	Size int64
}

// Cache is the node's cache of unpacked images. One node-agent owns it.
type Cache struct {
	dir        string
	maxBytes   int64
	maxEntries int

	mu    sync.Mutex
	inUse map[string]int         // digest hex → runs using it
	busy  map[string]*sync.Mutex // digest hex → held while pulling it

	// unpacking counts the bytes the pulls in progress have written to
	// their temporary folders: each image is bounded by maxBytes, and so
	// are all of them at once (Bounds.InFlight).
	unpacking atomic.Int64
}

// NewCache reuses the cache in dir, or makes it, 0700, at the first pull: a
// node whose runs use no environment image gets no cache folder. Only the
// node-agent reads the unpacked images; runs see them through their
// overlay. maxBytes 0 means DefaultMaxBytes.
func NewCache(dir string, maxBytes int64) (*Cache, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	c := &Cache{dir: dir, maxBytes: maxBytes, maxEntries: DefaultMaxEntries, inUse: map[string]int{}, busy: map[string]*sync.Mutex{}}
	switch _, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("envimage: the image cache: %w", err)
	}
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	// An unpack a killed node-agent left half done is of no use.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return c, nil
}

// makeDir makes the cache's folder, or makes sure an existing one is the
// node-agent's alone.
func (c *Cache) makeDir() error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("envimage: making the image cache: %w", err)
	}
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return fmt.Errorf("envimage: %w", err)
	}
	return nil
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

// ErrNotPinned is returned for a reference without a digest.
var ErrNotPinned = errors.New("the environment image is not pinned by digest")

// PullOptions say how to reach the registry.
type PullOptions struct {
	// Keychain holds the run's pull credentials (imagePullSecrets); nil
	// means anonymous.
	Keychain authn.Keychain
	// Platform is the platform to pick from an index (linux and this
	// node's architecture when nil).
	Platform *v1.Platform
}

// meta is what .complete holds about an unpacked image.
type meta struct {
	Ref          string    `json:"ref"`
	Digest       string    `json:"digest"`
	ConfigDigest string    `json:"configDigest"`
	Config       v1.Config `json:"config"`
	Size         int64     `json:"size"`
}

const metaName = "image.json"

// Get returns the image ref names, pulling and unpacking it when the cache
// does not hold it yet (and, when it does, once the registry confirmed with
// opts' credentials that ref is that image), and marks it in use until
// release is called: an image in use is never evicted. ref must be pinned by digest; the pulled
// manifest must have that digest (go-containerregistry checks it, and every
// blob's digest as it is read).
func (c *Cache) Get(ctx context.Context, ref string, opts PullOptions) (img *Image, release func(), err error) {
	d, err := name.NewDigest(ref)
	if err != nil {
		if _, terr := name.NewTag(ref); terr == nil {
			return nil, nil, fmt.Errorf("%w: %s (add @sha256:<digest>)", ErrNotPinned, ref)
		}
		return nil, nil, fmt.Errorf("the environment image reference %q is not valid: %w", ref, err)
	}
	hexDigest := strings.TrimPrefix(d.DigestStr(), "sha256:")
	if len(hexDigest) != 64 || strings.Trim(hexDigest, "0123456789abcdef") != "" {
		return nil, nil, fmt.Errorf("%w: %s has no sha256 digest", ErrNotPinned, ref)
	}
	// An entry is the image of one repository: a registry's word that it
	// has a digest (a HEAD) proves nothing of content it never served, so
	// the same digest named under another registry or repository is pulled
	// and checked in full, never served from another repository's entry.
	key := cacheKey(d.Context().Name(), hexDigest)
	lock := c.lockFor(key)
	lock.Lock()
	defer lock.Unlock()
	// Found and marked in use under c.mu, which evict holds while it
	// chooses and renames: a cached image is never taken away between the
	// two.
	kc := opts.Keychain
	if kc == nil {
		kc = authn.NewMultiKeychain() // anonymous; never the node's own ~/.docker
	}
	// A cached image is served only to a run that may still pull it: the
	// cache is keyed by digest, and a digest is no secret (it is in run
	// specs, fixture files, CI logs), so without this any run on the node
	// could name another tenant's private image by its digest, under any
	// registry name, without its pull secret. The registry is asked, with
	// this run's credentials, for the reference's manifest descriptor.
	if c.has(key) {
		if err := checkAccess(ctx, d, kc); err != nil {
			return nil, nil, err
		}
	}
	c.mu.Lock()
	img, err = c.lookup(ref, key)
	if img != nil {
		c.inUse[key]++
	}
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if img == nil {
		var reserved int64
		// Taken back once the pull's folder is gone or in the cache (the
		// deferred removal below runs first).
		defer func() { c.unpacking.Add(-reserved) }()
		tmp, pulled, err := c.pull(ctx, d, kc, opts.Platform, &reserved)
		if tmp != "" {
			defer func() { _ = os.RemoveAll(tmp) }() // gone once renamed
		}
		if err != nil {
			return nil, nil, err
		}
		c.mu.Lock()
		err = os.Rename(tmp, filepath.Join(c.dir, key))
		if err == nil {
			c.inUse[key]++
		}
		c.mu.Unlock()
		if err != nil {
			return nil, nil, fmt.Errorf("envimage: %w", err)
		}
		pulled.Root = filepath.Join(c.dir, key, "rootfs")
		img = pulled
	}
	now := time.Now()
	_ = os.Chtimes(filepath.Join(c.dir, key), now, now) // the LRU's clock
	var once sync.Once
	release = func() {
		once.Do(func() {
			c.mu.Lock()
			c.inUse[key]--
			if c.inUse[key] == 0 {
				delete(c.inUse, key)
			}
			c.mu.Unlock()
		})
	}
	c.evict()
	return img, release, nil
}

func (c *Cache) lockFor(key string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.busy[key]
	if m == nil {
		m = &sync.Mutex{}
		c.busy[key] = m
	}
	return m
}

// cacheKey names the entry of a repository's image: the digest, then a
// digest of the repository's name (registry and path), so that entries of
// one image sort together.
func cacheKey(repository, hexDigest string) string {
	sum := sha256.Sum256([]byte(repository))
	return hexDigest + "-" + hex.EncodeToString(sum[:8])
}

// has says whether the cache holds the image of key.
func (c *Cache) has(key string) bool {
	_, err := os.Stat(filepath.Join(c.dir, key, metaName))
	return err == nil
}

// checkAccess asks the registry, with the run's credentials, for the
// descriptor of d's manifest, which must have d's digest: HEAD, so nothing
// is pulled again.
func checkAccess(ctx context.Context, d name.Digest, kc authn.Keychain) error {
	desc, err := remote.Head(d, registry.Options(ctx, kc, nil)...)
	if err != nil {
		return fmt.Errorf("the environment image %s is cached on this node, but the registry did not confirm this run may pull it: %w", d.String(), err)
	}
	if desc.Digest.String() != d.DigestStr() {
		return fmt.Errorf("the registry answers %s for the environment image %s: not the digest asked for", desc.Digest, d.String())
	}
	return nil
}

// lookup returns the cached image of key, or nil when it is not cached.
func (c *Cache) lookup(ref, key string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, key, metaName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("envimage: reading the cached image: %w", err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("envimage: the cached image's %s: %w", metaName, err)
	}
	return &Image{Ref: ref, Digest: m.Digest, ConfigDigest: m.ConfigDigest, Config: m.Config,
		Root: filepath.Join(c.dir, key, "rootfs"), Size: m.Size}, nil
}

// pull fetches the image, checks it, and unpacks it into a new temporary
// folder of the cache, which it returns (also with an error, for the
// caller to remove).
func (c *Cache) pull(ctx context.Context, d name.Digest, kc authn.Keychain, platform *v1.Platform, reserved *int64) (tmp string, img *Image, err error) {
	plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if platform != nil {
		plat = *platform
	}
	// The registry is the run author's to name: registry.Options bound what
	// it may make the node-agent hold.
	rimg, err := remote.Image(d, append(registry.Options(ctx, kc, nil), remote.WithPlatform(plat))...)
	if err != nil {
		return tmp, nil, fmt.Errorf("pulling the environment image %s: %w", d.String(), err)
	}
	digest, err := rimg.Digest()
	if err != nil {
		return tmp, nil, fmt.Errorf("the environment image %s: %w", d.String(), err)
	}
	// The manifest's declared sizes are judged before anything they name
	// is fetched: go-containerregistry reads a config whole, and the
	// layers' sizes are a first, cheap refusal of an image that cannot fit.
	man, err := rimg.Manifest()
	if err != nil {
		return tmp, nil, fmt.Errorf("the environment image %s: its manifest: %w", d.String(), err)
	}
	if err := registry.CheckManifest(man, c.maxBytes); err != nil {
		if errors.Is(err, registry.ErrTooLarge) {
			err = fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return tmp, nil, fmt.Errorf("the environment image %s: %w", d.String(), err)
	}
	cf, err := rimg.ConfigFile()
	if err != nil {
		return tmp, nil, fmt.Errorf("the environment image %s: its config: %w", d.String(), err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return tmp, nil, fmt.Errorf("the environment image %s is for %s, not linux", d.String(), cf.OS)
	}
	if err := c.makeDir(); err != nil {
		return "", nil, err
	}
	if tmp, err = os.MkdirTemp(c.dir, ".tmp-"); err != nil {
		return "", nil, fmt.Errorf("envimage: %w", err)
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return tmp, nil, fmt.Errorf("envimage: %w", err)
	}
	st, err := Unpack(ctx, rimg, rootfs, Bounds{MaxBytes: c.maxBytes, MaxEntries: c.maxEntries, InFlight: &c.unpacking})
	*reserved = st.Reserved
	if err != nil {
		return tmp, nil, fmt.Errorf("unpacking the environment image %s: %w", d.String(), err)
	}
	m := meta{Ref: d.String(), Digest: digest.String(), ConfigDigest: man.Config.Digest.String(), Config: cf.Config, Size: st.Bytes}
	b, err := json.Marshal(m)
	if err != nil {
		return tmp, nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, metaName), b, 0o600); err != nil {
		return tmp, nil, fmt.Errorf("envimage: %w", err)
	}
	return tmp, &Image{Ref: d.String(), Digest: m.Digest, ConfigDigest: m.ConfigDigest, Config: m.Config, Size: m.Size}, nil
}

// evict removes the least recently used images not in use until the cache
// fits its bound.
func (c *Cache) evict() {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, total := diskcache.Entries(c.dir, metaName)
	for _, e := range all {
		if total <= c.maxBytes {
			return
		}
		if c.inUse[e.Key] > 0 {
			continue
		}
		// Renamed first, so that a half-removed image is never taken for a
		// cached one.
		gone := filepath.Join(c.dir, ".tmp-evict-"+e.Key)
		if os.Rename(filepath.Join(c.dir, e.Key), gone) == nil {
			_ = os.RemoveAll(gone)
			total -= e.Size
		}
	}
}

// Cached lists the digests (hex) the cache holds, for tests and metrics.
func (c *Cache) Cached() []string {
	return diskcache.Keys(c.dir, metaName)
}
