package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const ns = "harnessfacts-system"

// Values sets an operator would use; each is rendered, asserted on, linted
// and applied to the API server.
var valueSets = map[string]string{
	"defaults": "",
	"windows": `
nodeAgent:
  windows:
    enabled: true
    image: {tag: "1.2.3"}
`,
	"servicemonitor": `
controller:
  metrics:
    serviceMonitor:
      enabled: true
      interval: 15s
      labels: {release: kube-prometheus-stack}
nodeAgent:
  serviceMonitor:
    enabled: true
    interval: 15s
    labels: {release: kube-prometheus-stack}
  windows:
    enabled: true
`,
	"custom": `
controller:
  replicas: 2
  image: {repository: registry.example/hf/controller, tag: v9.9.9}
  extraArgs: ["--zap-devel"]
nodeAgent:
  slots: 8
  runRoot: /data/harnessfacts/runs
  image:
    repository: registry.example/hf/node-agent
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  extraArgs: ["--zap-devel"]
  agentRuntimes:
    image: {reference: "registry.example/hf/agent-clis:2026-11"}
runNamespaces: [team-a, team-b]
`,
	"privileged": `
nodeAgent:
  hostUsers: true
  privileged: true
  agentRuntimes:
    hostPath: /opt/agent-clis
`,
}

func daemonSet(t *testing.T, m manifest, name string) *appsv1.DaemonSet {
	t.Helper()
	return as[appsv1.DaemonSet](t, m.get(t, "DaemonSet", name))
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s in %v", name, spec.Volumes)
	return corev1.Volume{}
}

func mountPath(t *testing.T, c corev1.Container, name string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("container %s does not mount %s", c.Name, name)
	return corev1.VolumeMount{}
}

