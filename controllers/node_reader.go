package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// nodeView is the controller's one judgement of a HarnessNode and its
// heartbeat Lease. Dispatch asks whether the node can take a run (ready),
// node loss and deadlines whether it was lost (health); both come from the
// same reading, so the two questions never disagree about a node.
type nodeView struct {
	name string
	// gone: the HarnessNode does not exist (any more).
	gone bool

	slots    int32
	labels   map[string]string
	adapters map[harnessv1.Adapter]string

	// willingly: the node-agent reports Ready, the node is not cordoned
	// and has slots; ready is that and a Lease fresh at the time of at.
	willingly bool
	ready     bool

	// lease is the heartbeat Lease's namespace/name, "" when there is none;
	// leaseExpires when it stops being fresh unless renewed.
	lease        string
	leaseExpires time.Time
}

// judgeNode judges a HarnessNode (nil when it is gone) and its Lease (nil
// when there is none). The result does not depend on the time; at and
// health read it at a moment.
func judgeNode(name string, node *harnessv1.HarnessNode, lease *coordinationv1.Lease, defaultLease time.Duration) nodeView {
	if node == nil {
		return nodeView{name: name, gone: true}
	}
	v := nodeView{name: node.Name, slots: node.Spec.Slots, labels: node.Status.Labels, adapters: map[harnessv1.Adapter]string{}}
	for _, a := range node.Status.Adapters {
		v.adapters[a.Name] = a.Version
	}
	v.willingly = !node.Spec.Unschedulable && node.Spec.Slots > 0 &&
		meta.IsStatusConditionTrue(node.Status.Conditions, harnessv1.ConditionNodeReady)
	if lease != nil {
		v.lease = lease.Namespace + "/" + lease.Name
		v.leaseExpires = leaseExpiry(lease, defaultLease)
	}
	return v
}

// at judges readiness at now: Ready means the node's node-agent reports
// Ready, its Lease is fresh, it is not cordoned and has slots.
func (v nodeView) at(now time.Time) nodeView {
	v.ready = !v.gone && v.willingly && v.lease != "" && now.Before(v.leaseExpires)
	return v
}

// nodeHealth is what the controller knows of a node's heartbeat at a moment.
type nodeHealth struct {
	// fresh: the Lease was renewed within its duration.
	fresh bool
	// expiresAt is when the Lease stops being fresh unless renewed.
	expiresAt time.Time
	// lost: the node is gone or its heartbeat stopped; lostAt since when,
	// and why in plain words.
	lost   bool
	lostAt time.Time
	why    string
	// recheck: the Lease expired in the cache but the loss is not
	// confirmed (confirmLost); judge again at expiresAt.
	recheck bool
}

// health judges the node's heartbeat at now.
func (v nodeView) health(now time.Time) nodeHealth {
	switch {
	case v.gone:
		return nodeHealth{lost: true, lostAt: now, why: "its HarnessNode was deleted"}
	case v.lease == "":
		return nodeHealth{lost: true, lostAt: now, why: "it has no heartbeat Lease"}
	case !now.Before(v.leaseExpires):
		return nodeHealth{expiresAt: v.leaseExpires, lost: true, lostAt: v.leaseExpires,
			why: fmt.Sprintf("its heartbeat Lease %s expired at %s", v.lease, v.leaseExpires.UTC().Format(time.RFC3339))}
	default:
		return nodeHealth{fresh: true, expiresAt: v.leaseExpires}
	}
}

// leaseExpiry is when a Lease stops being fresh, by its renewTime.
func leaseExpiry(lease *coordinationv1.Lease, defaultDuration time.Duration) time.Time {
	renewed := renewedAt(lease)
	d := defaultDuration
	if lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return renewed.Add(d)
}

// renewedAt is when the Lease says it was last renewed.
func renewedAt(lease *coordinationv1.Lease) time.Time {
	switch {
	case lease.Spec.RenewTime != nil:
		return lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		return lease.Spec.AcquireTime.Time
	}
	return lease.CreationTimestamp.Time
}

// nodeReader reads HarnessNodes and their Leases from the cache and judges
// them with judgeNode. It is the only reader of nodes in the controller:
// dispatch, node loss, deadlines and the node watcher all go through it.
type nodeReader struct {
	client       client.Reader
	defaultLease time.Duration
	// leases, when set, times each Lease by when this controller saw it
	// renewed rather than by the renewTime its node-agent wrote.
	leases *leaseClock
}

