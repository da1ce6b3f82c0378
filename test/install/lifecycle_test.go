package install

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHelmInstallUpgradeUninstall is an operator's life with the chart, for
// real against the API server: install (taking over CRDs that kubectl
// installed first, as testenv did here), upgrade with new values, uninstall,
// and the CRDs, with every run, are still there afterwards.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	ctx := context.Background()
	const release, namespace = "life", "life-system"
	chart := filepath.Join(root, "charts", "harnessfacts")
	helmCmd := func(args ...string) {
		t.Helper()
		if _, err := runCmd(helm, append(args, "--kubeconfig", kubeconfig, "--namespace", namespace)...); err != nil {
			t.Fatal(err)
		}
	}
	daemonSetArgs := func() []string {
		t.Helper()
		ds := &appsv1.DaemonSet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-harnessfacts-node-agent"}, ds); err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.Containers[0].Args
	}

	helmCmd("install", release, chart, "--create-namespace", "--take-ownership")
	if args := daemonSetArgs(); !slices.Contains(args, "--slots=2") {
		t.Errorf("installed node-agent args %q lack --slots=2", args)
	}

	helmCmd("upgrade", release, chart, "--set", "nodeAgent.slots=6")
	if args := daemonSetArgs(); !slices.Contains(args, "--slots=6") {
		t.Errorf("after helm upgrade --set nodeAgent.slots=6 the node-agent args are %q", args)
	}

	helmCmd("uninstall", release, "--wait")
	err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-harnessfacts-node-agent"}, &appsv1.DaemonSet{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the node-agent DaemonSet after helm uninstall: %v, want NotFound", err)
	}
	for _, name := range []string{"harnessruns.harnessfacts.io", "harnessnodes.harnessfacts.io"} {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Errorf("CRD %s after helm uninstall: %v; it must be kept (helm.sh/resource-policy: keep)", name, err)
		} else if crd.GetDeletionTimestamp() != nil {
			t.Errorf("CRD %s is being deleted after helm uninstall", name)
		}
	}
}