func envFieldPath(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// selects reports whether a selector picks the pods of a template.
func selects(selector map[string]string, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func TestDefaults(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, valueSets["defaults"])

	t.Run("every namespaced object is in the release namespace", func(t *testing.T) {
		clusterScoped := []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
		for _, o := range m {
			if slices.Contains(clusterScoped, o.GetKind()) {
				if o.GetNamespace() != "" {
					t.Errorf("%s is cluster-scoped but has namespace %q", id(o), o.GetNamespace())
				}
				continue
			}
			if o.GetNamespace() == "kube-system" && o.GetKind() == "RoleBinding" && o.GetName() == "harnessfacts-node-agent-client-ca" {
				// The one exception, as metrics-server's: reading the
				// cluster's client CA through the built-in Role there.
				continue
			}
			if o.GetNamespace() != ns {
				t.Errorf("%s is not in namespace %s", id(o), ns)
			}
		}
	})

	t.Run("CRDs are the generated ones and survive helm uninstall", func(t *testing.T) {
		for _, name := range []string{"harnessruns.harnessfacts.io", "harnessnodes.harnessfacts.io"} {
			got := m.get(t, "CustomResourceDefinition", name)
			if a := got.GetAnnotations()["helm.sh/resource-policy"]; a != "keep" {
				t.Errorf("%s: helm.sh/resource-policy = %q, want keep", name, a)
			}
			want := readYAML(t, filepath.Join(root, "config", "crd", "bases", "harnessfacts.io_"+strings.TrimSuffix(name, ".harnessfacts.io")+".yaml"))
			if diff := cmp.Diff(want.Object["spec"], got.Object["spec"]); diff != "" {
				t.Errorf("%s in the chart differs from config/crd/bases (run make manifests) (-config +chart):\n%s", name, diff)
			}
		}
	})

	t.Run("controller", func(t *testing.T) {
		d := as[appsv1.Deployment](t, m.get(t, "Deployment", "harnessfacts-controller"))
		c := container(t, d.Spec.Template.Spec, "controller")
		for _, arg := range []string{"controller", "--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("controller args %q lack %q", c.Args, arg)
			}
		}
		if c.Image != "ghcr.io/harnessfacts/harnessfacts:0.1.0" {
			t.Errorf("controller image = %s, want the chart's appVersion tag", c.Image)
		}
		if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "health" {
			t.Errorf("liveness probe = %+v, want GET /healthz on port health", p)
		}
		if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "health" {
			t.Errorf("readiness probe = %+v, want GET /readyz on port health", p)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if diff := cmp.Diff(map[string]int32{"metrics": 8080, "health": 8081, "run-source": 9443}, ports); diff != "" {
			t.Errorf("controller ports (-want +got):\n%s", diff)
		}
		rsSvc := as[corev1.Service](t, m.get(t, "Service", "harnessfacts-run-source"))
		if len(rsSvc.Spec.Ports) != 1 || rsSvc.Spec.Ports[0].Port != 9443 || rsSvc.Spec.Ports[0].TargetPort.String() != "run-source" {
			t.Errorf("the run source's Service ports = %+v", rsSvc.Spec.Ports)
		}
		tlsVol := volume(t, d.Spec.Template.Spec, "run-source-tls")
		if tlsVol.Secret == nil || tlsVol.Secret.SecretName != "harnessfacts-run-source-tls" {
			t.Errorf("run-source-tls volume = %+v", tlsVol.VolumeSource)
		}
		if !slices.Contains(c.Args, "--node-agent-service-account="+ns+"/harnessfacts-node-agent") {
			t.Errorf("the controller's args %q do not name the node-agents' service account", c.Args)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("controller container securityContext = %+v, want read-only root, no privilege escalation, all capabilities dropped", sc)
		}
		psc := d.Spec.Template.Spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("controller pod securityContext = %+v, want non-root with the RuntimeDefault seccomp profile", psc)
		}
		if d.Spec.Template.Spec.ServiceAccountName != "harnessfacts-controller" {
			t.Errorf("controller service account = %s", d.Spec.Template.Spec.ServiceAccountName)
		}

		svc := as[corev1.Service](t, m.get(t, "Service", "harnessfacts-controller-metrics"))
		if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
			t.Errorf("metrics Service selector %v does not select the controller pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("metrics Service ports = %+v, want 8080 -> metrics", svc.Spec.Ports)
		}
		for _, name := range []string{"harnessfacts-controller", "harnessfacts-node-agent"} {
			if _, ok := m.find("ServiceMonitor", name); ok {
				t.Errorf("ServiceMonitor %s is rendered by default; it needs the Prometheus Operator and must be opt-in", name)
			}
		}
		if _, ok := m.find("Service", "harnessfacts-node-agent-metrics"); ok {
			t.Error("the node-agents' metrics Service is rendered by default; it is only for the opt-in ServiceMonitor")
		}
	})

	t.Run("controller RBAC is the generated role", func(t *testing.T) {
		got := as[rbacv1.ClusterRole](t, m.get(t, "ClusterRole", "harnessfacts-controller"))
		want := as[rbacv1.ClusterRole](t, readYAML(t, filepath.Join(root, "config", "rbac", "controller", "role.yaml")))
		if diff := cmp.Diff(want.Rules, got.Rules); diff != "" {
			t.Errorf("the chart's controller rules differ from config/rbac/controller/role.yaml (run make manifests) (-generated +chart):\n%s", diff)
		}
		b := as[rbacv1.ClusterRoleBinding](t, m.get(t, "ClusterRoleBinding", "harnessfacts-controller"))
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "harnessfacts-controller", Namespace: ns}}
		if diff := cmp.Diff(wantSubjects, b.Subjects); diff != "" || b.RoleRef.Name != "harnessfacts-controller" {
			t.Errorf("controller binding: roleRef %s, subjects (-want +got):\n%s", b.RoleRef.Name, diff)
		}
	})

	t.Run("node-agent runs bubblewrap with the least it needs", func(t *testing.T) {
		ds := daemonSet(t, m, "harnessfacts-node-agent")
		spec := ds.Spec.Template.Spec
		c := container(t, spec, "node-agent")
		if spec.HostUsers == nil || *spec.HostUsers {
			t.Error("the node-agent pod is not in its own user namespace (hostUsers: false)")
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Error("the node-agent shares a host namespace")
		}
		if spec.NodeSelector["kubernetes.io/os"] != "linux" {
			t.Errorf("node-agent nodeSelector = %v, want Linux nodes only", spec.NodeSelector)
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("no securityContext on the node-agent container")
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Error("the node-agent is privileged by default")
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("runAsUser = %v, want 0 (root in the pod's user namespace)", sc.RunAsUser)
		}
		if sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
			t.Errorf("procMount = %v, want Unmasked (bwrap mounts a fresh /proc)", sc.ProcMount)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined {
			t.Errorf("seccompProfile = %+v, want Unconfined by default", sc.SeccompProfile)
		}
		if sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			t.Errorf("appArmorProfile = %+v, want Unconfined by default", sc.AppArmorProfile)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("capabilities = %+v, want every capability dropped first", sc.Capabilities)
		}
		wantAdd := []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "SYS_ADMIN"}
		if diff := cmp.Diff(wantAdd, sc.Capabilities.Add); diff != "" {
			t.Errorf("added capabilities (-want +got):\n%s", diff)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("the node-agent's root filesystem is writable")
		}
		if got := envFieldPath(c, "NODE_NAME"); got != "spec.nodeName" {
			t.Errorf("NODE_NAME comes from %q, want the downward API's spec.nodeName", got)
		}
		if got := envFieldPath(c, "POD_NAMESPACE"); got != "metadata.namespace" {
			t.Errorf("POD_NAMESPACE comes from %q", got)
		}
		if got := envValue(c, "GOMEMLIMIT"); got != "256MiB" {
			t.Errorf("GOMEMLIMIT = %q, want the chart's nodeAgent.goMemLimit 256MiB", got)
		}
		if !strings.HasPrefix(envValue(c, "PATH"), "/opt/harnessfacts/agents/bin:") {
			t.Errorf("PATH = %q, want the agent CLIs first", envValue(c, "PATH"))
		}
		for _, arg := range []string{"node-agent", "--slots=2", "--run-root=/var/lib/harnessfacts/runs", "--run-uids=60000-60127", "--memory-limit=512Mi", "--cgroup-mount=/run/harnessfacts/cgroup",
			"--refuse-fallback=false", "--cluster-cidrs=", "--evidence-key=/var/lib/harnessfacts/keys/evidence-key.pem", "--controller-url=https://harnessfacts-run-source." + ns + ".svc:9443"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("node-agent args %q lack %q", c.Args, arg)
			}
		}
		// The read-only root file system has a writable place for the
		// cgroup2 the node-agent mounts on cgroup v2 nodes.
		if v := volume(t, spec, "cgroup-mount"); v.EmptyDir == nil {
			t.Errorf("cgroup-mount volume = %+v, want an emptyDir", v.VolumeSource)
		}
		if mp := mountPath(t, c, "cgroup-mount"); mp.MountPath != "/run/harnessfacts/cgroup" || mp.ReadOnly {
			t.Errorf("cgroup-mount is mounted at %s (read-only %v), want /run/harnessfacts/cgroup, writable", mp.MountPath, mp.ReadOnly)
		}
		// The token for the run source: projected for its audience, bound to
		// the pod, with the CA (never the key), under /var/run/secrets, which
		// the sandbox masks.
		link := volume(t, spec, "controller")
		if link.Projected == nil || len(link.Projected.Sources) != 2 ||
			link.Projected.Sources[0].ServiceAccountToken == nil || link.Projected.Sources[0].ServiceAccountToken.Audience != "harnessfacts.io/controller" ||
			link.Projected.Sources[1].ConfigMap == nil || link.Projected.Sources[1].ConfigMap.Name != "harnessfacts-run-source-ca" {
			t.Errorf("the node-agent's controller volume = %+v", link.VolumeSource)
		}
		if mountPath(t, c, "controller").MountPath != "/var/run/secrets/harnessfacts.io/controller" {
			t.Error("the run source's token is not mounted where --controller-token looks")
		}
		ca := as[corev1.ConfigMap](t, m.get(t, "ConfigMap", "harnessfacts-run-source-ca"))
		if !strings.Contains(ca.Data["ca.crt"], "BEGIN CERTIFICATE") || strings.Contains(ca.Data["ca.crt"], "PRIVATE KEY") {
			t.Errorf("the run source's CA ConfigMap = %q", ca.Data["ca.crt"])
		}
		// The signing key lives on the host, so a replaced pod keeps it.
		if keys := volume(t, spec, "evidence-key"); keys.HostPath == nil || keys.HostPath.Path != "/var/lib/harnessfacts/keys" {
			t.Errorf("evidence-key volume = %+v, want the host path /var/lib/harnessfacts/keys", keys.VolumeSource)
		}
		if mp := mountPath(t, c, "evidence-key"); mp.MountPath != "/var/lib/harnessfacts/keys" {
			t.Errorf("evidence-key is mounted at %s", mp.MountPath)
		}
		runs := volume(t, spec, "run-root")
		if runs.HostPath == nil || runs.HostPath.Path != "/var/lib/harnessfacts/runs" || runs.HostPath.Type == nil || *runs.HostPath.Type != corev1.HostPathDirectoryOrCreate {
			t.Errorf("run-root volume = %+v, want hostPath /var/lib/harnessfacts/runs (DirectoryOrCreate)", runs.VolumeSource)
		}
		if mp := mountPath(t, c, "run-root"); mp.MountPath != "/var/lib/harnessfacts/runs" || mp.ReadOnly {
			t.Errorf("run-root is mounted at %s (read-only %v), want the same path, writable", mp.MountPath, mp.ReadOnly)
		}
		for _, v := range spec.Volumes {
			if v.Name == "agent-runtimes" {
				t.Error("an agent-runtimes volume is rendered by default; the CLIs come with the image")
			}
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Error("the node-agent has no /healthz and /readyz probes")
		}
		if _, ok := m.find("DaemonSet", "harnessfacts-node-agent-windows"); ok {
			t.Error("the Windows node-agent is rendered by default")
		}
	})

	t.Run("node-agent RBAC", func(t *testing.T) {
		cr := as[rbacv1.ClusterRole](t, m.get(t, "ClusterRole", "harnessfacts-node-agent"))
		verbs := func(group, resource string) []string {
			var out []string
			for _, r := range cr.Rules {
				if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
					out = append(out, r.Verbs...)
				}
			}
			slices.Sort(out)
			return out
		}
		cases := []struct {
			group, resource string
			want            []string
		}{
			{"", "secrets", nil},                             // the controller's run source serves a run's keys
			{"", "configmaps", []string{"create", "update"}}, // evidence only: fixtures come from the run source
			{"harnessfacts.io", "harnessruns", []string{"get", "list", "watch"}},
			{"harnessfacts.io", "harnessruns/status", []string{"get", "patch", "update"}},
			{"harnessfacts.io", "harnessnodes", []string{"create", "get", "update"}},
			{"", "nodes", []string{"get"}},
			{"harnessfacts.io", "harnessnodes/status", []string{"get", "patch", "update"}},
			{"coordination.k8s.io", "leases", nil}, // only in its namespace, through a Role
			{"", "pods", nil},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, verbs(tc.group, tc.resource)); diff != "" {
				t.Errorf("node-agent verbs on %s (group %q) (-want +got):\n%s", tc.resource, tc.group, diff)
			}
		}
		for _, r := range cr.Rules {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "delete") {
				t.Errorf("node-agent rule %+v uses a wildcard or delete", r)
			}
		}
		lease := as[rbacv1.Role](t, m.get(t, "Role", "harnessfacts-node-agent-lease"))
		if lease.Namespace != ns || len(lease.Rules) != 1 || !slices.Equal(lease.Rules[0].Resources, []string{"leases"}) {
			t.Errorf("lease Role = %+v, want leases only, in %s", lease, ns)
		}
		vap := m.get(t, "ValidatingAdmissionPolicy", "harnessfacts-node-agent")
		conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
		if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "'system:serviceaccount:"+ns+":harnessfacts-node-agent'") {
			t.Errorf("the admission policy does not match the node-agent's service account: %v", conds)
		}
		m.get(t, "ValidatingAdmissionPolicyBinding", "harnessfacts-node-agent")
	})
}

