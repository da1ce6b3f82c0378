package fixturesource

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Git names a fixture in a git repository.
type Git struct {
	// URL is the repository's http(s) URL, without credentials.
	URL string
	// Commit is the full SHA-1 of the commit, 40 lower-case hex digits.
	Commit string
	// Path is the fixture's folder in the repository ("" for its root).
	Path string
	// Username and Password are sent with HTTP basic authentication when
	// Password is set.
	Username, Password string
}

// Bounds of a git fetch, besides the fixture's own Limits: what the server
// may send (the pack, compressed) and what its objects may hold once
// inflated. The pack is kept on disk; its objects are held in memory once
// inflated, so the inflated bound (checked on the pack's headers before
// anything is inflated) is what keeps a hostile or simply huge repository
// within the node-agent's memory (the chart's hard bound is 512Mi).
const (
	DefaultMaxPackBytes     int64 = 256 << 20
	DefaultMaxInflatedBytes int64 = 256 << 20
	DefaultMaxObjects             = 500000
)

// commitPattern is a full SHA-1 in lower case (the schema's rule).
func validCommit(c string) bool {
	if len(c) != 40 {
		return false
	}
	for _, r := range c {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// gitRemote is one repository reached over HTTP with a run's credentials.
type gitRemote struct {
	src      Git
	endpoint *transport.Endpoint
	client   transport.Transport
	auth     transport.AuthMethod
	received *atomic.Int64
	maxPack  int64
}

// newGitRemote checks src and prepares a client for it: one HTTP client
// per fetch, whose responses are cut at maxPack bytes in all, which follows
// no redirect to another scheme or host (credentials never go elsewhere),
// and which trusts roots (nil: the system's).
func newGitRemote(src Git, roots *x509.CertPool, maxPack int64) (*gitRemote, error) {
	u, err := url.Parse(src.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, unavailable("the git URL %q is not an absolute http or https URL", src.URL)
	}
	if u.User != nil {
		return nil, unavailable("the git URL carries credentials: use the fixture's secretRef")
	}
	if src.Password != "" && u.Scheme != "https" && !loopbackHost(u.Hostname()) {
		return nil, unavailable("credentials are sent only over https (or to a loopback address), not to %s", u.Redacted())
	}
	if !validCommit(src.Commit) {
		return nil, unavailable("the commit %q is not a full commit SHA (40 lower-case hex digits)", src.Commit)
	}
	ep, err := transport.NewEndpoint(src.URL)
	if err != nil {
		return nil, unavailable("the git URL %q: %v", src.URL, err)
	}
	received := &atomic.Int64{}
	// Metadata and link-local addresses are refused at connect: the run
	// author names this URL and the node-agent dials it from the node.
	tr := egress.FetchTransport(roots)
	tr.MaxIdleConnsPerHost = 2
	tr.IdleConnTimeout = 30 * time.Second
	hc := &http.Client{
		Transport: &cappedTransport{next: tr, left: maxPack, used: received},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
				return fmt.Errorf("the repository redirects to %s://%s, another scheme or host: not followed", req.URL.Scheme, req.URL.Host)
			}
			return nil
		},
	}
	r := &gitRemote{src: src, endpoint: ep, client: githttp.NewClient(hc), received: received, maxPack: maxPack}
	if src.Password != "" {
		r.auth = &githttp.BasicAuth{Username: src.Username, Password: src.Password}
	}
	return r, nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// session opens an upload-pack session and reads the advertised
// references: the check that the run's credentials reach the repository.
func (r *gitRemote) session(ctx context.Context) (transport.UploadPackSession, *packp.AdvRefs, error) {
	sess, err := r.client.NewUploadPackSession(r.endpoint, r.auth)
	if err != nil {
		return nil, nil, r.wrap(err)
	}
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		_ = sess.Close()
		return nil, nil, r.wrap(err)
	}
	return sess, ar, nil
}

