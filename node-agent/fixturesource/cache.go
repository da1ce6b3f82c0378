package fixturesource

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/diskcache"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// DefaultCacheBytes bounds the fixture cache when the operator names no
// bound.
const DefaultCacheBytes int64 = 4 << 30

// Result is a fixture read from a git or OCI source.
type Result struct {
	// Fixture is the checked fixture.
	Fixture *fixture.Fixture
	// Digest is the OCI manifest's digest (OCI only).
	Digest string
	// Cached says the node's cache held it already.
	Cached bool
}

// Cache is the node's cache of git and OCI fixtures: a folder per source
// and pin, holding the fixture as the tar its WriteTar makes and what it is.
// One node-agent owns it.
type Cache struct {
	dir      string
	maxBytes int64
	opts     Options

	mu   sync.Mutex
	busy map[string]*sync.Mutex // key → held while fetching or reading it
}

// NewCache uses the cache in dir, which is made 0700 at the first fetch (a
// node whose runs name no such fixture gets no folder). maxBytes 0 means
// DefaultCacheBytes.
func NewCache(dir string, maxBytes int64, opts Options) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	c := &Cache{dir: dir, maxBytes: maxBytes, opts: opts, busy: map[string]*sync.Mutex{}}
	// A write a killed node-agent left half done is of no use.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return c
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

// entry is what meta.json of a cache entry says.
type entry struct {
	Source string `json:"source"`
	// Digest is the fixture's tree digest, checked again at every read.
	Digest string `json:"digest"`
	// ManifestDigest is an OCI artifact's.
	ManifestDigest string `json:"manifestDigest,omitempty"`
	Size           int64  `json:"size"`
}

const (
	metaName = "meta.json"
	tarName  = "fixture.tar"
)