func TestWindows(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, valueSets["windows"])
	win := daemonSet(t, m, "harnessfacts-node-agent-windows")
	spec := win.Spec.Template.Spec
	psc := spec.SecurityContext
	if psc == nil || psc.WindowsOptions == nil || psc.WindowsOptions.HostProcess == nil || !*psc.WindowsOptions.HostProcess {
		t.Fatalf("Windows node-agent is not a HostProcess pod: %+v", psc)
	}
	if u := psc.WindowsOptions.RunAsUserName; u == nil || *u != `NT AUTHORITY\SYSTEM` {
		t.Errorf("runAsUserName = %v, want NT AUTHORITY\\SYSTEM", u)
	}
	if !spec.HostNetwork {
		t.Error("HostProcess pods must use the host network")
	}
	if spec.OS == nil || spec.OS.Name != corev1.Windows || spec.NodeSelector["kubernetes.io/os"] != "windows" {
		t.Errorf("Windows node-agent os %+v, nodeSelector %v: want Windows nodes only", spec.OS, spec.NodeSelector)
	}
	c := container(t, spec, "node-agent")
	if c.Image != "ghcr.io/harnessfacts/harnessfacts-windows:1.2.3" {
		t.Errorf("Windows image = %s", c.Image)
	}
	if !slices.Contains(c.Args, `--run-root=C:\ProgramData\harnessfacts\runs`) || !slices.Contains(c.Args, "--slots=2") {
		t.Errorf("Windows node-agent args = %q", c.Args)
	}
	if envFieldPath(c, "NODE_NAME") != "spec.nodeName" {
		t.Error("the Windows node-agent has no NODE_NAME")
	}
	if spec.ServiceAccountName != "harnessfacts-node-agent" {
		t.Errorf("the Windows node-agent uses service account %s, not the node-agent's (which the admission policy narrows)", spec.ServiceAccountName)
	}
	// The Linux one still runs on Linux nodes only, so the two never meet.
	linux := daemonSet(t, m, "harnessfacts-node-agent")
	if linux.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Error("the Linux node-agent would also land on Windows nodes")
	}
}

