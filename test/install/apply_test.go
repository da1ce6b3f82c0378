package install

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// createNamespace creates a namespace for real (a dry run cannot create the
// namespace its objects go in).
func createNamespace(t *testing.T, name string) {
	t.Helper()
	err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// dryRunApply sends every object to the API server with
// `kubectl apply --server-side --dry-run=server --validate=strict`: the server
// runs defaulting, validation (pod security context rules, CEL of the
// admission policy, unknown fields) and admission, and stores nothing. It
// checks that kubectl reports each object.
func dryRunApply(t *testing.T, m manifest) {
	t.Helper()
	if len(m) == 0 {
		t.Fatal("nothing to apply")
	}
	out, err := runKubectl(m.yaml(t), "apply", "--server-side", "--dry-run=server", "--validate=strict",
		"--field-manager=harnessfacts-install-test", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, o := range m {
		// kubectl prints "<resource>.<group>/<name> serverside-applied (server dry run)".
		want := "/" + o.GetName() + " serverside-applied (server dry run)"
		if !slices.ContainsFunc(lines, func(l string) bool {
			return strings.HasSuffix(l, want) && strings.HasPrefix(strings.ToLower(l), strings.ToLower(o.GetKind()))
		}) {
			t.Errorf("kubectl did not report %s as applied; it printed:\n%s", id(o), out)
		}
	}
	if len(lines) != len(m) {
		t.Errorf("kubectl reported %d objects, the manifest has %d:\n%s", len(lines), len(m), out)
	}
}

// TestChartAppliesToAPIServer renders the chart with every value set and
// applies every object to the real API server as a dry run.
func TestChartAppliesToAPIServer(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			release, namespace := "apply-"+name, "apply-"+name
			m := mustRender(t, release, namespace, values)
			createNamespace(t, namespace)
			for _, o := range m {
				if o.GetNamespace() != "" && o.GetNamespace() != namespace {
					createNamespace(t, o.GetNamespace()) // runNamespaces
				}
			}
			// The Prometheus Operator's ServiceMonitor CRD is not installed in
			// this control plane, so the API server cannot validate a
			// ServiceMonitor; TestServiceMonitor checks its fields instead.
			apply := m.without("ServiceMonitor")
			if n := len(m) - len(apply); n > 0 {
				t.Logf("not applied (no ServiceMonitor CRD in the test control plane): %d ServiceMonitor", n)
			}
			dryRunApply(t, apply)
		})
	}
}

// TestKustomizeAppliesToAPIServer applies `kubectl kustomize config/default`
// and the samples as a dry run.
func TestKustomizeAppliesToAPIServer(t *testing.T) {
	m := kustomize(t, "config/default")
	if len(m.only("Namespace")) != 1 {
		t.Fatalf("config/default renders no Namespace: %v", m.ids())
	}
	createNamespace(t, m.only("Namespace")[0].GetName())
	dryRunApply(t, m)

	// The optional Windows node-agent (the ServiceMonitor of
	// config/controller/monitoring needs the Prometheus Operator's CRD, which
	// this control plane does not have).
	dryRunApply(t, kustomize(t, "config/node-agent/windows"))

	samples := kustomize(t, "config/samples")
	if len(samples.only("HarnessRun")) == 0 {
		t.Fatalf("config/samples renders no HarnessRun: %v", samples.ids())
	}
	dryRunApply(t, samples)
}

