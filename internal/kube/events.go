package kube

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// eventQueue bounds the Events waiting to be written: a node-agent whose
// API server does not answer drops Events (and says so) rather than grow.
const eventQueue = 1000

// Recorder writes events.k8s.io/v1 Events in the background, as client-go's
// tools/events does (which imports client-go's scheme of every group): one
// Event a call, named for the object and the time, reported by Controller
// as Controller-<host name>. Unlike tools/events it does not fold repeats
// into a series: a node-agent writes a few Events a run.
type Recorder struct {
	client     *Client
	controller string
	instance   string
	log        logr.Logger

	mu      sync.Mutex
	queue   chan *eventsv1.Event
	dropped int
}

// NewRecorder makes a Recorder reporting as controller; Run writes its
// Events.
func NewRecorder(c *Client, controller string, log logr.Logger) *Recorder {
	host, _ := os.Hostname()
	return &Recorder{client: c, controller: controller, instance: controller + "-" + host, log: log,
		queue: make(chan *eventsv1.Event, eventQueue)}
}

// Eventf records an Event about regarding (and related, when not nil), as
// tools/events' EventRecorder does.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref, err := reference(regarding)
	if err != nil {
		r.log.Error(err, "an Event about an object of no known kind was not written", "reason", reason)
		return
	}
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ref.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           ref,
		Note:                fmt.Sprintf(note, args...),
		Type:                eventtype,
	}
	if ev.Namespace == "" {
		ev.Namespace = metav1.NamespaceDefault
	}
	if related != nil {
		if rel, err := reference(related); err == nil {
			ev.Related = &rel
		}
	}
	select {
	case r.queue <- ev:
	default:
		r.mu.Lock()
		r.dropped++
		n := r.dropped
		r.mu.Unlock()
		r.log.Info("WARNING an Event was dropped: the API server is not taking them as fast as they come", "dropped", n,
			"regarding", ref.Namespace+"/"+ref.Name, "reason", reason)
	}
}

// Run writes the recorded Events until ctx ends, then those still queued,
// for up to flush. An Event taken from the queue is written even if ctx
// ends meanwhile: the end of ctx means flush and stop, not drop.
func (r *Recorder) Run(ctx context.Context, flush time.Duration) {
	base := context.WithoutCancel(ctx)
	for {
		select {
		case ev := <-r.queue:
			r.write(base, ev)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(base, flush)
			defer cancel()
			for {
				select {
				case ev := <-r.queue:
					if fctx.Err() != nil {
						r.log.Info("WARNING Events not written: the node-agent stopped before the API server took them", "regarding", ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason)
						continue
					}
					r.write(fctx, ev)
				default:
					return
				}
			}
		}
	}
}

func (r *Recorder) write(ctx context.Context, ev *eventsv1.Event) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.client.Create(wctx, ev); err != nil {
		r.log.Error(err, "an Event was not written", "regarding", ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason)
	}
}

func reference(obj runtime.Object) (corev1.ObjectReference, error) {
	o, ok := obj.(Object)
	if !ok {
		return corev1.ObjectReference{}, fmt.Errorf("%T has no metadata", obj)
	}
	gvks, _, err := Scheme.ObjectKinds(obj)
	if err != nil {
		return corev1.ObjectReference{}, err
	}
	apiVersion, kind := gvks[0].ToAPIVersionAndKind()
	return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(),
		UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()}, nil
}