func TestServiceMonitor(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, valueSets["servicemonitor"])
	sm := m.get(t, "ServiceMonitor", "harnessfacts-controller")
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion = %s", sm.GetAPIVersion())
	}
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack the one Prometheus selects by", sm.GetLabels())
	}
	svc := as[corev1.Service](t, m.get(t, "Service", "harnessfacts-controller-metrics"))
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if !selects(sel, svc.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", sel, svc.Labels)
	}
	nsNames, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if !slices.Equal(nsNames, []string{ns}) {
		t.Errorf("ServiceMonitor namespaceSelector = %v", nsNames)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != svc.Spec.Ports[0].Name || ep["interval"] != "15s" || ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoint = %v, want port %s, /metrics every 15s", ep, svc.Spec.Ports[0].Name)
	}
}

// TestNodeAgentServiceMonitor: with nodeAgent.serviceMonitor.enabled, a
// headless Service per node-agent DaemonSet (Linux and Windows) selects its
// pods' metrics port, and one ServiceMonitor selects both Services (and not
// the controller's), scraping HTTPS with Prometheus' own token, each target
// labelled with its node.
func TestNodeAgentServiceMonitor(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, valueSets["servicemonitor"])
	sm := m.get(t, "ServiceMonitor", "harnessfacts-node-agent")
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack the one Prometheus selects by", sm.GetLabels())
	}
	rawSel, _, _ := unstructured.NestedMap(sm.Object, "spec", "selector")
	sel := &metav1.LabelSelector{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rawSel, sel); err != nil {
		t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	for ds, port := range map[string]int32{"harnessfacts-node-agent": 8082, "harnessfacts-node-agent-windows": 8082} {
		d := daemonSet(t, m, ds)
		svc := as[corev1.Service](t, m.get(t, "Service", ds+"-metrics"))
		if !selector.Matches(labels.Set(svc.Labels)) {
			t.Errorf("the ServiceMonitor's selector %s does not select Service %s (labels %v)", selector, svc.Name, svc.Labels)
		}
		if !selects(svc.Spec.Selector, d.Spec.Template.Labels) || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s: selector %v, clusterIP %q; want a headless Service selecting %s's pods %v", svc.Name, svc.Spec.Selector, svc.Spec.ClusterIP, ds, d.Spec.Template.Labels)
		}
		named := false
		for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
			named = named || (p.Name == "metrics" && p.ContainerPort == port)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.String() != "metrics" || !named {
			t.Errorf("Service %s ports %+v; want metrics -> the container port named metrics (%d)", svc.Name, svc.Spec.Ports, port)
		}
	}
	ctl := as[corev1.Service](t, m.get(t, "Service", "harnessfacts-controller-metrics"))
	if selector.Matches(labels.Set(ctl.Labels)) {
		t.Errorf("the node-agents' ServiceMonitor also selects the controller's metrics Service")
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	relabel, _ := ep["relabelings"].([]any)
	if ep["port"] != "metrics" || ep["scheme"] != "https" || ep["interval"] != "15s" || ep["path"] != "/metrics" ||
		ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || len(relabel) != 1 {
		t.Errorf("ServiceMonitor endpoint = %v, want HTTPS /metrics on port metrics every 15s with Prometheus' token and a node label", ep)
	}
	// Without Windows node-agents: only the Linux Service, and the
	// ServiceMonitor names only it.
	m = mustRender(t, "harnessfacts", ns, "nodeAgent: {serviceMonitor: {enabled: true}}")
	if _, ok := m.find("Service", "harnessfacts-node-agent-windows-metrics"); ok {
		t.Error("a Windows metrics Service without Windows node-agents")
	}
	m.get(t, "Service", "harnessfacts-node-agent-metrics")
}