// leaseClock times heartbeat Leases by the controller's own clock, as
// kube-controller-manager times nodes' Leases: a Lease is renewed when the
// controller sees its renewTime change, and expires a lease duration after
// that. Judged by the renewTime a node-agent writes with its own clock, a
// node whose clock ran a lease behind the controller's was lost all the
// time; and after the API server was away for longer than a lease, every
// node was lost at once, each run failed NodeLost while its node-agent ran
// it, before the first renewal since could be seen.
//
// So a Lease first seen (the controller's start) gets a whole lease from
// then, and a node is judged lost on an expired Lease only once a read
// straight from the API server shows the same renewTime, and no such read
// has failed within a lease (confirmLost): the node-agents had the API
// server for a whole lease to renew in.
type leaseClock struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[types.NamespacedName]leaseSeen
	// trouble is when a read of a Lease from the API server last failed.
	trouble time.Time
}

type leaseSeen struct {
	renewed, at time.Time
}

func newLeaseClock(clk clock.PassiveClock) *leaseClock {
	return &leaseClock{clock: clk, seen: map[types.NamespacedName]leaseSeen{}}
}

// expiry is when lease stops being fresh by the controller's clock, given
// its expiry by its own renewTime.
func (c *leaseClock) expiry(lease *coordinationv1.Lease, own time.Time) time.Time {
	renewed := renewedAt(lease)
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.seen[key]
	if !ok || !s.renewed.Equal(renewed) {
		s = leaseSeen{renewed: renewed, at: c.clock.Now()}
		c.seen[key] = s
	}
	return s.at.Add(own.Sub(renewed))
}

// failedRead notes that the API server could not be read.
func (c *leaseClock) failedRead() {
	c.mu.Lock()
	c.trouble = c.clock.Now()
	c.mu.Unlock()
}

// quietSince is when the API server last could not be read.
func (c *leaseClock) quietSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trouble
}

// get reads the node called name. A node that does not exist is a view
// with gone set; err is any other read error, on which the caller cannot
// judge the node (and must not call it lost).
func (nr nodeReader) get(ctx context.Context, name string) (nodeView, error) {
	node := &harnessv1.HarnessNode{}
	if err := nr.client.Get(ctx, types.NamespacedName{Name: name}, node, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return judgeNode(name, nil, nil, nr.defaultLease), nil
		}
		return nodeView{}, fmt.Errorf("getting HarnessNode %s: %w", name, err)
	}
	lease := nr.leaseOf(ctx, node)
	v := judgeNode(name, node, lease, nr.defaultLease)
	nr.observe(&v, lease)
	v.labels = nr.labelsOf(ctx, node)
	return v, nil
}

// list reads every HarnessNode (a few dozen, not runs).
func (nr nodeReader) list(ctx context.Context) ([]nodeView, error) {
	nodes := &harnessv1.HarnessNodeList{}
	if err := nr.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing HarnessNodes: %w", err)
	}
	views := make([]nodeView, 0, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		lease := nr.leaseOf(ctx, n)
		v := judgeNode(n.Name, n, lease, nr.defaultLease)
		nr.observe(&v, lease)
		v.labels = nr.labelsOf(ctx, n)
		views = append(views, v)
	}
	return views, nil
}

// observe times the view's Lease by the controller's clock (leaseClock).
func (nr nodeReader) observe(v *nodeView, lease *coordinationv1.Lease) {
	if nr.leases != nil && lease != nil {
		v.leaseExpires = nr.leases.expiry(lease, v.leaseExpires)
	}
}

// labelsOf is what spec.nodeSelector is matched against: the labels of the
// Node of the HarnessNode's name, read by the controller, when there is
// one. A HarnessNode's status.labels are its node-agent's own write: a
// compromised node-agent labelled itself with another tenant's pool (or
// another node's kubernetes.io/hostname), was bound that tenant's runs,
// and the run source served it their Secrets. Only where no Node of that
// name exists (harnessfacts dev, a machine outside a cluster) are the
// node-agent's labels taken. The node watcher watches Nodes: a controller
// whose role cannot list them does not start (its cache never syncs,
// which it says); a read that fails otherwise falls back, and the log
// says so.
func (nr nodeReader) labelsOf(ctx context.Context, node *harnessv1.HarnessNode) map[string]string {
	n := &corev1.Node{}
	err := nr.client.Get(ctx, types.NamespacedName{Name: node.Name}, n, client.UnsafeDisableDeepCopy)
	switch {
	case err == nil:
		return n.Labels
	case apierrors.IsNotFound(err):
		return node.Status.Labels
	default:
		nodeLabelsUnread.Do(func() {
			log.FromContext(ctx).Error(err, "cannot read Nodes: spec.nodeSelector is matched against the labels each HarnessNode's node-agent reports, which a compromised node-agent chooses; grant the controller get, list and watch on nodes", "node", node.Name)
		})
		return node.Status.Labels
	}
}