// wrap says what failed, in words that never quote a credential: the URL
// holds none (refused above) and go-git's errors name the URL and status.
func (r *gitRemote) wrap(err error) error {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired) && r.auth != nil, errors.Is(err, transport.ErrAuthorizationFailed):
		return unavailable("the repository %s refused the credentials of the fixture's secretRef", r.src.URL)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return unavailable("the repository %s asks for credentials: give the fixture a secretRef", r.src.URL)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return unavailable("the repository %s was not found (or the credentials may not read it)", r.src.URL)
	case errors.Is(err, errPackTooLarge):
		return unavailable("the repository %s sent more than the %d bytes a fixture fetch may receive", r.src.URL, r.maxPack)
	case errors.Is(err, errRefsTooLarge):
		return unavailable("the repository %s advertises more than the %d bytes of references a fixture fetch reads", r.src.URL, MaxRefsBytes)
	case strings.Contains(err.Error(), "pkt-line"):
		// go-git quotes the line it could not read: the answer of
		// whatever the run author pointed the URL at, an internal
		// service's included.
		return unavailable("fetching %s: the answer is not a git repository's (not git's pkt-line format)", r.src.URL)
	}
	return unavailable("fetching %s: %v", r.src.URL, err)
}

// fetchGit fetches src's commit and returns the fixture folder's files,
// read straight from git's objects: nothing is checked out, so no hook,
// filter, attribute or configuration of the repository ever applies, and
// no link is ever made on the node's disk. The commit read is the one
// asked for by construction: git objects are found by the hash of their
// content (go-git hashes every object it receives, with SHA-1 collision
// detection), so a server that sends another commit leaves this one
// missing, and the fetch is refused.
//
// dir holds the pack while it is read (the cache's folder: hidden from
// every sandbox, its leftovers removed at the next start).
func fetchGit(ctx context.Context, src Git, o Options, dir string) (map[string][]byte, error) {
	r, err := newGitRemote(src, o.RootCAs, o.maxPackBytes())
	if err != nil {
		return nil, err
	}
	sess, ar, err := r.session(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sess.Close() }()
	want := plumbing.NewHash(src.Commit)
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	// A thin pack refers to objects the receiver has; this one has none.
	req.Capabilities.Delete(capability.ThinPack)
	byHash := ar.Capabilities.Supports(capability.AllowReachableSHA1InWant) || advertises(ar, want)
	if byHash {
		// Only the commit, and only its tree: the cheapest fetch.
		req.Wants = []plumbing.Hash{want}
		if ar.Capabilities.Supports(capability.Shallow) {
			req.Depth = packp.DepthCommits(1)
			if err := req.Capabilities.Set(capability.Shallow); err != nil {
				return nil, unavailable("fetching %s: %v", src.URL, err)
			}
		}
	} else {
		// A server that serves only its branches and tags: all of them,
		// and the commit must be among what they reach.
		req.Wants = advertisedHashes(ar)
		if len(req.Wants) == 0 {
			return nil, unavailable("the repository %s has no branches or tags", src.URL)
		}
	}
	resp, err := sess.UploadPack(ctx, req)
	if err != nil {
		if byHash && strings.Contains(err.Error(), "not our ref") {
			return nil, unavailable("commit %s is not in the repository %s (not reachable from its branches and tags)", src.Commit, src.URL)
		}
		return nil, r.wrap(err)
	}
	defer func() { _ = resp.Close() }()
	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	// The pack is kept on disk, not in memory, and its objects' sizes, as
	// its headers declare them (the scanner holds each object to its
	// declared size), are summed before any is inflated into memory: a
	// pack of a few KiB can inflate to gigabytes, and go-git's parser
	// reports the inflated sizes only after it has stored every object.
	spool, err := os.CreateTemp(dir, ".tmp-pack-")
	if err != nil {
		return nil, unavailable("fetching %s: a file for its pack: %v", src.URL, err)
	}
	defer func() { _ = spool.Close(); _ = os.Remove(spool.Name()) }()
	if _, err := io.Copy(spool, pack); err != nil {
		if errors.Is(err, errPackTooLarge) || r.received.Load() > r.maxPack {
			return nil, r.wrap(errPackTooLarge)
		}
		return nil, r.wrap(err)
	}
	if err := checkDeclaredSizes(spool, o.maxObjects(), o.limits().MaxFileBytes, o.maxInflatedBytes()); err != nil {
		if fe := (*fixture.Error)(nil); errors.As(err, &fe) {
			return nil, err
		}
		return nil, unavailable("the repository %s: %v", src.URL, err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return nil, unavailable("fetching %s: %v", src.URL, err)
	}
	st := memory.NewStorage()
	bounds := &packBounds{maxObjects: o.maxObjects(), left: o.maxInflatedBytes()}
	parser, err := packfile.NewParserWithStorage(packfile.NewScanner(spool), st, bounds)
	if err != nil {
		return nil, r.wrap(err)
	}
	if _, err := parser.Parse(); err != nil {
		if bounds.err != nil {
			return nil, unavailable("the repository %s: %v", src.URL, bounds.err)
		}
		return nil, r.wrap(err)
	}
	commit, err := object.GetCommit(st, want)
	if err != nil {
		return nil, unavailable("the repository %s did not send commit %s: it is not in the repository, or not reachable from its branches and tags", src.URL, src.Commit)
	}
	if commit.Hash != want {
		return nil, unavailable("the repository %s sent commit %s for %s", src.URL, commit.Hash, src.Commit)
	}
	return readTree(ctx, st, commit, src, o.limits())
}

// advertises reports whether h is a branch or tag the server advertised.
func advertises(ar *packp.AdvRefs, h plumbing.Hash) bool {
	for _, v := range ar.References {
		if v == h {
			return true
		}
	}
	for _, v := range ar.Peeled {
		if v == h {
			return true
		}
	}
	return ar.Head != nil && *ar.Head == h
}

func advertisedHashes(ar *packp.AdvRefs) []plumbing.Hash {
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	add := func(h plumbing.Hash) {
		if !h.IsZero() && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	if ar.Head != nil {
		add(*ar.Head)
	}
	for name, h := range ar.References {
		if strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, "refs/tags/") {
			add(h)
		}
	}
	return out
}

// readTree reads the files under src.Path of the commit's tree. A symbolic
// link or a submodule is refused, as an archive's link is: a fixture is
// regular files (and a link could lead a check out of its folder).
func readTree(ctx context.Context, st *memory.Storage, commit *object.Commit, src Git, lim fixture.Limits) (map[string][]byte, error) {
	tree, err := commit.Tree()
	if err != nil {
		return nil, unavailable("commit %s: its tree: %v", src.Commit, err)
	}
	if src.Path != "" {
		if tree, err = tree.Tree(src.Path); err != nil {
			return nil, &fixture.Error{Kind: fixture.ErrMissingManifest, Path: src.Path,
				Detail: fmt.Sprintf("commit %s of %s has no folder %q", src.Commit, src.URL, src.Path)}
		}
	}
	lim = withDefaults(lim)
	files := map[string][]byte{}
	read := map[plumbing.Hash][]byte{} // blobs read, dropped from st
	var total int64
	entries := 0
	// The walk is the repository's to shape: a few tree objects can name
	// each other 64 times over, 64^6 paths from 8 objects. So every entry
	// is counted, folders too, and what is kept beside a fixture (a local
	// run's evidence among it) is left out without being entered, as from
	// the folder on disk; the run's end stops the walk.
	type dir struct {
		path string
		tree *object.Tree
	}
	stack := []dir{{"", tree}}
	// Every path met, folders too: a tree git would not write (an entry
	// twice, a name with a slash beside the folder it names) is refused,
	// not read last-entry-wins, since git and every web view of the same
	// commit show the first: the fixture that ran must be the one a
	// reviewer of the pinned commit reads.
	seen := map[string]bool{}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, e := range d.tree.Entries {
			if err := ctx.Err(); err != nil {
				return nil, unavailable("commit %s: reading its tree: %v", src.Commit, err)
			}
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
				return nil, &fixture.Error{Kind: fixture.ErrBadSource, Path: d.path,
					Detail: fmt.Sprintf("its tree in commit %s has an entry named %q, which git does not write", src.Commit, e.Name)}
			}
			p := e.Name
			if d.path != "" {
				p = d.path + "/" + e.Name
			}
			if seen[p] {
				return nil, &fixture.Error{Kind: fixture.ErrBadSource, Path: p,
					Detail: fmt.Sprintf("its tree in commit %s holds this name twice, which git does not write (git shows the first, a reader taking the last another file)", src.Commit)}
			}
			seen[p] = true
			isDir := e.Mode == filemode.Dir
			if isDir && p == fixture.LocalEvidenceDir || !isDir && fixture.BesideFixture(p) {
				continue // as FromDir: a folder that only shares a beside-file's name is walked
			}
			if entries++; entries > lim.MaxEntries {
				return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("more than the %d entries (files, directories and others) allowed", lim.MaxEntries)}
			}
			switch {
			case isDir:
				sub, err := object.GetTree(st, e.Hash)
				if err != nil {
					return nil, unavailable("commit %s: folder %q: %v", src.Commit, p, err)
				}
				stack = append(stack, dir{p, sub})
				continue
			case e.Mode == filemode.Regular, e.Mode == filemode.Executable, e.Mode == filemode.Deprecated:
			case e.Mode == filemode.Symlink:
				return nil, &fixture.Error{Kind: fixture.ErrNotRegular, Path: p, Detail: "is a symbolic link in the repository: a fixture holds regular files only"}
			case e.Mode == filemode.Submodule:
				return nil, &fixture.Error{Kind: fixture.ErrNotRegular, Path: p, Detail: "is a git submodule, which is not followed: put its files in the fixture"}
			default:
				return nil, &fixture.Error{Kind: fixture.ErrNotRegular, Path: p, Detail: fmt.Sprintf("has git mode %o, not a regular file", uint32(e.Mode))}
			}
			if data, ok := read[e.Hash]; ok {
				// The same content at another path: the same bytes.
				if total += int64(len(data)); total > lim.MaxTotalBytes {
					return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("more than the %d bytes allowed in all", lim.MaxTotalBytes)}
				}
				if len(files) >= lim.MaxFiles {
					return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("more than the %d files allowed", lim.MaxFiles)}
				}
				files[p] = data
				continue
			}
			blob, err := object.GetBlob(st, e.Hash)
			if err != nil {
				return nil, unavailable("commit %s: file %q: %v", src.Commit, p, err)
			}
			if blob.Size > lim.MaxFileBytes {
				return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Path: p, Detail: fmt.Sprintf("%d bytes, more than the %d allowed per file", blob.Size, lim.MaxFileBytes)}
			}
			if total += blob.Size; total > lim.MaxTotalBytes {
				return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("more than the %d bytes allowed in all", lim.MaxTotalBytes)}
			}
			if len(files) >= lim.MaxFiles {
				return nil, &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("more than the %d files allowed", lim.MaxFiles)}
			}
			rd, err := blob.Reader()
			if err != nil {
				return nil, unavailable("commit %s: file %q: %v", src.Commit, p, err)
			}
			// Read into a buffer of the blob's size (bounded above), and the
			// object dropped once read: the fetched objects and the
			// fixture's files are not both held whole.
			data := make([]byte, blob.Size)
			_, err = io.ReadFull(rd, data)
			if err == nil {
				if extra, _ := rd.Read(make([]byte, 1)); extra > 0 {
					err = fmt.Errorf("longer than the %d bytes its object says", blob.Size)
				}
			}
			_ = rd.Close()
			if err != nil {
				return nil, unavailable("commit %s: file %q: %v", src.Commit, p, err)
			}
			files[p] = data
			read[e.Hash] = data
			delete(st.Objects, e.Hash)
			delete(st.Blobs, e.Hash)
		}
	}
	return files, nil
}