func key(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// Git returns the fixture of src, from the cache when it holds it (after
// the repository accepted the run's credentials), else fetched and stored.
func (c *Cache) Git(ctx context.Context, src Git) (*Result, error) {
	ctx, cancel, explain := c.opts.withFetchTimeout(ctx)
	defer cancel()
	res, err := c.git(ctx, src)
	return res, explain(err)
}

func (c *Cache) git(ctx context.Context, src Git) (*Result, error) {
	r, err := newGitRemote(src, c.opts.RootCAs, c.opts.maxPackBytes())
	if err != nil {
		return nil, err
	}
	k := key("git", src.URL, src.Commit, src.Path)
	lock := c.lockFor(k)
	lock.Lock()
	defer lock.Unlock()
	if c.has(k) {
		sess, _, err := r.session(ctx)
		if err != nil {
			return nil, err
		}
		_ = sess.Close()
		if fix, _, err := c.read(k); err == nil {
			return &Result{Fixture: fix, Cached: true}, nil
		}
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, unavailable("the fixture cache %s: %v", c.dir, err)
	}
	files, err := fetchGit(ctx, src, c.opts, c.dir)
	if err != nil {
		return nil, err
	}
	fix, err := fixture.New(files, c.opts.limits())
	if err != nil {
		return nil, err
	}
	c.store(k, "git "+src.URL+" "+src.Commit+" "+src.Path, fix, "")
	return &Result{Fixture: fix}, nil
}

// OCI returns the fixture artifact of src, from the cache when it holds it
// (after the registry let the run's credentials see its manifest), else
// pulled and stored.
func (c *Cache) OCI(ctx context.Context, src OCI) (*Result, error) {
	ctx, cancel, explain := c.opts.withFetchTimeout(ctx)
	defer cancel()
	res, err := c.oci(ctx, src)
	return res, explain(err)
}

func (c *Cache) oci(ctx context.Context, src OCI) (*Result, error) {
	d, err := parseDigestRef(src.Ref)
	if err != nil {
		return nil, err
	}
	k := key("oci", d.Context().Name(), d.DigestStr())
	lock := c.lockFor(k)
	lock.Lock()
	defer lock.Unlock()
	if c.has(k) {
		if err := checkAccess(ctx, src, c.opts); err != nil {
			return nil, err
		}
		if fix, e, err := c.read(k); err == nil && e.ManifestDigest == d.DigestStr() {
			return &Result{Fixture: fix, Digest: e.ManifestDigest, Cached: true}, nil
		}
	}
	fix, digest, err := pullOCI(ctx, src, c.opts)
	if err != nil {
		return nil, err
	}
	c.store(k, "oci "+d.String(), fix, digest)
	return &Result{Fixture: fix, Digest: digest}, nil
}

func (c *Cache) lockFor(k string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.busy[k]
	if m == nil {
		m = &sync.Mutex{}
		c.busy[k] = m
	}
	return m
}

func (c *Cache) has(k string) bool {
	_, err := os.Stat(filepath.Join(c.dir, k, metaName))
	return err == nil
}

// read returns a cached fixture, checked again: a cache entry that does not
// read back as the fixture it was (a disk error, a hand edit) is removed
// and fetched again.
func (c *Cache) read(k string) (*fixture.Fixture, *entry, error) {
	dir := filepath.Join(c.dir, k)
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return nil, nil, err
	}
	e := &entry{}
	if err := json.Unmarshal(b, e); err != nil {
		c.drop(k)
		return nil, nil, err
	}
	f, err := os.Open(filepath.Join(dir, tarName))
	if err != nil {
		c.drop(k)
		return nil, nil, err
	}
	defer f.Close()
	fix, err := fixture.FromTar(f, c.opts.limits())
	if err != nil {
		c.drop(k)
		return nil, nil, fmt.Errorf("the cached fixture %s does not read back: %w", k, err)
	}
	if fix.Digest != e.Digest {
		c.drop(k)
		return nil, nil, fmt.Errorf("the cached fixture %s reads back as %s, not %s", k, fix.Digest, e.Digest)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // the LRU's clock
	return fix, e, nil
}

// store writes the fixture into the cache; a failure only costs the next
// run a fetch.
func (c *Cache) store(k, source string, fix *fixture.Fixture, manifestDigest string) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return
	}
	_ = os.Chmod(c.dir, 0o700)
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone once renamed
	// Written straight to the file: a copy of the fixture in memory beside
	// the fixture itself would double what the node-agent holds.
	size, err := writeTarFile(filepath.Join(tmp, tarName), fix)
	if err != nil {
		return
	}
	meta, err := json.Marshal(entry{Source: source, Digest: fix.Digest, ManifestDigest: manifestDigest, Size: size})
	if err != nil {
		return
	}
	if os.WriteFile(filepath.Join(tmp, metaName), meta, 0o600) != nil {
		return
	}
	c.drop(k)
	if os.Rename(tmp, filepath.Join(c.dir, k)) != nil {
		return
	}
	c.evict()
}

// writeTarFile writes fix's tar into a new file at p and returns its size.
func writeTarFile(p string, fix *fixture.Fixture) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriter(f)
	err = fix.WriteTar(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// drop removes an entry, renamed first so that a half-removed entry is
// never read.
func (c *Cache) drop(k string) {
	gone := filepath.Join(c.dir, ".tmp-drop-"+k)
	if os.Rename(filepath.Join(c.dir, k), gone) == nil {
		_ = os.RemoveAll(gone)
	}
}

// evict removes the least recently used entries until the cache fits its
// bound. An entry being read is not removed: readers hold its key's lock
// and evict takes each key's lock.
func (c *Cache) evict() {
	all, total := diskcache.Entries(c.dir, metaName)
	for _, it := range all[:max(0, len(all)-1)] { // the newest entry stays
		if total <= c.maxBytes {
			return
		}
		m := c.lockFor(it.Key)
		if !m.TryLock() {
			continue // being read or written: not now
		}
		c.drop(it.Key)
		m.Unlock()
		total -= it.Size
	}
}

// Cached lists the cache's keys, for tests.
func (c *Cache) Cached() []string {
	return diskcache.Keys(c.dir, metaName)
}
