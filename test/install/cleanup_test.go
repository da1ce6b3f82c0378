package install

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The post-delete hook that cleans each node after helm uninstall: one Pod
// per Linux node the node-agent runs on (looked up when Helm renders
// against the cluster), pinned to it, running node-cleanup on the run root,
// with the run root's grandparent mounted; none with cleanupOnUninstall off.
func TestChartCleansNodesAfterUninstall(t *testing.T) {
	for _, n := range []struct{ name, os string }{{"cleanup-linux-a", "linux"}, {"cleanup-windows", "windows"}} {
		if _, err := runKubectl(fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":%q,"labels":{"kubernetes.io/os":%q}}}`, n.name, n.os), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = runKubectl("", "delete", "node", n.name) })
	}
	render := func(extra ...string) manifest {
		t.Helper()
		// Server-side, so that lookup sees the Nodes; a release of its own
		// and no CRDs, so that nothing clashes with what other tests made.
		args := append([]string{"template", "cleanup-render", filepath.Join(root, "charts", "harnessfacts"), "--namespace", "cleanup-render",
			"--dry-run=server", "--kubeconfig", kubeconfig, "--set", "crds.install=false"}, extra...)
		out, err := runCmd(helm, args...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := parseManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		return m.only("Pod")
	}
	pods := render()
	var onLinux *corev1.Pod
	for _, o := range pods {
		p := as[corev1.Pod](t, o)
		if p.Spec.NodeName == "cleanup-windows" {
			t.Errorf("a cleanup Pod on the Windows node: %s", p.Name)
		}
		if p.Spec.NodeName == "cleanup-linux-a" {
			onLinux = p
		}
	}
	if onLinux == nil {
		t.Fatalf("no cleanup Pod for the Linux node among %v", pods.ids())
	}
	if onLinux.Annotations["helm.sh/hook"] != "post-delete" || !strings.Contains(onLinux.Annotations["helm.sh/hook-delete-policy"], "hook-succeeded") {
		t.Errorf("hook annotations %v", onLinux.Annotations)
	}
	c := onLinux.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"node-cleanup", "--run-root=/var/lib/harnessfacts/runs", "--wait=2m", "--evidence-key-dir=/var/lib/harnessfacts/keys"}) {
		t.Errorf("args %q", c.Args)
	}
	if len(c.VolumeMounts) != 2 {
		t.Errorf("mounts %+v: the default key folder is under /var/lib, which is mounted already", c.VolumeMounts)
	}
	v := onLinux.Spec.Volumes[1]
	if v.HostPath == nil || v.HostPath.Path != "/var/lib" || c.VolumeMounts[0].MountPath != "/var/lib" {
		t.Errorf("volume %+v mounted at %+v, want the run root's grandparent /var/lib at its own path", v, c.VolumeMounts)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged != nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"DAC_OVERRIDE", "FOWNER"}) {
		t.Errorf("security context %+v", sc)
	}
	// A key folder outside the run root's grandparent is mounted of its own.
	for _, o := range render("--set", "nodeAgent.evidenceKeyDir=/etc/harnessfacts/keys") {
		p := as[corev1.Pod](t, o)
		if p.Spec.NodeName != "cleanup-linux-a" {
			continue
		}
		c := p.Spec.Containers[0]
		found := false
		for _, m := range c.VolumeMounts {
			found = found || m.MountPath == "/etc/harnessfacts/keys"
		}
		if !found || !slices.Contains(c.Args, "--evidence-key-dir=/etc/harnessfacts/keys") {
			t.Errorf("a key folder outside /var/lib: args %q, mounts %+v", c.Args, c.VolumeMounts)
		}
	}
	if got := render("--set", "nodeAgent.cleanupOnUninstall=false"); len(got) != 0 {
		t.Errorf("cleanupOnUninstall=false still renders %v", got.ids())
	}
	// Rendered without a cluster (helm template, GitOps): no node is known.
	m, err := renderChart(t, "harnessfacts", "harnessfacts-system", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.only("Pod"); len(got) != 0 {
		t.Errorf("helm template without a cluster renders %v", got.ids())
	}
}