func TestCustomValues(t *testing.T) {
	m := mustRender(t, "hf", "evals", valueSets["custom"])

	d := as[appsv1.Deployment](t, m.get(t, "Deployment", "hf-harnessfacts-controller"))
	if *d.Spec.Replicas != 2 {
		t.Errorf("controller replicas = %d", *d.Spec.Replicas)
	}
	c := container(t, d.Spec.Template.Spec, "controller")
	if c.Image != "registry.example/hf/controller:v9.9.9" || c.Args[len(c.Args)-1] != "--zap-devel" {
		t.Errorf("controller image %s, args %q", c.Image, c.Args)
	}

	ds := daemonSet(t, m, "hf-harnessfacts-node-agent")
	spec := ds.Spec.Template.Spec
	na := container(t, spec, "node-agent")
	if na.Image != "registry.example/hf/node-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("node-agent image = %s, want the digest", na.Image)
	}
	for _, arg := range []string{"--slots=8", "--run-root=/data/harnessfacts/runs", "--zap-devel"} {
		if !slices.Contains(na.Args, arg) {
			t.Errorf("node-agent args %q lack %q", na.Args, arg)
		}
	}
	if v := volume(t, spec, "run-root"); v.HostPath == nil || v.HostPath.Path != "/data/harnessfacts/runs" {
		t.Errorf("run-root volume = %+v", v.VolumeSource)
	}
	if mountPath(t, na, "run-root").MountPath != "/data/harnessfacts/runs" {
		t.Error("run-root is not mounted at the run root the node-agent is given")
	}
	rt := volume(t, spec, "agent-runtimes")
	if rt.Image == nil || rt.Image.Reference != "registry.example/hf/agent-clis:2026-11" {
		t.Errorf("agent-runtimes volume = %+v, want the image volume", rt.VolumeSource)
	}
	if mp := mountPath(t, na, "agent-runtimes"); mp.MountPath != "/opt/harnessfacts/agents" || !mp.ReadOnly {
		t.Errorf("agent-runtimes mount = %+v, want read-only at /opt/harnessfacts/agents", mp)
	}

	// runNamespaces: evidence ConfigMaps and the controller's Secret read
	// only there.
	cr := as[rbacv1.ClusterRole](t, m.get(t, "ClusterRole", "hf-harnessfacts-node-agent"))
	for _, r := range cr.Rules {
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "configmaps") {
			t.Errorf("with runNamespaces the cluster-wide role still grants %v", r.Resources)
		}
	}
	runs := as[rbacv1.ClusterRole](t, m.get(t, "ClusterRole", "hf-harnessfacts-node-agent-runs"))
	if slices.ContainsFunc(runs.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "secrets") }) {
		t.Error("the node-agent's per-namespace role grants Secrets")
	}
	if _, ok := m.find("ClusterRoleBinding", "hf-harnessfacts-controller-run-secrets"); ok {
		t.Error("with runNamespaces the controller still reads Secrets cluster-wide")
	}
	bound := map[string][]string{}
	for _, o := range m.only("RoleBinding") {
		rb := as[rbacv1.RoleBinding](t, o)
		bound[rb.RoleRef.Name] = append(bound[rb.RoleRef.Name], rb.Namespace)
	}
	for _, role := range []string{"hf-harnessfacts-node-agent-runs", "hf-harnessfacts-controller-run-secrets"} {
		if diff := cmp.Diff([]string{"team-a", "team-b"}, bound[role]); diff != "" {
			t.Errorf("namespaces %s is bound in (-want +got):\n%s", role, diff)
		}
	}
	ctl := container(t, as[appsv1.Deployment](t, m.get(t, "Deployment", "hf-harnessfacts-controller")).Spec.Template.Spec, "controller")
	if !slices.Contains(ctl.Args, "--run-namespaces=team-a,team-b") {
		t.Errorf("the controller's args %q do not scope the run source to runNamespaces", ctl.Args)
	}
}

