package install

import (
	"bufio"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

// No container engine runs on our machines or in CI, so the images are not
// built here. These tests check what can be checked without one: that the
// Dockerfile's targets agree with the chart (uids, the CLI path, the install
// script), and that its Go build works with exactly the files the build
// context sends (what .dockerignore leaves).

type dockerStage struct {
	name, from string
	lines      []string // instructions, continuation lines joined
}

func readDockerfile(t *testing.T) map[string]*dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	var pending string
	from := regexp.MustCompile(`^FROM\s+(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, pending = pending+line, ""
		if m := from.FindStringSubmatch(line); m != nil {
			cur = &dockerStage{name: m[2], from: m[1]}
			stages[cur.name] = cur
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func (s *dockerStage) find(prefix string) []string {
	var out []string
	for _, l := range s.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func TestDockerfileMatchesChart(t *testing.T) {
	stages := readDockerfile(t)
	for _, name := range []string{"build", "controller", "node-agent", "node-agent-windows"} {
		if stages[name] == nil {
			t.Fatalf("the Dockerfile has no stage %q (docs/install.md builds it)", name)
		}
	}
	m := mustRender(t, "harnessfacts", ns, "")

	ctrl := stages["controller"]
	if !strings.HasPrefix(ctrl.from, "gcr.io/distroless/static") {
		t.Errorf("the controller image is based on %s, want a distroless static base", ctrl.from)
	}
	d := m.get(t, "Deployment", "harnessfacts-controller")
	uid, _, _ := unstructuredInt(d.Object, "spec", "template", "spec", "securityContext", "runAsUser")
	if users := ctrl.find("USER "); len(users) != 1 || users[0] != "USER "+uid+":"+uid {
		t.Errorf("controller image USER %v, the chart runs it as uid %s", users, uid)
	}

	na := stages["node-agent"]
	ds := as[appsv1.DaemonSet](t, m.get(t, "DaemonSet", "harnessfacts-node-agent"))
	cliPath := "/opt/harnessfacts/agents" // nodeAgent.agentRuntimes.path
	if !strings.HasPrefix(envValue(ds.Spec.Template.Spec.Containers[0], "PATH"), cliPath+"/bin:") {
		t.Fatalf("the chart's PATH does not start with %s/bin", cliPath)
	}
	runs := strings.Join(na.find("RUN "), "\n")
	if !strings.Contains(runs, "install-agent-clis.sh "+cliPath) {
		t.Errorf("the node-agent image does not install the CLIs with hack/install-agent-clis.sh into %s:\n%s", cliPath, runs)
	}
	for _, pkg := range []string{"bubblewrap", "slirp4netns", "nodejs", "npm"} {
		if !regexp.MustCompile(`apt-get install[^&]*\b` + pkg + `\b`).MatchString(runs) {
			t.Errorf("the node-agent image does not install Debian's %s", pkg)
		}
	}
	// Agents in the sandbox get the node-agent's fixed PATH, not the image's.
	if !strings.Contains(runs, "ln -s "+cliPath+"/bin/* /usr/local/bin/") || !slices.Contains(filepath.SplitList(executor.DefaultPath), "/usr/local/bin") {
		t.Errorf("the CLIs are not linked into a directory of the sandbox's PATH %s:\n%s", executor.DefaultPath, runs)
	}
	if env := na.find("ENV PATH="); len(env) != 1 || !strings.HasPrefix(env[0], "ENV PATH="+cliPath+"/bin:") {
		t.Errorf("the node-agent image's PATH %v does not start with the CLIs", env)
	}
	// The chart's node-agent DaemonSet and cleanup Job pass only arguments:
	// the image's entry point is the node-agent binary, copied from the
	// build stage, which builds it.
	if ep := na.find("ENTRYPOINT "); len(ep) != 1 || ep[0] != `ENTRYPOINT ["/usr/local/bin/harnessfacts-node-agent"]` {
		t.Errorf("the node-agent image's entry point is %v, want harnessfacts-node-agent", ep)
	}
	if !slices.Contains(na.find("COPY "), "COPY --from=build /out/linux/harnessfacts-node-agent /usr/local/bin/harnessfacts-node-agent") ||
		!strings.Contains(strings.Join(stages["build"].find("RUN "), "\n"), "./cmd/harnessfacts-node-agent") {
		t.Error("the node-agent image does not get harnessfacts-node-agent from the build stage")
	}
	if len(ds.Spec.Template.Spec.Containers[0].Command) != 0 {
		t.Errorf("the node-agent DaemonSet overrides the image's entry point with %v", ds.Spec.Template.Spec.Containers[0].Command)
	}
	if !slices.ContainsFunc(na.find("COPY "), func(l string) bool { return strings.HasPrefix(l, "COPY hack/install-agent-clis.sh ") }) {
		t.Error("the node-agent image does not copy hack/install-agent-clis.sh")
	}
}

// unstructuredInt returns the integer at fields as a decimal string.
func unstructuredInt(obj map[string]any, fields ...string) (string, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	switch v := cur.(type) {
	case float64:
		return strconv.FormatInt(int64(v), 10), true, nil
	case int64:
		return strconv.FormatInt(v, 10), true, nil
	}
	return "", false, nil
}

// dockerignored reports whether a path (slash-separated, relative to the
// repository) is left out of the build context by one of the patterns. It
// knows the forms our .dockerignore uses; TestDockerBuildContext fails on any
// other, rather than guess.
func dockerignored(patterns []string, p string) bool {
	for _, pat := range patterns {
		pat = strings.TrimSuffix(pat, "/")
		if rest, ok := strings.CutPrefix(pat, "**/"); ok {
			if m, _ := path.Match(rest, path.Base(p)); m {
				return true
			}
			continue
		}
		// A pattern matches the path or any directory above it.
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			if m, _ := path.Match(pat, q); m {
				return true
			}
		}
	}
	return false
}

// TestDockerBuildContext builds ./cmd/harnessfacts (and the sandboxes' init
// program) from a copy of the files
// the Docker build context holds, as the Dockerfile's build stage does: a
// .dockerignore that leaves out something the build needs (an embedded file,
// a package) fails here.
func TestDockerBuildContext(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") || strings.Contains(strings.TrimPrefix(l, "**/"), "**") {
			t.Fatalf(".dockerignore pattern %q is of a form this test does not understand; teach dockerignored", l)
		}
		patterns = append(patterns, l)
	}
	for _, p := range []string{"go.mod", "cmd/harnessfacts/main.go", "hack/install-agent-clis.sh"} {
		if dockerignored(patterns, p) {
			t.Errorf(".dockerignore leaves out %s, which the Dockerfile needs", p)
		}
	}
	for _, p := range []string{".git/config", "test/install/chart_test.go", "sandbox/sandbox_test.go", "bin/harnessfacts"} {
		if !dockerignored(patterns, p) {
			t.Errorf(".dockerignore sends %s into the build context", p)
		}
	}

	// The files git knows (tracked, or new and not ignored), less those.
	out, err := runCmd("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	n := 0
	for _, p := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		if p == "" || dockerignored(patterns, p) {
			continue
		}
		src := filepath.Join(root, filepath.FromSlash(p))
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		body, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(ctx, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, body, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", t.TempDir()+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent", "./cmd/harnessfacts-sandbox-init")
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent ./cmd/harnessfacts-sandbox-init in the Docker build context (%d files) failed: %v\n%s", n, err, out)
	}
}
