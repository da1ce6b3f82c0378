package v1alpha1_test

// These tests prove the CRD schema against a real kube-apiserver: what a user
// sends with kubectl is rejected with a message they understand, or accepted
// with the documented defaults filled in.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/crdschema"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// validRun is the smallest run a user would write: an exec agent against an
// inline fixture.
const validRun = `
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata:
  namespace: default
spec:
  agent:
    adapter: exec
    command: ["sh", "-c", "echo hello > out.txt"]
  fixture:
    inline:
      files:
        fixture.yaml: "prompt: say hello\n"
        workspace/README.md: "hello\n"
`

// run returns validRun as the unstructured object kubectl would send, with
// edit applied.
func run(t *testing.T, name string, edit func(obj map[string]any)) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(validRun), &obj); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(obj)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetName(name)
	return u
}

// set sets the value at a dotted path, creating maps on the way.
func set(obj map[string]any, path string, value any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := obj[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[parts[len(parts)-1]] = value
}

// del removes the value at a dotted path.
func del(obj map[string]any, path string) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		obj = obj[p].(map[string]any)
	}
	delete(obj, parts[len(parts)-1])
}

func strs(n int, s string) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestRejectsBadRuns(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string // a part of the API server's message the user must see
	}{
		{"unknown adapter", func(o map[string]any) { set(o, "spec.agent.adapter", "cursor") },
			`spec.agent.adapter: Unsupported value: "cursor"`},
		{"exec without command", func(o map[string]any) { del(o, "spec.agent.command") },
			"agent.command is required when agent.adapter is exec"},
		{"exec with an empty command", func(o map[string]any) { set(o, "spec.agent.command", []any{}) },
			"agent.command is required when agent.adapter is exec"},
		{"command with another adapter", func(o map[string]any) { set(o, "spec.agent.adapter", "codex") },
			"agent.command is only allowed with agent.adapter exec"},
		{"no agent", func(o map[string]any) { del(o, "spec.agent") },
			"spec.agent: Required value"},
		{"two fixture sources", func(o map[string]any) { set(o, "spec.fixture.configMapRef.name", "hello") },
			"exactly one fixture source must be set: fixture.configMapRef, fixture.inline, fixture.git or fixture.oci"},
		// Object names are DNS subdomains: "..", "a/../b" or an upper-case
		// name name nothing the API server could hold, and a local run
		// reads a fixture folder by this name (".." was the folder above
		// --fixtures).
		{"a fixture ConfigMap named ..", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.configMapRef.name", "..")
		}, `spec.fixture.configMapRef.name: Invalid value: "..": spec.fixture.configMapRef.name in body should match`},
		{"a fixture ConfigMap named with a slash", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.configMapRef.name", "a/../fixture-hello")
		}, `spec.fixture.configMapRef.name in body should match`},
		{"a credential's Secret named ..", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "..", "key": "k"}, "env": "KEY"}})
		}, `spec.agent.credentials[0].secretKeyRef.name in body should match`},
		{"git and oci fixture sources", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": strings.Repeat("a", 40)})
			set(o, "spec.fixture.oci.ref", "registry.test/fixtures/hello@sha256:"+strings.Repeat("b", 64))
		}, "exactly one fixture source must be set"},
		{"git commit is a branch name", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": "main"})
		}, "fixture.git.commit must be a full commit SHA"},
		{"git commit is not hex", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": strings.Repeat("g", 40)})
		}, "fixture.git.commit must be a full commit SHA"},
		{"git commit is short", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": "0123abc"})
		}, "fixture.git.commit must be a full commit SHA"},
		{"git commit in upper case", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": strings.Repeat("A", 40)})
		}, "fixture.git.commit must be a full commit SHA"},
		{"git url of another scheme", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "ssh://git.test/tasks.git", "commit": strings.Repeat("a", 40)})
		}, "fixture.git.url must be an absolute http or https URL"},
		{"git url with a password", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://bob:hunter2@git.test/tasks.git", "commit": strings.Repeat("a", 40)})
		}, "fixture.git.url must not carry credentials"},
		{"git credentials over plain http", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "http://git.test/tasks.git", "commit": strings.Repeat("a", 40),
				"secretRef": map[string]any{"name": "git-cred"}})
		}, "fixture.git.secretRef needs an https URL"},
		{"git path escaping the repository", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.git", map[string]any{"url": "https://git.test/tasks.git", "commit": strings.Repeat("a", 40),
				"path": "tasks/../../etc"})
		}, "fixture.git.path must be a relative path"},
		{"oci fixture by tag only", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.oci.ref", "registry.test/fixtures/hello:v1")
		}, "fixture.oci.ref must be pinned by digest"},
		{"oci fixture with a short digest", func(o map[string]any) {
			del(o, "spec.fixture.inline")
			set(o, "spec.fixture.oci.ref", "registry.test/fixtures/hello@sha256:abc")
		}, "fixture.oci.ref must be pinned by digest"},
		{"no fixture source", func(o map[string]any) { del(o, "spec.fixture.inline") },
			"exactly one fixture source must be set"},
		{"inline fixture without fixture.yaml", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"workspace/a": "x"})
		}, "an inline fixture needs a fixture.yaml entry"},
		{"inline path escaping the fixture", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace/../../etc/passwd": "x"})
		}, "keys must be relative paths"},
		{"absolute inline path", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "/etc/passwd": "x"})
		}, "keys must be relative paths"},
		{"inline path with a NUL", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace/a\x00b": "x"})
		}, "keys must not hold control characters"},
		{"inline path with a newline", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace/a\nb": "x"})
		}, "keys must not hold control characters"},
		{"inline path with a backslash", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", `workspace\..\x`: "x"})
		}, "keys must not hold control characters"},
		{"inline path with a colon", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "C:x": "x"})
		}, "keys must not hold control characters"},
		// Linux's NAME_MAX: the node-agent could not write such a file
		// (ENAMETOOLONG when it materializes the run dir).
		{"inline file name longer than 255 bytes", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace/" + strings.Repeat("L", 256): "x"})
		}, "each file or folder name may have at most 255 bytes"},
		{"inline folder name longer than 255 bytes in UTF-8", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace/" + strings.Repeat("é", 128) + "/a": "x"})
		}, "each file or folder name may have at most 255 bytes"},
		{"inline workspace as a file", func(o map[string]any) {
			set(o, "spec.fixture.inline.files", map[string]any{"fixture.yaml": "", "workspace": "x"})
		}, "workspace is the agent's folder"},
		{"zero episodeSeconds", func(o map[string]any) { set(o, "spec.limits.episodeSeconds", int64(0)) },
			"spec.limits.episodeSeconds: Invalid value: 0: spec.limits.episodeSeconds in body should be greater than or equal to 1"},
		{"negative probeSeconds", func(o map[string]any) { set(o, "spec.limits.probeSeconds", int64(-5)) },
			"spec.limits.probeSeconds in body should be greater than or equal to 1"},
		{"probe longer than the episode", func(o map[string]any) {
			set(o, "spec.limits.episodeSeconds", int64(60))
			set(o, "spec.limits.probeSeconds", int64(120))
		}, "limits.probeSeconds must not be longer than limits.episodeSeconds"},
		{"disk below 1Mi", func(o map[string]any) { set(o, "spec.limits.disk", "1023Ki") },
			"limits.disk must be at least 1Mi"},
		{"zero disk", func(o map[string]any) { set(o, "spec.limits.disk", "0") },
			"limits.disk must be at least 1Mi"},
		{"disk above 256Gi", func(o map[string]any) { set(o, "spec.limits.disk", "257Gi") },
			"limits.disk must be at most 256Gi"},
		{"disk of a terabyte", func(o map[string]any) { set(o, "spec.limits.disk", "1T") },
			"limits.disk must be at most 256Gi"},
		{"disk that is not a quantity", func(o map[string]any) { set(o, "spec.limits.disk", "lots") },
			"spec.limits.disk in body should match"},
		{"memory above 256Gi", func(o map[string]any) { set(o, "spec.limits.memory", "300Gi") },
			"limits.memory must be at most 256Gi"},
		{"huge maxOutputBytes", func(o map[string]any) { set(o, "spec.limits.maxOutputBytes", int64(1<<30+1)) },
			"spec.limits.maxOutputBytes in body should be less than or equal to 1073741824"},
		{"tiny memory", func(o map[string]any) { set(o, "spec.limits.memory", "1Ki") },
			"limits.memory must be at least 16Mi"},
		{"negative memory", func(o map[string]any) { set(o, "spec.limits.memory", "-1Gi") },
			"limits.memory must be at least 16Mi"},
		{"zero maxDecisions", func(o map[string]any) { set(o, "spec.limits.maxDecisions", int64(0)) },
			"spec.limits.maxDecisions in body should be greater than or equal to 1"},
		{"zero maxProcesses", func(o map[string]any) { set(o, "spec.limits.maxProcesses", int64(0)) },
			"spec.limits.maxProcesses in body should be greater than or equal to 1"},
		{"tiny maxOutputBytes", func(o map[string]any) { set(o, "spec.limits.maxOutputBytes", int64(10)) },
			"spec.limits.maxOutputBytes in body should be greater than or equal to 1024"},
		{"too many retries", func(o map[string]any) { set(o, "spec.retries", int64(11)) },
			"spec.retries in body should be less than or equal to 10"},
		{"negative ttl", func(o map[string]any) { set(o, "spec.ttlSecondsAfterFinished", int64(-1)) },
			"spec.ttlSecondsAfterFinished in body should be greater than or equal to 0"},
		{"credential delivered two ways", func(o map[string]any) {
			set(o, "spec.agent.adapter", "codex")
			del(o, "spec.agent.command")
			set(o, "spec.agent.credentials", []any{map[string]any{
				"secretKeyRef": map[string]any{"name": "openai", "key": "key"}, "env": "OPENAI_API_KEY", "file": "CodexAuth"}})
		}, "each credential is delivered exactly one way"},
		{"credential delivered no way", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}}})
		}, "each credential is delivered exactly one way"},
		{"credential in PATH", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "PATH"}})
		}, "this environment variable is set by the harness and cannot carry a credential"},
		// The loader's variables (LD_PRELOAD, LD_AUDIT, …) and those that
		// make a shell or iconv load code change how the agent's programs
		// start: refused all alike, as LD_PRELOAD was alone.
		{"credential in LD_AUDIT", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "LD_AUDIT"}})
		}, "this environment variable is set by the harness and cannot carry a credential"},
		{"credential in BASH_ENV", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "BASH_ENV"}})
		}, "this environment variable is set by the harness and cannot carry a credential"},
		{"credential in an XDG variable", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "XDG_CONFIG_HOME"}})
		}, "this environment variable is set by the harness"},
		{"credential env not a name", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "MY-KEY"}})
		}, `spec.agent.credentials[0].env in body should match`},
		{"same env twice", func(o map[string]any) {
			c := map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "env": "OPENAI_API_KEY"}
			set(o, "spec.agent.credentials", []any{c, c})
		}, "each credential env name may appear only once"},
		{"codex login file for gemini", func(o map[string]any) {
			set(o, "spec.agent.adapter", "gemini")
			del(o, "spec.agent.command")
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "file": "CodexAuth"}})
		}, "credential file CodexAuth is only accepted by the codex adapter"},
		{"unknown credential file", func(o map[string]any) {
			set(o, "spec.agent.credentials", []any{map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}, "file": "id_rsa"}})
		}, `spec.agent.credentials[0].file: Unsupported value: "id_rsa"`},
		{"too many extraArgs", func(o map[string]any) { set(o, "spec.agent.extraArgs", strs(65, "--x")) },
			"spec.agent.extraArgs: Too many: 65: must have at most 64 items"},
		{"too long model", func(o map[string]any) { set(o, "spec.agent.model", strings.Repeat("m", 300)) },
			"spec.agent.model: Too long: may not be more than 256"},
		{"too many allowHosts", func(o map[string]any) {
			hosts := make([]any, 33)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("host-%d.example.test", i)
			}
			set(o, "spec.network.allowHosts", hosts)
		},
			"spec.network.allowHosts: Too many: 33: must have at most 32 items"},
		{"allowHost that is not a host", func(o map[string]any) { set(o, "spec.network.allowHosts", []any{"http://x/y"}) },
			"spec.network.allowHosts[0] in body should match"},
		// The egress proxy refuses these at the node-agent (EgressProxyFailed,
		// after the run was bound and claimed); the schema says so first.
		{"allowHost with port 0", func(o map[string]any) { set(o, "spec.network.allowHosts", []any{"10.0.0.1:0"}) },
			"network.allowHosts: a port must be 1 to 65535"},
		{"allowHost with a port above 65535", func(o map[string]any) { set(o, "spec.network.allowHosts", []any{"host:99999"}) },
			"network.allowHosts: a port must be 1 to 65535"},
		{"allowHost with an empty label", func(o map[string]any) { set(o, "spec.network.allowHosts", []any{"a..b"}) },
			"network.allowHosts: each entry must be a host name"},
		{"allowHost with a label ending in '-'", func(o map[string]any) { set(o, "spec.network.allowHosts", []any{"a-.example.test"}) },
			"network.allowHosts: each entry must be a host name"},
		{"allowHost with a label of 64 characters", func(o map[string]any) {
			set(o, "spec.network.allowHosts", []any{strings.Repeat("a", 64) + ".example.test:443"})
		}, "network.allowHosts: each entry must be a host name"},
		{"unknown egress", func(o map[string]any) { set(o, "spec.network.egress", "Everything") },
			`spec.network.egress: Unsupported value: "Everything"`},
		{"unknown isolation policy", func(o map[string]any) { set(o, "spec.isolation.policy", "Never") },
			`spec.isolation.policy: Unsupported value: "Never"`},
		{"unknown MCP transport", func(o map[string]any) { set(o, "spec.mcp.transport", "SSE") },
			`spec.mcp.transport: Unsupported value: "SSE"`},
		{"provider URL that is not http", func(o map[string]any) { set(o, "spec.agent.providerURL", "file:///etc/passwd") },
			"agent.providerURL must be an absolute http or https URL"},
		{"relative provider URL", func(o map[string]any) { set(o, "spec.agent.providerURL", "localhost:8080") },
			"agent.providerURL must be an absolute http or https URL"},
		{"provider URL with a user and password", func(o map[string]any) { set(o, "spec.agent.providerURL", "https://user:pw@models.example/v1") },
			"agent.providerURL must not carry a user or password"},
		{"provider URL with a query", func(o map[string]any) {
			set(o, "spec.agent.adapter", "codex")
			delete(o["spec"].(map[string]any)["agent"].(map[string]any), "command")
			set(o, "spec.agent.providerURL", "https://models.example/openai?api-version=2025-04-01-preview")
		}, "agent.providerURL must be a base URL without a query or fragment"},
		{"provider URL with a fragment", func(o map[string]any) {
			set(o, "spec.agent.adapter", "claude-code")
			delete(o["spec"].(map[string]any)["agent"].(map[string]any), "command")
			set(o, "spec.agent.providerURL", "https://models.example/#x")
		}, "agent.providerURL must be a base URL without a query or fragment"},
		{"provider URL with no host", func(o map[string]any) { set(o, "spec.agent.providerURL", "http:///nohost") },
			"agent.providerURL must name a host"},
		{"provider URL with port 99999", func(o map[string]any) { set(o, "spec.agent.providerURL", "http://127.0.0.1:99999") },
			"agent.providerURL's port must be 1 to 65535"},
		{"provider URL with port 0", func(o map[string]any) { set(o, "spec.agent.providerURL", "http://127.0.0.1:0/v1") },
			"agent.providerURL's port must be 1 to 65535"},
		{"environment image by tag only", func(o map[string]any) { set(o, "spec.environment.image", "registry.test/task/env:latest") },
			"environment.image must be pinned by digest"},
		{"environment image with a short digest", func(o map[string]any) {
			set(o, "spec.environment.image", "registry.test/task/env@sha256:abc")
		}, "environment.image must be pinned by digest"},
		{"environment image with a digest of another algorithm", func(o map[string]any) {
			set(o, "spec.environment.image", "registry.test/task/env@md5:"+strings.Repeat("a", 32))
		}, "environment.image must be pinned by digest"},
		{"environment image with an upper-case digest", func(o map[string]any) {
			set(o, "spec.environment.image", "registry.test/task/env@sha256:"+strings.Repeat("A", 64))
		}, "environment.image must be pinned by digest"},
		// A NUL would end a string where the agent receives it, and in
		// bwrap's NUL-separated options it added one of its own
		// ("x\x00--share-net" put the agent on the node's network).
		{"a NUL in the prompt", func(o map[string]any) { set(o, "spec.fixture.prompt", "x\x00--share-net") },
			"must not hold a NUL byte: it would end the prompt"},
		{"a NUL in the model", func(o map[string]any) { set(o, "spec.agent.model", "m\x00--share-net") },
			"must not hold a NUL byte: it would end the model name"},
		{"a terminal escape in the model", func(o map[string]any) { set(o, "spec.agent.model", "gpt\x1b[2J\x1b]0;pwned\x07") },
			"must not hold a control character"},
		{"an 8-bit CSI in the model", func(o map[string]any) { set(o, "spec.agent.model", "gpt\u009b2J") },
			"must not hold a control character"},
		{"a NUL in an extra argument", func(o map[string]any) {
			set(o, "spec.agent.extraArgs", []any{"--verbose", "x\x00--share-net"})
		}, "must not hold a NUL byte: it would end the argument"},
		{"a NUL in the exec command", func(o map[string]any) {
			set(o, "spec.agent.adapter", "exec")
			set(o, "spec.agent.command", []any{"sh", "-c", "true\x00--share-net"})
		}, "must not hold a NUL byte: it would end the argument"},
		{"an empty program", func(o map[string]any) {
			set(o, "spec.agent.adapter", "exec")
			set(o, "spec.agent.command", []any{"", "x"})
		}, "agent.command[0], the program to run, must not be empty"},
	}
	if len(cases) < 15 {
		t.Fatalf("the table must hold at least 15 bad runs, has %d", len(cases))
	}
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := run(t, fmt.Sprintf("bad-%d", i), tc.edit)
			err := k8s.Create(ctx, obj)
			if err == nil {
				_ = k8s.Delete(ctx, obj)
				t.Fatalf("the API server accepted a bad run; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error does not say what is wrong:\n got: %v\nwant: ...%s...", err, tc.want)
			}
			t.Logf("rejected: %v", err)
			// `harnessfacts run -f` refuses it too, saying the same.
			local := run(t, fmt.Sprintf("bad-%d", i), tc.edit)
			if err := crdschema.DefaultAndValidate(ctx, local.Object); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the local run's validation said %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// The schema fills isolation and network, but no limit: a limit the run
