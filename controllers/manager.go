package controllers

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// LeaderElectionID names the Lease the controller's replicas elect a leader
// through.
const LeaderElectionID = "harnessfacts-controller"

// ManagerConfig is what differs between the managers that run the
// controller: the binary, `harnessfacts dev` and the tests.
type ManagerConfig struct {
	// Scheme knows the built-in types and the harnessfacts.io types.
	Scheme *runtime.Scheme
	// LeaseNamespace, when set, is the only namespace whose Leases are
	// cached (the node-agents' heartbeats); otherwise every namespace's.
	LeaseNamespace string
	// Namespaces, when set, are the only namespaces cached at all; a test
	// uses one per controller so controllers running side by side do not
	// see each other's objects.
	Namespaces []string
	// LeaderElection: elect a leader through a Lease in
	// LeaderElectionNamespace (the pod's namespace when empty), released on
	// shutdown so a new replica takes over at once.
	LeaderElection          bool
	LeaderElectionNamespace string
}

// ManagerOptions returns the options of a manager that runs the controller.
// The cache drops managed fields (half of a run's size in memory, never
// read) and holds only the fixture ConfigMaps of suites, never the evidence,
// and of those and of runs none of the content run authors make large
// (CacheByObject, cache_transform.go). Metrics and health endpoints are the caller's to set.
func ManagerOptions(c ManagerConfig) ctrl.Options {
	byObject := CacheByObject()
	if c.LeaseNamespace != "" {
		byObject[&coordinationv1.Lease{}] = cache.ByObject{Namespaces: map[string]cache.Config{c.LeaseNamespace: {}}}
	}
	opts := ctrl.Options{
		Scheme: c.Scheme,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         byObject,
		},
		LeaderElection:                c.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       c.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	}
	if len(c.Namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range c.Namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