func TestCRDValues(t *testing.T) {
	if m := mustRender(t, "harnessfacts", ns, "crds: {install: false}"); len(m.only("CustomResourceDefinition")) != 0 {
		t.Error("crds.install=false still renders CRDs")
	}
	m := mustRender(t, "harnessfacts", ns, "crds: {keep: false}")
	crds := m.only("CustomResourceDefinition")
	if len(crds) != 4 {
		t.Fatalf("want the four CRDs, got %v", crds.ids())
	}
	for _, c := range crds {
		if _, ok := c.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Errorf("crds.keep=false: %s still has helm.sh/resource-policy", c.GetName())
		}
	}
}

func TestCommonLabels(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, "commonLabels: {team: evals}\nnodeAgent: {windows: {enabled: true}}")
	for _, o := range m {
		if o.GetLabels()["team"] != "evals" {
			t.Errorf("%s lacks commonLabels team=evals: %v", id(o), o.GetLabels())
		}
	}
}

func TestPrivilegedFallback(t *testing.T) {
	m := mustRender(t, "harnessfacts", ns, valueSets["privileged"])
	spec := daemonSet(t, m, "harnessfacts-node-agent").Spec.Template.Spec
	if spec.HostUsers != nil {
		t.Errorf("hostUsers = %v, want unset (the host's user namespace) with privileged", *spec.HostUsers)
	}
	c := container(t, spec, "node-agent")
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("privileged: true did not make the container privileged")
	}
	if c.SecurityContext.ProcMount != nil {
		t.Error("procMount is set on a privileged container (which sees an unmasked /proc anyway)")
	}
	v := volume(t, spec, "agent-runtimes")
	if v.HostPath == nil || v.HostPath.Path != "/opt/agent-clis" {
		t.Errorf("agent-runtimes = %+v, want hostPath /opt/agent-clis", v.VolumeSource)
	}
}

