package controllers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
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

// leaseExpiry is when a Lease stops being fresh.
func leaseExpiry(lease *coordinationv1.Lease, defaultDuration time.Duration) time.Time {
	renewed := lease.CreationTimestamp.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	} else if lease.Spec.AcquireTime != nil {
		renewed = lease.Spec.AcquireTime.Time
	}
	d := defaultDuration
	if lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return renewed.Add(d)
}

// nodeReader reads HarnessNodes and their Leases from the cache and judges
// them with judgeNode. It is the only reader of nodes in the controller:
// dispatch, node loss, deadlines and the node watcher all go through it.
type nodeReader struct {
	client       client.Reader
	defaultLease time.Duration
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
	v := judgeNode(name, node, nr.leaseOf(ctx, node), nr.defaultLease)
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
		v := judgeNode(n.Name, n, nr.leaseOf(ctx, n), nr.defaultLease)
		v.labels = nr.labelsOf(ctx, n)
		views = append(views, v)
	}
	return views, nil
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
	return nodeReader{client: r.client, defaultLease: r.opts.DefaultLeaseDuration}
}

// nodeHealthOf reads a node and its Lease from the cache and judges its
// heartbeat now. A read error other than NotFound judges the node healthy:
// the cache answers from memory, and calling a node lost on a read error
// would end runs that are fine.
func (r *HarnessRunReconciler) nodeHealthOf(ctx context.Context, name string) nodeHealth {
	now := r.clock.Now()
	v, err := r.nodeReader().get(ctx, name)
	if err != nil {
		return nodeHealth{fresh: true, expiresAt: now.Add(r.opts.DefaultLeaseDuration)}
	}
	return v.health(now)
}
