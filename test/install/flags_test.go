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
// node-agent, Windows node-agent) is one the subcommand of the binary the
// pod runs knows (the Linux node-agent image's entry point is
// harnessfacts-node-agent, the others run harnessfacts), so a renamed flag
// breaks this test, not a pod.
func TestChartFlagsExistInTheBinary(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent: %v\n%s", err, out)
	}
	m := mustRender(t, "harnessfacts", ns, valueSets["windows"])
	var pods []struct {
		id     string
		spec   corev1.PodSpec
		daemon bool
	}
	for _, o := range m.only("Deployment") {
		pods = append(pods, struct {
			id     string
			spec   corev1.PodSpec
			daemon bool
		}{id(o), as[appsv1.Deployment](t, o).Spec.Template.Spec, false})
	}
	for _, o := range m.only("DaemonSet") {
		pods = append(pods, struct {
			id     string
			spec   corev1.PodSpec
			daemon bool
		}{id(o), as[appsv1.DaemonSet](t, o).Spec.Template.Spec, true})
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
		// A Linux DaemonSet keeps the node-agent image's entry point; the
		// Windows one names harnessfacts-full.exe; the controller's image
		// runs harnessfacts, which hands the command to harnessfacts-full.
		bin := filepath.Join(dir, "harnessfacts")
		switch c := p.spec.Containers[0].Command; {
		case p.daemon && len(c) == 0:
			bin = filepath.Join(dir, "harnessfacts-node-agent")
		case len(c) == 1 && strings.HasSuffix(c[0], `\harnessfacts-full.exe`):
			bin = filepath.Join(dir, "harnessfacts-full")
		case len(c) > 0:
			t.Errorf("%s runs %v, which this test does not know", p.id, c)
			continue
		}
		help, err := runCmd(bin, args[0], "--help")
		if err != nil {
			t.Errorf("%s: %s %s: %v", p.id, filepath.Base(bin), args[0], err)
			continue
		}
		for _, a := range args[1:] {
			name, _, _ := strings.Cut(a, "=")
			if !strings.HasPrefix(name, "--") {
				t.Errorf("%s: argument %q is not a flag", p.id, a)
				continue
			}
			if !regexp.MustCompile(`(?m)^\s+(?:-\w, )?` + regexp.QuoteMeta(name) + `\s`).MatchString(help) {
				t.Errorf("%s passes %s, which `%s %s` does not have:\n%s", p.id, name, filepath.Base(bin), args[0], help)
			}
		}
	}
}