// Values that cannot work are refused at render time with a message that
// says what to change.
func TestRefusesValuesThatCannotWork(t *testing.T) {
	cases := []struct {
		name, values, want string
	}{
		{"hostUsers without privileged", "nodeAgent: {hostUsers: true}",
			"nodeAgent.hostUsers: true needs nodeAgent.privileged: true"},
		{"privileged in a user namespace", "nodeAgent: {privileged: true}",
			"nodeAgent.privileged needs nodeAgent.hostUsers: true"},
		{"ServiceMonitor without its Service", "controller: {metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}}",
			"controller.metrics.serviceMonitor.enabled needs controller.metrics.service.enabled"},
		{"two agent runtime sources", "nodeAgent: {agentRuntimes: {hostPath: /opt/x, image: {reference: x}}}",
			"set image.reference or hostPath, not both"},
		{"existing service account without a name", "nodeAgent: {serviceAccount: {create: false}}",
			"nodeAgent.serviceAccount.name is required"},
		// values.schema.json: a misspelt key is an error, not a silent default.
		{"misspelt value", "nodeAgent: {slot: 4}", "additional properties 'slot' not allowed"},
		{"more slots than a HarnessNode allows", "nodeAgent: {slots: 1000}", "/nodeAgent/slots"},
		{"relative run root", "nodeAgent: {runRoot: runs}", "/nodeAgent/runRoot"},
		{"unknown seccomp profile type", "nodeAgent: {seccompProfile: {type: Bogus}}", "value must be one of 'RuntimeDefault', 'Unconfined', 'Localhost'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, "harnessfacts", ns, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("rendering with %s: got error %v, want one saying %q", tc.values, err, tc.want)
			}
		})
	}
}