// nodeLabelsUnread says once that Nodes could not be read.
var nodeLabelsUnread sync.Once

// leaseOf reads the heartbeat Lease the node names in its status; nil when
// it names none or the cache has none.
func (nr nodeReader) leaseOf(ctx context.Context, node *harnessv1.HarnessNode) *coordinationv1.Lease {
	ns := node.Status.LeaseNamespace
	if ns == "" {
		return nil
	}
	l := &coordinationv1.Lease{}
	if err := nr.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: node.Name}, l, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return l
}

// nodeSnapshot is the last reading of every node, reused until the node
// watcher reports a change of a node or of its Lease.
type nodeSnapshot struct {
	mu    sync.Mutex
	gen   atomic.Uint64 // bumped by the node watcher on every change it sees
	built uint64
	valid bool
	views []nodeView
}

// changed invalidates the snapshot.
func (s *nodeSnapshot) changed() { s.gen.Add(1) }

// read returns every node judged at now, read through nr when a node or
// Lease changed since the last reading.
func (s *nodeSnapshot) read(ctx context.Context, nr nodeReader, now time.Time) ([]nodeView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen := s.gen.Load(); !s.valid || s.built != gen {
		views, err := nr.list(ctx)
		if err != nil {
			return nil, err
		}
		s.views, s.built, s.valid = views, gen, true
	}
	out := make([]nodeView, len(s.views))
	for i, v := range s.views {
		out[i] = v.at(now)
	}
	return out, nil
}

// nodeReader is the reconciler's reader of nodes.
func (r *HarnessRunReconciler) nodeReader() nodeReader {
	return nodeReader{client: r.client, defaultLease: r.opts.DefaultLeaseDuration, leases: r.leases}
}

// nodeHealthOf reads a node and its Lease from the cache and judges its
// heartbeat now. A read error other than NotFound judges the node healthy:
// the cache answers from memory, and calling a node lost on a read error
// would end runs that are fine. An expired Lease is confirmed first
// (confirmLost).
func (r *HarnessRunReconciler) nodeHealthOf(ctx context.Context, name string) nodeHealth {
	now := r.clock.Now()
	v, err := r.nodeReader().get(ctx, name)
	if err != nil {
		return nodeHealth{fresh: true, expiresAt: now.Add(r.opts.DefaultLeaseDuration)}
	}
	h := v.health(now)
	if h.lost && v.lease != "" {
		return r.confirmLost(ctx, v, h, now)
	}
	return h
}

// confirmLost judges an expired Lease again from the API server itself,
// not the cache: the cache does not see renewals while the API server is
// away, and the first renewal after it came back may not have reached it.
// The node is lost only when the API server shows the renewTime the cache
// had and could be read for a whole lease before now; otherwise it is
// fresh until then, and looked at again.
func (r *HarnessRunReconciler) confirmLost(ctx context.Context, v nodeView, h nodeHealth, now time.Time) nodeHealth {
	wait := func(until time.Time) nodeHealth { return nodeHealth{fresh: true, expiresAt: until, recheck: true} }
	ns, name, _ := strings.Cut(v.lease, "/")
	lease := &coordinationv1.Lease{}
	// FixtureReader is the manager's API reader (uncached, required):
	// the one reader here that asks the API server itself.
	if err := r.opts.FixtureReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nodeHealth{lost: true, lostAt: now, why: fmt.Sprintf("its heartbeat Lease %s was deleted", v.lease)}
		}
		r.leases.failedRead()
		log.FromContext(ctx).Error(err, "the API server could not be asked whether a node's heartbeat Lease expired; judging it later", "node", v.name)
		return wait(now.Add(time.Second))
	}
	own := leaseExpiry(lease, r.opts.DefaultLeaseDuration)
	expires := r.leases.expiry(lease, own)
	if now.Before(expires) {
		return wait(expires) // renewed since the cache's copy
	}
	if quiet := r.leases.quietSince().Add(own.Sub(renewedAt(lease))); now.Before(quiet) {
		return wait(quiet)
	}
	return h
}