// TestKustomizeMatchesChart: config/default is the chart with its default
// values, released as "harnessfacts" in harnessfacts-system, object for object
// and field for field, except Helm's own labels and annotations; the optional
// kustomizations match the chart's values that turn the same objects on.
func TestKustomizeMatchesChart(t *testing.T) {
	base := kustomize(t, "config/default").without("Namespace")
	cases := []struct {
		name, values string
		extra        []string // kustomizations applied on top of config/default
	}{
		{"defaults", "", nil},
		{"windows", "nodeAgent: {windows: {enabled: true}}", []string{"config/node-agent/windows"}},
		{"servicemonitor", "controller: {metrics: {serviceMonitor: {enabled: true}}}", []string{"config/controller/monitoring"}},
		{"node-agent servicemonitor", "nodeAgent: {serviceMonitor: {enabled: true}}", []string{"config/node-agent/monitoring"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kust := append(manifest{}, base...)
			for _, dir := range tc.extra {
				kust = append(kust, kustomize(t, dir)...)
			}
			compareManifests(t, mustRender(t, "harnessfacts", ns, tc.values), kust)
		})
	}
}

// compareManifests fails for every object that is in only one of chart and
// kust, or differs between them once Helm's own labels and annotations are
// left out.
func compareManifests(t *testing.T, chart, kust manifest) {
	t.Helper()
	helmLabels := []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}
	normalize := func(m manifest) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, o := range m {
			o = o.DeepCopy()
			labels := o.GetLabels()
			for _, k := range helmLabels {
				delete(labels, k)
			}
			if len(labels) == 0 {
				labels = nil
			}
			o.SetLabels(labels)
			ann := o.GetAnnotations()
			delete(ann, "helm.sh/resource-policy")
			if len(ann) == 0 {
				ann = nil
			}
			o.SetAnnotations(ann)
			if tm, ok := nestedMap(o.Object, "spec", "template", "metadata"); ok {
				if l, ok := tm["labels"].(map[string]any); ok {
					for _, k := range helmLabels {
						delete(l, k)
					}
				}
			}
			out[id(o)] = o.Object
		}
		return out
	}
	c, k := normalize(chart), normalize(kust)
	// The chart makes the run source's certificate and CA (random, kept
	// across upgrades); with kustomize the operator makes them
	// (docs/install.md).
	for key := range c {
		if strings.HasSuffix(key, "/harnessfacts-run-source-tls") || strings.HasSuffix(key, "/harnessfacts-run-source-ca") {
			delete(c, key)
		}
	}
	var onlyChart, onlyKust []string
	for key := range c {
		if _, ok := k[key]; !ok {
			onlyChart = append(onlyChart, key)
		}
	}
	for key := range k {
		if _, ok := c[key]; !ok {
			onlyKust = append(onlyKust, key)
		}
	}
	slices.Sort(onlyChart)
	slices.Sort(onlyKust)
	if len(onlyChart)+len(onlyKust) > 0 {
		t.Errorf("objects only in the chart: %v; only in the kustomize output: %v", onlyChart, onlyKust)
	}
	for key, co := range c {
		ko, ok := k[key]
		if !ok {
			continue
		}
		if diff := cmp.Diff(co, ko); diff != "" {
			t.Errorf("%s differs between the chart and the kustomize output (-chart +kustomize):\n%s", key, diff)
		}
	}
}

func nestedMap(obj map[string]any, path ...string) (map[string]any, bool) {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// TestAPIServerRefusesUnmaskedProcOnHostUsers shows why the chart refuses
// nodeAgent.hostUsers=true without privileged, and that the dry runs above
// do reach the API server's pod validation: the node-agent DaemonSet with its
// pod moved back into the host's user namespace is refused.
func TestAPIServerRefusesUnmaskedProcOnHostUsers(t *testing.T) {
	m := mustRender(t, "refused", "refused", "")
	createNamespace(t, "refused")
	ds := m.get(t, "DaemonSet", "refused-harnessfacts-node-agent").DeepCopy()
	unstructured.RemoveNestedField(ds.Object, "spec", "template", "spec", "hostUsers")
	_, err := runKubectl(manifest{ds}.yaml(t), "apply", "--server-side", "--dry-run=server", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "`hostUsers` must be false to use `Unmasked`") {
		t.Errorf("applying the node-agent with procMount Unmasked in the host's user namespace: %v, want the API server's refusal", err)
	}
}