// checkDeclaredSizes reads a pack's object headers and refuses it when it
// holds more than maxObjects objects or when its objects, as declared,
// would inflate to more than maxTotal bytes in all (each object's own size,
// and for a delta also the size of the object it makes, its header's
// second number: both are held while the pack is parsed), or one of them
// to more than maxObject (a fixture's file may not be larger; the parser
// grows each object's buffer as it fills, so one large object costs about
// twice its size). Nothing is kept: each object is inflated into nothing,
// held to its declared size by the scanner.
func checkDeclaredSizes(pack io.ReadSeeker, maxObjects uint32, maxObject, maxTotal int64) error {
	if _, err := pack.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sc := packfile.NewScanner(pack)
	_, count, err := sc.Header()
	if err != nil {
		return err
	}
	if count > maxObjects {
		return fmt.Errorf("its pack holds %d objects, more than the %d a fixture fetch may", count, maxObjects)
	}
	tooMuch := errors.New("its objects inflate to more than a fixture fetch may hold")
	left := maxTotal
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return err
		}
		if oh.Length < 0 || oh.Length > left {
			return tooMuch
		}
		if oh.Length > maxObject {
			return &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("the repository sends an object of %d bytes, more than the %d allowed per file", oh.Length, maxObject)}
		}
		left -= oh.Length
		head := &headWriter{}
		if _, _, err := sc.NextObject(head); err != nil {
			return err
		}
		if oh.Type.IsDelta() {
			target, ok := deltaTargetSize(head.b)
			if !ok {
				return errors.New("its pack holds a delta without a valid header")
			}
			if target > left {
				return tooMuch
			}
			if target > maxObject {
				return &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("the repository sends an object of %d bytes, more than the %d allowed per file", target, maxObject)}
			}
			left -= target
		}
	}
	return nil
}

