package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The options every manager of the controller is built from (the binary,
// `harnessfacts dev`, the envtest suites); the suites show they run.
func TestManagerOptions(t *testing.T) {
	o := ManagerOptions(ManagerConfig{LeaderElection: true, LeaderElectionNamespace: "hf"})
	if !o.LeaderElection || o.LeaderElectionID != LeaderElectionID || o.LeaderElectionNamespace != "hf" || !o.LeaderElectionReleaseOnCancel {
		t.Errorf("leader election: %v %q %q release %v", o.LeaderElection, o.LeaderElectionID, o.LeaderElectionNamespace, o.LeaderElectionReleaseOnCancel)
	}
	if o.Cache.DefaultNamespaces != nil {
		t.Errorf("the binary's cache is limited to namespaces %v", o.Cache.DefaultNamespaces)
	}

	// Managed fields never reach the cache.
	run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: "r", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	got, err := o.Cache.DefaultTransform(run)
	if err != nil {
		t.Fatal(err)
	}
	if mf := got.(*harnessv1.HarnessRun).ManagedFields; mf != nil {
		t.Errorf("managed fields kept in the cache: %v", mf)
	}

	// Only fixture ConfigMaps, never the evidence; Leases of every
	// namespace unless told.
	byKind := map[string]string{}
	for obj, by := range o.Cache.ByObject {
		sel := ""
		if by.Label != nil {
			sel = by.Label.String()
		}
		for ns := range by.Namespaces {
			sel += "ns=" + ns
		}
		switch obj.(type) {
		case *corev1.ConfigMap:
			byKind["ConfigMap"] = sel
		case *coordinationv1.Lease:
			byKind["Lease"] = sel
		case *harnessv1.HarnessRun:
			// Every run; a transform keeps their content out
			// (cache_transform.go).
			byKind["HarnessRun"] = sel
		case *harnessv1.HarnessSuite:
			// Every suite; a transform keeps their metadata out.
			byKind["HarnessSuite"] = sel
		case *corev1.Node:
			// Every Node; a transform keeps only its labels.
			byKind["Node"] = sel
		default:
			byKind["other"] = sel
		}
	}
	if diff := cmp.Diff(map[string]string{"ConfigMap": harnessv1.LabelFixture + "=true", "HarnessRun": "", "HarnessSuite": "", "Node": ""}, byKind); diff != "" {
		t.Errorf("cache by object (-want +got):\n%s", diff)
	}

	o = ManagerOptions(ManagerConfig{LeaseNamespace: "leases", Namespaces: []string{"a", "b"}})
	var leaseNS []string
	for obj, by := range o.Cache.ByObject {
		if _, ok := obj.(*coordinationv1.Lease); ok {
			for ns := range by.Namespaces {
				leaseNS = append(leaseNS, ns)
			}
		}
	}
	if diff := cmp.Diff([]string{"leases"}, leaseNS); diff != "" {
		t.Errorf("Lease namespaces (-want +got):\n%s", diff)
	}
	if len(o.Cache.DefaultNamespaces) != 2 {
		t.Errorf("cached namespaces %v, want a and b", o.Cache.DefaultNamespaces)
	}
	// Each call builds its own map: a caller changing one never changes
	// another's.
	if len(ManagerOptions(ManagerConfig{}).Cache.ByObject) != 4 {
		t.Error("ManagerOptions shares its ByObject map between calls")
	}
}