// leaves unset must stay visible as unset, so that its fixture's applies
// (harnessv1.ResolveLimits). Filling them here was the bug that made every
// fixture's limits dead letters.
// An environment image pinned by digest is accepted, with or without a tag
// before the digest and with a registry port.
func TestAcceptsAnEnvironmentPinnedByDigest(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0f", 32)
	for i, ref := range []string{"registry.test/task/env" + digest, "127.0.0.1:5000/tasks/hello:v1" + digest, "debian" + digest} {
		obj := run(t, fmt.Sprintf("env-ok-%d", i), func(o map[string]any) {
			set(o, "spec.environment.image", ref)
			set(o, "spec.environment.imagePullSecrets", []any{map[string]any{"name": "regcred"}})
		})
		if err := k8s.Create(context.Background(), obj); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		_ = k8s.Delete(context.Background(), obj)
	}
}

// A git fixture at a full commit (with credentials over https or to a
// loopback address, and a sub-path) and an OCI fixture pinned by digest are
// accepted.
func TestAcceptsGitAndOCIFixtures(t *testing.T) {
	commit := strings.Repeat("0f", 20)
	for i, src := range []map[string]any{
		{"git": map[string]any{"url": "https://git.test/org/tasks.git", "commit": commit, "path": "tasks/hello",
			"secretRef": map[string]any{"name": "git-cred"}}},
		{"git": map[string]any{"url": "http://127.0.0.1:8080/tasks.git", "commit": commit, "secretRef": map[string]any{"name": "git-cred"}}},
		{"git": map[string]any{"url": "http://git.test/public.git", "commit": commit}},
		{"oci": map[string]any{"ref": "127.0.0.1:5000/fixtures/hello:v1@sha256:" + strings.Repeat("ab", 32),
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}}}},
	} {
		obj := run(t, fmt.Sprintf("fixture-src-ok-%d", i), func(o map[string]any) {
			del(o, "spec.fixture.inline")
			for k, v := range src {
				set(o, "spec.fixture."+k, v)
			}
		})
		if err := k8s.Create(context.Background(), obj); err != nil {
			t.Fatalf("%v: %v", src, err)
		}
		_ = k8s.Delete(context.Background(), obj)
	}
}

