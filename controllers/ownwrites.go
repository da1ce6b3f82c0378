package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// ownWrites remembers, per run, the resourceVersion of this controller's
// last successful write that the cache does not show yet.
//
// Why: a pass that binds a run writes twice (the finalizer, then the
// status), and each write comes back through the watch. The event of the
// first write (or of the version the pass read) can queue the run again
// after the pass ended and before the cache shows the pass's last write; the
// next pass would then decide again from a status this controller already
// replaced, and its write would fail with a Conflict: a wasted request to
// the API server, and a backed-off retry. A pass that reads an older version
// than this controller wrote ends at once instead; the watch event of the
// newer version queues the run again.
//
// Versions are compared as the API server defines resourceVersions to
// compare (k8s.io/apimachinery/pkg/util/resourceversion); where they do not
// compare, a pass goes ahead as before, and the optimistic lock of its
// writes keeps it correct either way.
type ownWrites struct {
	mu      sync.Mutex
	written map[types.NamespacedName]string
}

func newOwnWrites() *ownWrites {
	return &ownWrites{written: map[types.NamespacedName]string{}}
}

// wrote records that a write of run succeeded with version rv.
func (o *ownWrites) wrote(run types.NamespacedName, rv string) {
	if rv == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.written[run] = rv
}

// stale reports whether rv is older than this controller's last write of
// run.
func (o *ownWrites) stale(run types.NamespacedName, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.written[run]
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(rv, w)
	return err == nil && c < 0
}

// observe is called with every version of run the cache shows: once it
// shows our last write, or a newer version, the entry goes.
func (o *ownWrites) observe(run types.NamespacedName, rv string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.written[run]
	if !ok {
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, w); err != nil || c >= 0 {
		delete(o.written, run)
	}
}

// forget drops a deleted run.
func (o *ownWrites) forget(run types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.written, run)
}
