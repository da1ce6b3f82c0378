// Package fixturesource fetches fixtures that live outside the cluster's
// objects: a folder of a git repository at a pinned commit, or an OCI
// artifact pinned by digest. It checks the pin (the commit read is the one
// asked for, the manifest and layer have the digests asked for), reads the
// files under the same rules and bounds as every fixture source (package
// fixture), and keeps each fixture in a cache on the node, keyed by its
// source and pin, bounded in bytes with least-recently-used eviction.
//
// Git. go-git, in process: the run's credentials stay in the node-agent's
// memory (never on a command line or in a child's environment), and the
// files are read from git's objects without a checkout, so no hook, filter,
// attribute, submodule or configuration of the repository ever applies, and
// no link is ever made on disk. A symbolic link or a submodule in the
// fixture's folder is refused, as an archive's link is.
//
// OCI. A fixture artifact is an OCI image manifest with artifactType
// FixtureArtifactType, the empty config, and one layer of media type
// FixtureLayerMediaType: the fixture folder as a gzip-compressed tar
// (Push makes one). go-containerregistry pulls it by digest.
//
// The cache never serves a fixture a run may not read: a cache entry is
// keyed by the repository (or OCI repository) as well as the pin, and
// before a cached fixture is used the source is asked again, with the
// run's credentials, whether they reach it (git's reference advertisement,
// a HEAD of the OCI manifest).
package fixturesource

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// ErrUnavailable marks a fixture source that could not be fetched or was
// refused: an unknown repository, commit or artifact, a pin that does not
// match, refused credentials, a server that does not answer or sends too
// much. A fetched fixture that breaks a rule is a *fixture.Error instead.
var ErrUnavailable = errors.New("fixture source unavailable")

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}

// DefaultLimits bound a git or OCI fixture: bigger than a ConfigMap's (the
// point of these sources), still held in the node-agent's memory while the
// run dir is written.
var DefaultLimits = fixture.Limits{
	MaxFileBytes:  32 << 20,
	MaxTotalBytes: 256 << 20,
	MaxFiles:      50000,
	MaxEntries:    100000,
}

// memoryReserve is what a node-agent is taken to need besides the fixtures
// it holds (its heap and binary at work: 40-60 MiB measured).
const memoryReserve int64 = 64 << 20

// LimitsFor are DefaultLimits lowered so that a node-agent with the memory
// bound memoryLimit can hold every fixture it may hold at once: one per
// slot for as long as the run lasts, twice over (the fixture's files in
// its memory, and the same bytes in the run dir's tmpfs, whose pages count
// against the cgroup of the process that wrote them), and a fetch in
// flight, about twice its size again. So each fixture may take
// (memoryLimit - 64 MiB) / (2 slots + 2), but never more than
// DefaultLimits, nor less than a ConfigMap fixture may (8 MiB). A review
// showed two runs naming 224 MiB fixtures at once (each under the default
// 256 MiB) take a node-agent bound to 512 MiB past its bound: the kernel
// killed it, and every run of the node with it. memoryLimit <= 0 (no
// bound) is DefaultLimits.
func LimitsFor(memoryLimit int64, slots int) fixture.Limits {
	l := DefaultLimits
	if memoryLimit <= 0 || slots <= 0 {
		return l
	}
	each := (memoryLimit - memoryReserve) / int64(2*slots+2)
	each = max(min(each, l.MaxTotalBytes), fixture.DefaultMaxTotalBytes)
	l.MaxTotalBytes = each
	l.MaxFileBytes = min(l.MaxFileBytes, each)
	return l
}

// Options say how to reach sources and what a fetch may take.
type Options struct {
	// RootCAs verify the sources' certificates; nil is the system's roots.
	RootCAs *x509.CertPool
	// Limits bound each fixture (DefaultLimits where zero).
	Limits fixture.Limits
	// MaxPackBytes bounds what a git server may send in one fetch
	// (DefaultMaxPackBytes when 0).
	MaxPackBytes int64
	// MaxInflatedBytes bounds the git objects of one fetch, inflated
	// (DefaultMaxInflatedBytes when 0).
	MaxInflatedBytes int64
	// MaxObjects bounds the git objects of one fetch (DefaultMaxObjects
	// when 0).
	MaxObjects uint32
	// FetchTimeout bounds one fetch or pull, whatever the server does
	// (DefaultFetchTimeout when 0).
	FetchTimeout time.Duration
}

// DefaultFetchTimeout bounds one git fetch or OCI pull. The transport
// bounds each wait for an answer's headers, not the answer: a server that
// trickles its pack held a local run (which has no controller's deadline)
// for ever, and a node's slot until the run's deadline. The largest pack
// allowed takes a few minutes on a slow link.
const DefaultFetchTimeout = 10 * time.Minute

// withFetchTimeout is ctx bounded by o's fetch timeout, and what says a
// fetch's error as the timeout's when it is why the fetch ended.
func (o Options) withFetchTimeout(ctx context.Context) (context.Context, context.CancelFunc, func(error) error) {
	limit := o.FetchTimeout
	if limit <= 0 {
		limit = DefaultFetchTimeout
	}
	fctx, cancel := context.WithTimeout(ctx, limit)
	explain := func(err error) error {
		if err != nil && ctx.Err() == nil && errors.Is(fctx.Err(), context.DeadlineExceeded) {
			return unavailable("the fixture's fetch did not finish within %s, and was stopped: %v", limit, err)
		}
		return err
	}
	return fctx, cancel, explain
}

func (o Options) limits() fixture.Limits { return withDefaults(o.Limits) }

func withDefaults(l fixture.Limits) fixture.Limits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultLimits.MaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultLimits.MaxTotalBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultLimits.MaxFiles
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	return l
}

func (o Options) maxPackBytes() int64 {
	if o.MaxPackBytes > 0 {
		return o.MaxPackBytes
	}
	return DefaultMaxPackBytes
}

func (o Options) maxInflatedBytes() int64 {
	if o.MaxInflatedBytes > 0 {
		return o.MaxInflatedBytes
	}
	// The objects inflated are the fixture's files and the trees naming
	// them: a fixture's bound, lowered, lowers this one with it.
	return min(DefaultMaxInflatedBytes, max(2*o.limits().MaxTotalBytes, fixture.DefaultMaxTotalBytes))
}

func (o Options) maxObjects() uint32 {
	if o.MaxObjects > 0 {
		return o.MaxObjects
	}
	return DefaultMaxObjects
}