func TestDefaultsAreFilledInButNoLimit(t *testing.T) {
	ctx := context.Background()
	obj := run(t, "defaults", nil)
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("a valid run was rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })

	var got harnessv1.HarnessRun
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(harnessv1.Limits{}, got.Spec.Limits); diff != "" {
		t.Errorf("the API server filled limits the run left unset (-want +got):\n%s", diff)
	}
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(harnessv1.GroupVersion.WithKind("HarnessRun"))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatal(err)
	}
	if l := stored.Object["spec"].(map[string]any)["limits"]; len(l.(map[string]any)) != 0 {
		t.Errorf("spec.limits was stored as %v; want it empty", l)
	}
	if got.Spec.Isolation.Policy != harnessv1.IsolationRequired {
		t.Errorf("isolation.policy = %q, want Required", got.Spec.Isolation.Policy)
	}
	if got.Spec.Network.Egress != harnessv1.EgressProviderOnly {
		t.Errorf("network.egress = %q, want ProviderOnly", got.Spec.Network.Egress)
	}

	// A limit the run sets is kept as it is, the others stay unset; a
	// probe longer than the default episode is no longer judged against a
	// default the run never asked for (ResolveLimits keeps the probe within
	// the resolved episode).
	some := run(t, "some-limits", func(o map[string]any) {
		set(o, "spec.limits.probeSeconds", int64(400))
		set(o, "spec.limits.disk", "1Mi")
	})
	if err := k8s.Create(ctx, some); err != nil {
		t.Fatalf("a run with some limits was rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, some) })
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(some), &got); err != nil {
		t.Fatal(err)
	}
	want := harnessv1.Limits{ProbeSeconds: 400, Disk: ptr.To(resource.MustParse("1Mi"))}
	if diff := cmp.Diff(want, got.Spec.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
}

// limits.disk's bounds are the schema's CEL rules: the least and the most
// it may be are accepted, and TestRejectsBadRuns shows each side refused
// with its message.
func TestDiskBoundsAccepted(t *testing.T) {
	ctx := context.Background()
	for i, disk := range []string{"1Mi", "1Gi", "256Gi", "1048576"} {
		obj := run(t, fmt.Sprintf("disk-%d", i), func(o map[string]any) { set(o, "spec.limits.disk", disk) })
		if err := k8s.Create(ctx, obj); err != nil {
			t.Errorf("limits.disk %s was refused: %v", disk, err)
			continue
		}
		_ = k8s.Delete(ctx, obj)
	}
}

// The allowHosts and inline file name rules refuse only what the node-agent
// cannot use: the bounds themselves are accepted.
func TestAllowHostsAndInlineNamesAtTheirBounds(t *testing.T) {
	ctx := context.Background()
	obj := run(t, "bounds", func(o map[string]any) {
		set(o, "spec.network.allowHosts", []any{
			"10.0.0.1:65535", "a-b.example.test:1", strings.Repeat("a", 63) + ".example.test:00443", "localhost",
		})
		set(o, "spec.fixture.inline.files", map[string]any{
			"fixture.yaml": "", "workspace/" + strings.Repeat("L", 255): "x", "workspace/" + strings.Repeat("é", 127) + "/a": "y",
		})
	})
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("a run at the bounds was refused: %v", err)
	}
	_ = k8s.Delete(ctx, obj)
}

func TestAcceptsEveryAdapterAndCredentialForm(t *testing.T) {
	ctx := context.Background()
	for _, a := range harnessv1.Adapters {
		obj := run(t, "adapter-"+string(a), func(o map[string]any) {
			set(o, "spec.agent.adapter", string(a))
			if a != harnessv1.AdapterExec {
				del(o, "spec.agent.command")
			}
			creds := []any{map[string]any{"secretKeyRef": map[string]any{"name": "keys", "key": "api"}, "env": "SOME_API_KEY"}}
			if f := map[harnessv1.Adapter]string{"codex": "CodexAuth", "claude-code": "ClaudeCredentials", "opencode": "OpenCodeAuth"}[a]; f != "" {
				creds = append(creds, map[string]any{"secretKeyRef": map[string]any{"name": "keys", "key": "login"}, "file": f})
			}
			set(o, "spec.agent.credentials", creds)
			set(o, "spec.agent.providerURL", "http://127.0.0.1:8080/v1")
			set(o, "spec.network.allowHosts", []any{"api.example.test:443", "mirror.example.test"})
			set(o, "spec.mcp.transport", "Stdio")
			set(o, "spec.limits.memory", "512Mi")
		})
		if err := k8s.Create(ctx, obj); err != nil {
			t.Errorf("adapter %s: a valid run was rejected: %v", a, err)
			continue
		}
		_ = k8s.Delete(ctx, obj)
	}
}

func TestSpecIsImmutableExceptCancelAndTTL(t *testing.T) {
	ctx := context.Background()
	obj := run(t, "immutable", nil)
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	key := client.ObjectKeyFromObject(obj)

	update := func(edit func(*harnessv1.HarnessRun)) error {
		var r harnessv1.HarnessRun
		if err := k8s.Get(ctx, key, &r); err != nil {
			t.Fatal(err)
		}
		edit(&r)
		return k8s.Update(ctx, &r)
	}
	rejected := []struct {
		name string
		edit func(*harnessv1.HarnessRun)
		want string
	}{
		{"agent", func(r *harnessv1.HarnessRun) { r.Spec.Agent.Model = "other" }, "spec.agent is immutable"},
		{"fixture", func(r *harnessv1.HarnessRun) { r.Spec.Fixture.Prompt = "other" }, "spec.fixture is immutable"},
		{"limits", func(r *harnessv1.HarnessRun) { r.Spec.Limits.EpisodeSeconds = 10 }, "spec.limits is immutable"},
		{"network", func(r *harnessv1.HarnessRun) { r.Spec.Network.Egress = harnessv1.EgressUnrestricted }, "spec.network is immutable"},
		{"isolation", func(r *harnessv1.HarnessRun) { r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback }, "spec.isolation is immutable"},
		{"nodeSelector added", func(r *harnessv1.HarnessRun) { r.Spec.NodeSelector = map[string]string{"a": "b"} }, "spec.nodeSelector is immutable"},
		{"mcp added", func(r *harnessv1.HarnessRun) {
			r.Spec.MCP = &harnessv1.MCPSpec{Transport: harnessv1.MCPTransportHTTP}
		}, "spec.mcp is immutable"},
		{"retries", func(r *harnessv1.HarnessRun) { r.Spec.Retries = 3 }, "spec.retries is immutable"},
	}
	for _, tc := range rejected {
		err := update(tc.edit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("changing %s after create: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	if err := update(func(r *harnessv1.HarnessRun) { r.Spec.TTLSecondsAfterFinished = ptr.To[int32](60) }); err != nil {
		t.Errorf("setting ttlSecondsAfterFinished after create was rejected: %v", err)
	}
	if err := update(func(r *harnessv1.HarnessRun) { r.Spec.Cancel = true }); err != nil {
		t.Fatalf("cancelling a run was rejected: %v", err)
	}
	err := update(func(r *harnessv1.HarnessRun) { r.Spec.Cancel = false })
	if err == nil || !strings.Contains(err.Error(), "spec.cancel cannot be set back to false") {
		t.Errorf("un-cancelling: got %v, want it refused", err)
	}
}

func TestNodeNameIsASelectableField(t *testing.T) {
	ctx := context.Background()
	for _, n := range []struct{ run, node string }{{"sel-a", "node-a"}, {"sel-b", "node-b"}} {
		obj := run(t, n.run, nil)
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
		var r harnessv1.HarnessRun
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &r); err != nil {
			t.Fatal(err)
		}
		r.Status.NodeName = n.node
		r.Status.Phase = harnessv1.RunScheduled
		if err := k8s.Status().Update(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	var list harnessv1.HarnessRunList
	if err := k8s.List(ctx, &list, client.InNamespace("default"),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.nodeName", "node-b")}); err != nil {
		t.Fatalf("listing by status.nodeName: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "sel-b" {
		var names []string
		for _, it := range list.Items {
			names = append(names, it.Name)
		}
		t.Fatalf("runs on node-b = %v, want [sel-b]", names)
	}
}

func TestHarnessNodeSchema(t *testing.T) {
	ctx := context.Background()
	node := &harnessv1.HarnessNode{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Spec:       harnessv1.HarnessNodeSpec{Slots: 4},
	}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatalf("a valid HarnessNode was rejected: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, node) })
	node.Status.Adapters = []harnessv1.AdapterInfo{{Name: harnessv1.AdapterExec}, {Name: harnessv1.AdapterCodex, Version: "0.171.0"}}
	node.Status.Adapters = append(node.Status.Adapters, harnessv1.AdapterInfo{Name: "cursor"})
	err := k8s.Status().Update(ctx, node)
	if err == nil || !strings.Contains(err.Error(), `Unsupported value: "cursor"`) {
		t.Errorf("an unknown adapter in HarnessNode status: got %v, want it refused", err)
	}
	bad := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}, Spec: harnessv1.HarnessNodeSpec{Slots: 1000}}
	err = k8s.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "spec.slots in body should be less than or equal to 256") {
		t.Errorf("1000 slots: got %v, want it refused", err)
	}
}

// kubectl runs the kubectl built with the control plane against it.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.Assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestKubectlExplainShowsTheFieldDocs(t *testing.T) {
	out := kubectl(t, "explain", "harnessrun.spec.limits")
	for _, want := range []string{
		"episodeSeconds", "bounds the agent's whole episode",
		"probeSeconds", "bounds each fixture check and each MCP call",
		"memory", "maxDecisions", "maxProcesses", "maxOutputBytes", "maxArtifactBytes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain harnessrun.spec.limits does not show %q:\n%s", want, out)
		}
	}
	out = kubectl(t, "explain", "hfrun.spec.agent.adapter")
	if !strings.Contains(out, "claude-code") || !strings.Contains(out, "exec") {
		t.Errorf("kubectl explain hfrun.spec.agent.adapter does not list the adapters:\n%s", out)
	}
}

