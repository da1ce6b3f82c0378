// Package controllers holds the reconcilers of the HarnessFacts controller:
// HarnessRun dispatch, deadlines, node loss, retries, cancel and TTL; and
// HarnessSuite, which runs a matrix of agents × fixtures as HarnessRuns.
//
// The RBAC the controller needs is declared here, next to the code that uses
// it; `make manifests` turns it into config/rbac/controller:
//
//   - HarnessRuns: read (cache), patch (finalizer), delete (TTL); their
//     status: patch (binding, Pending messages, Failed, StopRequested);
//   - HarnessNodes: read only; the node-agents own them;
//   - Leases: read the node-agents' heartbeats; create and update its own
//     leader election Lease. Both are in the controller's own namespace, so
//     this right is a Role there (config/controller/lease_role.yaml, the
//     chart's controller-rbac.yaml), written by hand: a ClusterRole would let
//     the controller write every Lease of the cluster, kube-node-lease's
//     included;
//   - HarnessSuites: read (cache); their status: patch; their finalizers:
//     update (the runs' owner references block the suite's deletion);
//   - HarnessRuns of a suite: create, and deletecollection (an earlier
//     round's runs, by label);
//   - ConfigMaps: read (cache, only those labelled
//     harnessfacts.io/fixture=true): the suites' fixtures, hashed;
//   - HarnessPolicies and Namespaces: read (cache): a namespace's
//     fairShare, from the policies whose namespaceSelector matches its
//     labels;
//   - Events (events.k8s.io, and core for the leader election's): create and
//     patch (series);
//   - TokenReviews and SubjectAccessReviews: create, to authenticate and
//     authorize the callers of its metrics endpoint.
//
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnessruns,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnesssuites,verbs=get;list;watch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnesssuites/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnesssuites/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnessruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnessruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnessnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnesspolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=harnessfacts.io,resources=harnesspolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
package controllers
