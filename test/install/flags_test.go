package install

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartFlagsExistInTheBinary: every flag the chart passes (controller,
// node-agent, Windows node-agent) is one the harnessfacts binary's
// subcommand knows, so a renamed flag breaks this test, not a pod.
func TestChartFlagsExistInTheBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "harnessfacts")
	build := exec.Command("go", "build", "-o", bin, "./cmd/harnessfacts")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/harnessfacts: %v\n%s", err, out)
	}
	m := mustRender(t, "harnessfacts", ns, valueSets["windows"])
	var pods []struct {
		id   string
		spec corev1.PodSpec
	}
	for _, o := range m.only("Deployment") {
		pods = append(pods, struct {
			id   string
			spec corev1.PodSpec
		}{id(o), as[appsv1.Deployment](t, o).Spec.Template.Spec})
	}
	for _, o := range m.only("DaemonSet") {
		pods = append(pods, struct {
			id   string
			spec corev1.PodSpec
		}{id(o), as[appsv1.DaemonSet](t, o).Spec.Template.Spec})
	}
	if len(pods) != 3 {
		t.Fatalf("want the controller and two node-agents, got %d workloads", len(pods))
	}
	for _, p := range pods {
		args := p.spec.Containers[0].Args
		if len(args) == 0 {
			t.Errorf("%s passes no subcommand", p.id)
			continue
		}
		help, err := runCmd(bin, args[0], "--help")
		if err != nil {
			t.Errorf("%s: harnessfacts %s: %v", p.id, args[0], err)
			continue
		}
		for _, a := range args[1:] {
			name, _, _ := strings.Cut(a, "=")
			if !strings.HasPrefix(name, "--") {
				t.Errorf("%s: argument %q is not a flag", p.id, a)
				continue
			}
			if !regexp.MustCompile(`(?m)^\s+(?:-\w, )?` + regexp.QuoteMeta(name) + `\s`).MatchString(help) {
				t.Errorf("%s passes %s, which `harnessfacts %s` does not have:\n%s", p.id, name, args[0], help)
			}
		}
	}
}