func TestKubectlGetShowsThePrinterColumns(t *testing.T) {
	ctx := context.Background()
	obj := run(t, "columns", nil)
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	out := kubectl(t, "get", "hfrun", "columns", "-n", "default")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want := []string{"NAME", "ADAPTER", "FIXTURE", "NODE", "PHASE", "VERDICT", "AGE"}
	if diff := cmp.Diff(want, header); diff != "" {
		t.Errorf("kubectl get hfrun columns (-want +got):\n%s\n%s", diff, out)
	}
	out = kubectl(t, "get", "hfrun", "columns", "-n", "default", "-o", "wide")
	header = strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want = append(want, "REASON", "ATTEMPT", "EVIDENCE")
	if diff := cmp.Diff(want, header); diff != "" {
		t.Errorf("kubectl get hfrun -o wide columns (-want +got):\n%s\n%s", diff, out)
	}
	// The short names do not take Flux's hr (HelmRelease).
	out = kubectl(t, "api-resources", "--api-group", harnessv1.GroupVersion.Group)
	for _, want := range []string{"hfrun", "hfnode", "hfsuite"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources lacks the short name %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, " hr ") {
		t.Errorf("a harnessfacts.io resource still has the short name hr:\n%s", out)
	}
	out = kubectl(t, "get", "harnessnodes")
	if !strings.Contains(out, "No resources found") && !strings.Contains(out, "SLOTS") {
		t.Errorf("kubectl get harnessnodes: %s", out)
	}
}