// headWriter keeps the first bytes written to it (a delta's header) and
// drops the rest.
type headWriter struct{ b []byte }

func (h *headWriter) Write(p []byte) (int, error) {
	if room := 32 - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// deltaTargetSize reads a delta's header: the size of its base, then the
// size of the object it makes, each a little-endian base-128 number.
func deltaTargetSize(b []byte) (int64, bool) {
	i := 0
	next := func() (uint64, bool) {
		var v uint64
		for shift := uint(0); i < len(b) && shift < 64; shift += 7 {
			c := b[i]
			i++
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	if _, ok := next(); !ok {
		return 0, false
	}
	t, ok := next()
	if !ok || t > math.MaxInt64 {
		return 0, false
	}
	return int64(t), true
}

// packBounds refuses a pack with too many objects or whose objects, as
// their headers declare them, inflate to too much, before inflating them.
type packBounds struct {
	maxObjects uint32
	left       int64
	err        error
}

func (b *packBounds) OnHeader(count uint32) error {
	if count > b.maxObjects {
		b.err = fmt.Errorf("its pack holds %d objects, more than the %d a fixture fetch may", count, b.maxObjects)
		return b.err
	}
	return nil
}

func (b *packBounds) OnInflatedObjectHeader(_ plumbing.ObjectType, size, _ int64) error {
	if b.left -= size; size < 0 || b.left < 0 {
		b.err = errors.New("its objects inflate to more than a fixture fetch may hold")
		return b.err
	}
	return nil
}

func (b *packBounds) OnInflatedObjectContent(plumbing.Hash, int64, uint32, []byte) error { return nil }
func (b *packBounds) OnFooter(plumbing.Hash) error                                       { return nil }

// errPackTooLarge ends a response read past the fetch's bound.
var errPackTooLarge = errors.New("the server sent more than a fixture fetch may receive")

// MaxRefsBytes bounds a git server's reference discovery (info/refs), as
// it is read: go-git keeps every reference it reads, about twice its bytes
// again in memory, and a run author's server answering with 240 MiB of
// references took the fetch to 516 MiB, past the node-agent's 512Mi. A
// repository with every pull request's refs advertised (about 200,000)
// answers with under 20 MiB.
const MaxRefsBytes = 32 << 20

// errRefsTooLarge ends a reference discovery read past MaxRefsBytes.
var errRefsTooLarge = fmt.Errorf("the server advertises more than %d bytes of references", MaxRefsBytes)

// cappedTransport cuts every response body once the fetch received max
// bytes in all.
type cappedTransport struct {
	next http.RoundTripper
	left int64
	used *atomic.Int64
}

func (c *cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body := &cappedBody{rc: resp.Body, t: c, refsLeft: -1}
	if strings.HasSuffix(req.URL.Path, "/info/refs") {
		body.refsLeft = MaxRefsBytes
	}
	resp.Body = body
	return resp, nil
}

type cappedBody struct {
	rc io.ReadCloser
	t  *cappedTransport
	// refsLeft is what a reference discovery may still send; -1 for
	// other responses. A read past it fails, and so does every read after.
	refsLeft int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.t.used.Add(int64(n)) > b.t.left {
		return n, errPackTooLarge
	}
	if b.refsLeft >= 0 {
		// Sticky: io.ReadFull drops the error of a read that filled its
		// buffer, and go-git's pkt-line scanner reads that way.
		if b.refsLeft < int64(n) {
			b.refsLeft = 0
			return 0, errRefsTooLarge
		}
		b.refsLeft -= int64(n)
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
