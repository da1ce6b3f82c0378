package install

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

const (
	nodeClaim = "authentication.kubernetes.io/node-name"
	podClaim  = "authentication.kubernetes.io/pod-name"
)

// asNodeAgent is a client that acts as the chart's node-agent service
// account with a token bound to a pod on node (the API server puts the
// node's name in the user info as it does for a kubelet-mounted token);
// its pod is node-agent-<node>; node "" is a token with no node claim.
func asNodeAgent(t *testing.T, namespace, serviceAccount, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeClaim: {node}, podClaim: {"node-agent-" + node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeAgentWritesOnlyItsOwnNode installs the chart's RBAC and admission
// policy for real and acts as the node-agents of two nodes: each may write
// its own HarnessNode and Lease, the runs bound to it and evidence
// ConfigMaps, and is refused everything else with a message saying why.
func TestNodeAgentWritesOnlyItsOwnNode(t *testing.T) {
	ctx := context.Background()
	const namespace, release, runsNS = "policy-system", "policy", "policy-runs"
	m := mustRender(t, release, namespace, "")
	createNamespace(t, namespace)
	createNamespace(t, runsNS)
	access := m.only("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if _, err := runKubectl(access.yaml(t), "apply", "--server-side", "--field-manager=harnessfacts-install-test", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	sa := "policy-harnessfacts-node-agent"
	nodeA := asNodeAgent(t, namespace, sa, "node-a")
	nodeB := asNodeAgent(t, namespace, sa, "node-b")
	noClaim := asNodeAgent(t, namespace, sa, "")

	// The policy takes effect once the API server has loaded it: wait until
	// node-a is refused node-b's HarnessNode.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := nodeA.Create(ctx, harnessNode("node-b"), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "may write only the harnessnodes named node-a") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy never refused node-a creating node-b's HarnessNode; last result: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A run bound to node-a by the controller (here the admin).
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "bound-to-a", Namespace: runsNS},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: hi\n"}}},
		},
	}
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase = harnessv1.RunScheduled
	run.Status.NodeName = "node-a"
	if err := k8s.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}

	ownedBy := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: runsNS,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "harnessfacts.io/v1alpha1", Kind: "HarnessRun", Name: run.Name, UID: run.UID, Controller: ptr.To(true)}},
		}}
	}
	// evidence is an evidence ConfigMap as the node-agent of node writes it.
	evidence := func(name, node string) *corev1.ConfigMap {
		cm := ownedBy(name)
		cm.Labels = map[string]string{"harnessfacts.io/node": node, "harnessfacts.io/run-uid": string(run.UID)}
		return cm
	}
	// event is an Event about obj as the node-agent with reportingInstance
	// instance writes it (client-go: the controller's name and the host name).
	event := func(name string, regarding corev1.ObjectReference, instance string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: runsNS},
			EventTime: metav1.NowMicro(), Type: corev1.EventTypeNormal, Reason: "Running", Action: "Start", Note: "started",
			Regarding: regarding, ReportingController: "harnessfacts-node-agent", ReportingInstance: instance}
	}
	runRef := corev1.ObjectReference{APIVersion: "harnessfacts.io/v1alpha1", Kind: "HarnessRun", Namespace: runsNS, Name: run.Name, UID: run.UID}

	cases := []struct {
		name  string
		do    func() error
		allow bool
		want  string // part of the refusal
	}{
		{"node-a creates its HarnessNode", func() error { return nodeA.Create(ctx, harnessNode("node-a")) }, true, ""},
		{"node-a writes its HarnessNode's status", func() error {
			n := &harnessv1.HarnessNode{}
			if err := nodeA.Get(ctx, client.ObjectKey{Name: "node-a"}, n); err != nil {
				return err
			}
			n.Status.OS = "linux"
			return nodeA.Status().Update(ctx, n)
		}, true, ""},
		{"node-b writes node-a's HarnessNode status", func() error {
			n := &harnessv1.HarnessNode{}
			if err := nodeB.Get(ctx, client.ObjectKey{Name: "node-a"}, n); err != nil {
				return err
			}
			n.Status.OS = "windows"
			return nodeB.Status().Update(ctx, n)
		}, false, "may write only the harnessnodes named node-b, not node-a"},
		{"node-b deletes node-a's HarnessNode", func() error { return nodeB.Delete(ctx, harnessNode("node-a")) }, false, "forbidden"},
		{"node-a creates its Lease", func() error { return nodeA.Create(ctx, lease(namespace, "node-a")) }, true, ""},
		{"node-a creates node-b's Lease", func() error { return nodeA.Create(ctx, lease(namespace, "node-b")) }, false,
			"may write only the leases named node-a, not node-b"},
		{"node-a creates a Lease outside its namespace", func() error { return nodeA.Create(ctx, lease(runsNS, "node-a")) }, false, "forbidden"},
		{"node-a updates the status of its run", func() error {
			r := &harnessv1.HarnessRun{}
			if err := nodeA.Get(ctx, client.ObjectKeyFromObject(run), r); err != nil {
				return err
			}
			r.Status.Phase = harnessv1.RunRunning
			return nodeA.Status().Update(ctx, r)
		}, true, ""},
		{"node-b updates the status of node-a's run", func() error {
			r := &harnessv1.HarnessRun{}
			if err := nodeB.Get(ctx, client.ObjectKeyFromObject(run), r); err != nil {
				return err
			}
			r.Status.Phase = harnessv1.RunFailed
			return nodeB.Status().Update(ctx, r)
		}, false, "may write only runs bound to it (status.nodeName node-b), not " + runsNS + "/bound-to-a"},
		{"node-a moves its run to node-b", func() error {
			r := &harnessv1.HarnessRun{}
			if err := nodeA.Get(ctx, client.ObjectKeyFromObject(run), r); err != nil {
				return err
			}
			r.Status.NodeName = "node-b"
			return nodeA.Status().Update(ctx, r)
		}, false, "may write only runs bound to it"},
		{"node-a changes a run's spec", func() error {
			r := &harnessv1.HarnessRun{}
			if err := nodeA.Get(ctx, client.ObjectKeyFromObject(run), r); err != nil {
				return err
			}
			r.Spec.Cancel = true
			return nodeA.Update(ctx, r)
		}, false, "forbidden"},
		{"node-a creates an evidence ConfigMap owned by a run", func() error { return nodeA.Create(ctx, evidence("bound-to-a-evidence-1", "node-a")) }, true, ""},
		{"node-a replaces it on a retried write (no read)", func() error { return nodeA.Update(ctx, evidence("bound-to-a-evidence-1", "node-a")) }, true, ""},
		{"node-a replaces the evidence of another run of its node", func() error {
			cm := evidence("bound-to-a-evidence-1", "node-a")
			cm.Labels["harnessfacts.io/run-uid"] = "uid-of-a-run-whose-evidence-name-is-the-same"
			return nodeA.Update(ctx, cm)
		}, false, "may replace only the evidence of the same run (label harnessfacts.io/run-uid), not " + runsNS + "/bound-to-a-evidence-1"},
		{"node-b overwrites node-a's evidence", func() error { return nodeB.Update(ctx, evidence("bound-to-a-evidence-1", "node-b")) }, false,
			"may write only evidence ConfigMaps: owned by a HarnessRun and labelled harnessfacts.io/node=node-b, not " + runsNS + "/bound-to-a-evidence-1"},
		{"node-b writes evidence labelled as node-a's", func() error { return nodeB.Create(ctx, evidence("bound-to-a-evidence-2", "node-a")) }, false,
			"labelled harnessfacts.io/node=node-b"},
		{"node-a writes evidence without its node", func() error { return nodeA.Create(ctx, ownedBy("bound-to-a-evidence-3")) }, false,
			"labelled harnessfacts.io/node=node-a"},
		{"node-a creates a ConfigMap no run owns", func() error {
			return nodeA.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-evidence", Namespace: runsNS,
				Labels: map[string]string{"harnessfacts.io/node": "node-a"}}})
		}, false, "may write only evidence ConfigMaps: owned by a HarnessRun and labelled harnessfacts.io/node=node-a, not " + runsNS + "/not-evidence"},
		{"node-a reports an Event about its run", func() error {
			return nodeA.Create(ctx, event("started", runRef, "harnessfacts-node-agent-node-agent-node-a"))
		}, true, ""},
		{"node-a reports an Event as another pod", func() error {
			return nodeA.Create(ctx, event("spoofed", runRef, "harnessfacts-node-agent-node-agent-node-b"))
		}, false, "may write only Events about HarnessRuns of the Event's namespace, reported by harnessfacts-node-agent as one of"},
		{"node-a reports an Event about a Deployment", func() error {
			return nodeA.Create(ctx, event("about-a-deployment", corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: runsNS, Name: "web"},
				"harnessfacts-node-agent-node-agent-node-a"))
		}, false, "may write only Events about HarnessRuns"},
		{"node-a reports a core Event about a Pod", func() error {
			return nodeA.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "about-a-pod", Namespace: runsNS},
				InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: runsNS, Name: "p"}, Reason: "Killing", Message: "x",
				ReportingController: "harnessfacts-node-agent", ReportingInstance: "harnessfacts-node-agent-node-agent-node-a", Type: corev1.EventTypeWarning})
		}, false, "may write only Events about HarnessRuns"},
		{"node-a lists Secrets", func() error { return nodeA.List(ctx, &corev1.SecretList{}, client.InNamespace(runsNS)) }, false, "forbidden"},
		{"node-a lists Pods", func() error { return nodeA.List(ctx, &corev1.PodList{}, client.InNamespace(runsNS)) }, false, "forbidden"},
		{"a token without a node claim writes a HarnessNode", func() error { return noClaim.Create(ctx, harnessNode("node-c")) }, false,
			"the node-agent's token carries no node name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.allow && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.allow && err == nil:
				t.Error("allowed")
			case !tc.allow && !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused with %q, want a message containing %q", err, tc.want)
			}
		})
	}

	// A ConfigMap that is not evidence cannot be turned into one either.
	t.Run("node-a takes over a ConfigMap by adding an owner", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: runsNS}, Data: map[string]string{"k": "v"}}
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		// Read by an administrator: the node-agent may not read ConfigMaps.
		got := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		got.OwnerReferences = ownedBy("x").OwnerReferences
		got.Data["k"] = "changed"
		if err := nodeA.Update(ctx, got); err == nil || !strings.Contains(err.Error(), "may write only evidence ConfigMaps") {
			t.Errorf("updating another's ConfigMap: %v, want a refusal", err)
		}
	})

	// Reads: a node-agent holds none of Secrets or ConfigMaps; a run's
	// selected keys and fixture come from the controller's run source.
	t.Run("node-a reads no Secret and no ConfigMap", func(t *testing.T) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "team-key", Namespace: runsNS}, StringData: map[string]string{"k": "v"}}
		if err := k8s.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		if err := nodeA.Get(ctx, client.ObjectKeyFromObject(sec), &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("node-a got a Secret: %v, want Forbidden", err)
		}
		if err := nodeA.Get(ctx, client.ObjectKey{Namespace: runsNS, Name: "someone-elses"}, &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
			t.Errorf("node-a got a ConfigMap: %v, want Forbidden", err)
		}
	})
}

func harnessNode(name string) *harnessv1.HarnessNode {
	return &harnessv1.HarnessNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       harnessv1.HarnessNodeSpec{Slots: 2},
	}
}

func lease(namespace, name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40)},
	}
}