// A fixture's limits never pass the API server; harnessv1.CheckLimits holds
// them to the schema's bounds. Both must agree on every side of every bound.
func TestCheckLimitsAgreesWithTheSchema(t *testing.T) {
	cases := []harnessv1.Limits{
		{EpisodeSeconds: 1}, {EpisodeSeconds: 86400}, {EpisodeSeconds: 86401},
		{ProbeSeconds: 86400}, {ProbeSeconds: 86401}, {EpisodeSeconds: 10, ProbeSeconds: 10}, {EpisodeSeconds: 10, ProbeSeconds: 11},
		{Memory: ptr.To(resource.MustParse("16Mi"))}, {Memory: ptr.To(resource.MustParse("15Mi"))},
		{Memory: ptr.To(resource.MustParse("256Gi"))}, {Memory: ptr.To(resource.MustParse("257Gi"))},
		{Disk: ptr.To(resource.MustParse("1Mi"))}, {Disk: ptr.To(resource.MustParse("1023Ki"))},
		{Disk: ptr.To(resource.MustParse("256Gi"))}, {Disk: ptr.To(resource.MustParse("257Gi"))},
		{MaxDecisions: 1000000}, {MaxDecisions: 1000001}, {MaxProcesses: 65536}, {MaxProcesses: 65537},
		{MaxOutputBytes: 1024}, {MaxOutputBytes: 1023}, {MaxOutputBytes: 1 << 30}, {MaxOutputBytes: 1<<30 + 1},
		{MaxArtifactBytes: 1 << 30}, {MaxArtifactBytes: 1<<30 + 1},
	}
	ctx := context.Background()
	for i, l := range cases {
		obj := run(t, fmt.Sprintf("bounds-%d", i), nil)
		lim, err := runtimeToMap(l)
		if err != nil {
			t.Fatal(err)
		}
		set(obj.Object, "spec.limits", lim)
		apiErr := k8s.Create(ctx, obj)
		if apiErr == nil {
			_ = k8s.Delete(ctx, obj)
		}
		checkErr := harnessv1.CheckLimits(&l)
		if (apiErr == nil) != (checkErr == nil) {
			t.Errorf("limits %v: the API server says %v, CheckLimits says %v", lim, apiErr, checkErr)
		}
	}
}

func runtimeToMap(v any) (map[string]any, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, yaml.Unmarshal(data, &out)
}

// A HarnessPolicy ceiling below the least a limit may be would lower a
// default to a value no run may have (and status.limits could not be
// written): the schema refuses it.
func TestPolicyCeilingsAtLeastTheLeastLimit(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		limits harnessv1.PolicyLimits
		want   string
	}{
		{"maxDisk below 1Mi", harnessv1.PolicyLimits{MaxDisk: ptr.To(resource.MustParse("512Ki"))}, "limits.maxDisk must be at least 1Mi"},
		{"maxMemory below 16Mi", harnessv1.PolicyLimits{MaxMemory: ptr.To(resource.MustParse("8Mi"))}, "limits.maxMemory must be at least 16Mi"},
		{"the least of each", harnessv1.PolicyLimits{MaxDisk: ptr.To(resource.MustParse("1Mi")), MaxMemory: ptr.To(resource.MustParse("16Mi"))}, ""},
	}
	for i, tc := range cases {
		p := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ceilings-%d", i)},
			Spec: harnessv1.HarnessPolicySpec{Limits: &tc.limits}}
		err := k8s.Create(ctx, p)
		if err == nil {
			_ = k8s.Delete(ctx, p)
		}
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}