func TestHelmLint(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			args := []string{"lint", filepath.Join(root, "charts", "harnessfacts"), "--strict", "--namespace", ns}
			if values != "" {
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--values", f)
			}
			out, err := runCmd(helm, args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// The chart's copies of generated files are the generated files: make
// manifests copies them, and this catches a copy that was not refreshed.
func TestChartCopiesAreCurrent(t *testing.T) {
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	copies, _ := filepath.Glob(filepath.Join(root, "charts", "harnessfacts", "files", "crds", "*.yaml"))
	var want, got []string
	for _, f := range bases {
		want = append(want, filepath.Base(f))
	}
	for _, f := range copies {
		got = append(got, filepath.Base(f))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("charts/harnessfacts/files/crds does not hold the CRDs of config/crd/bases; run make manifests (-want +got):\n%s", diff)
	}
	pairs := [][2]string{{filepath.Join("config", "rbac", "controller", "role.yaml"), filepath.Join("charts", "harnessfacts", "files", "controller-role.yaml")}}
	for _, f := range want {
		pairs = append(pairs, [2]string{filepath.Join("config", "crd", "bases", f), filepath.Join("charts", "harnessfacts", "files", "crds", f)})
	}
	for _, p := range pairs {
		a, errA := os.ReadFile(filepath.Join(root, p[0]))
		b, errB := os.ReadFile(filepath.Join(root, p[1]))
		if errA != nil || errB != nil {
			t.Errorf("reading %s and its copy: %v %v", p[0], errA, errB)
			continue
		}
		if string(a) != string(b) {
			t.Errorf("%s is not a copy of %s: run make manifests", p[1], p[0])
		}
	}
}

func readYAML(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}
