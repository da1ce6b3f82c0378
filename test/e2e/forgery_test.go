//go:build linux

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// goShim is a -toolexec program that reports every compilation as a
// success: with it in GOFLAGS, `go build` passes a package that does not
// compile.
const goShim = `#!/bin/sh
tool=$1; shift
case "${tool##*/} $*" in "compile -V"*) exec "$tool" "$@";; compile*)
	prev=; for a in "$@"; do [ "$prev" = -o ] && : > "$a"; prev=$a; done; exit 0 ;;
esac
exec "$tool" "$@"
`

// Each case is a real forgery an agent can try: it does not do the task,
// plants something, and exits 0. The check is honest and must fail; a
// forgery that works turns it into a pass. Checks run in a fresh sandbox
// (own HOME, TMPDIR and XDG folders, the node's PATH, none of the agent's
// files but the workspace), and the verifier part (tests/) and fixture.yaml
// are not in the agent's sandbox, so none of them may work.
func TestChecksCannotBeForged(t *testing.T) {
	ns := newNamespace(t, "e2e-forgery")
	pyCheck := map[string]string{
		"tests/check.py": "import pathlib, sys\nsys.exit(0 if pathlib.Path('answer.txt').read_text().strip() == '42' else 1)\n",
	}
	cases := []struct {
		name  string
		agent string            // bash, run in the workspace
		check string            // the fixture's honest check (shell form)
		files map[string]string // more fixture files
		// A check before it, which runs the agent's code (a build), when set.
		before string
	}{
		{
			name: "python usercustomize",
			agent: `d=$(python3 -c 'import site; print(site.getusersitepackages())'); mkdir -p "$d"
echo 'import os; os._exit(0)' > "$d/usercustomize.py"`,
			check: `python3 "$HARNESSFACTS_TESTS/check.py"`, files: pyCheck,
		},
		{
			// (A sitecustomize.py there is shadowed by Debian's own; a .pth
			// file's import line runs at every start.)
			name: "python .pth hook in the user site",
			agent: `d=$(python3 -c 'import site; print(site.getusersitepackages())'); mkdir -p "$d"
echo 'import os; os._exit(0)' > "$d/zz-hook.pth"; echo 'import os; os._exit(0)' > "$d/sitecustomize.py"`,
			check: `python3 "$HARNESSFACTS_TESTS/check.py"`, files: pyCheck,
		},
		{
			name: "go env -w GOFLAGS=-toolexec",
			agent: `cat > "$HOME/shim.sh" <<'EOF'
` + goShim + `EOF
chmod +x "$HOME/shim.sh"; /usr/local/go/bin/go env -w "GOFLAGS=-toolexec=$HOME/shim.sh"`,
			check: `GOTOOLCHAIN=local /usr/local/go/bin/go build ./...`,
			files: map[string]string{"workspace/go.mod": "module m\n\ngo 1.21\n", "workspace/m.go": "package m\n\nvar X int = \"not an int\"\n"},
		},
		{
			name: "git global config: a clean filter hides a change",
			agent: `git init -q . && git add . && git -c user.name=a -c user.email=a@b commit -qm base
echo tampered > protected.txt
printf 'protected.txt filter=hide\n' > "$HOME/attributes"
git config --global core.attributesFile "$HOME/attributes"
git config --global filter.hide.clean 'git show HEAD:protected.txt'`,
			check: `git diff --quiet -- protected.txt`,
			files: map[string]string{"workspace/protected.txt": "original\n"},
		},
		{
			name: "git repo hooks and fsmonitor in the workspace",
			agent: `git init -q . && git add . && git -c user.name=a -c user.email=a@b commit -qm base
echo tampered > protected.txt
printf '#!/bin/sh\necho tampered >&2; exit 0\n' > .git/fsm.sh; chmod +x .git/fsm.sh
git config core.fsmonitor "$PWD/.git/fsm.sh"; git config core.hooksPath "$PWD/.git"`,
			check: `git diff --quiet -- protected.txt`,
			files: map[string]string{"workspace/protected.txt": "original\n"},
		},
		{
			name: "git repository config: a clean filter in the workspace's own .git/config",
			agent: `git init -q . && git add . && git -c user.name=a -c user.email=a@b commit -qm base
echo tampered > protected.txt
printf 'protected.txt filter=hide\n' > .gitattributes
git config filter.hide.clean 'git show HEAD:protected.txt'
git config diff.external /bin/true`,
			check: `git diff --quiet -- protected.txt`,
			files: map[string]string{"workspace/protected.txt": "original\n"},
		},
		{
			name: "git repository config behind a gitdir file",
			agent: `git init -q . && git add . && git -c user.name=a -c user.email=a@b commit -qm base
echo tampered > protected.txt
printf 'protected.txt filter=hide\n' > .gitattributes
git config filter.hide.clean 'git show HEAD:protected.txt'
mv .git .store && echo 'gitdir: .store' > .git`,
			check: `git diff --quiet -- protected.txt`,
			files: map[string]string{"workspace/protected.txt": "original\n"},
		},
		{
			name:  "a PATH shim in the agent's home",
			agent: `for d in "$HOME/bin" "$HOME/.local/bin"; do mkdir -p "$d"; printf '#!/bin/sh\nexit 0\n' > "$d/grep"; chmod +x "$d/grep"; done`,
			check: `grep -qx 42 answer.txt`,
		},
		{
			name:  "a replaced interpreter in the workspace",
			agent: `printf '#!/bin/sh\nexit 0\n' > python3; chmod +x python3; mkdir -p bin; cp python3 bin/python3`,
			check: `python3 "$HARNESSFACTS_TESTS/check.py"`, files: pyCheck,
		},
		{
			name: "the check script edited by the agent",
			agent: `for f in ../fixture/tests/check.sh ../fixture/fixture.yaml; do
  printf 'exit 0\n' > "$f" 2>/dev/null || true
done
mkdir -p ../fixture/tests 2>/dev/null && printf 'exit 0\n' > ../fixture/tests/check.sh 2>/dev/null || true`,
			check: `sh "$HARNESSFACTS_TESTS/check.sh"`,
			files: map[string]string{"tests/check.sh": "test \"$(cat answer.txt 2>/dev/null)\" = 42\n"},
		},
		{
			name:  "the expected output read from the verifier part",
			agent: `cat ../fixture/tests/expected.txt > answer.txt 2>/dev/null || grep -o 'secret-answer-[0-9]*' ../fixture/fixture.yaml > answer.txt || true`,
			// The check names the answer, as checks often do: fixture.yaml
			// is for the checks alone, like tests/.
			check: `grep -qx secret-answer-1729 answer.txt`,
			files: map[string]string{"tests/expected.txt": "secret-answer-1729\n"},
		},
		{
			// The verifier part is not there while the agent runs, but a
			// link to where it will be is followed by the check.
			name:  "a link in the workspace to the verifier part",
			agent: `ln -s ../fixture/tests/expected.txt answer.txt`,
			check: `cmp -s answer.txt "$HARNESSFACTS_TESTS/expected.txt"`,
			files: map[string]string{"tests/expected.txt": "secret-answer-1729\n"},
		},
		{
			name:  "a link to the verifier part through a link to /",
			agent: `ln -s / root && ln -s "root$HARNESSFACTS_RUN/fixture/tests/expected.txt" answer.txt`,
			check: `cmp -s answer.txt "$HARNESSFACTS_TESTS/expected.txt"`,
			files: map[string]string{"tests/expected.txt": "secret-answer-1729\n"},
		},
		{
			name:  "a link to a descriptor the check holds open",
			agent: `ln -s /dev/fd/3 answer.txt`,
			check: `exec 3<"$HARNESSFACTS_TESTS/expected.txt"; grep -qx secret-answer-1729 answer.txt`,
			files: map[string]string{"tests/expected.txt": "secret-answer-1729\n"},
		},
		{
			// python3 -c and -m put the working directory, the workspace,
			// first on sys.path: a module of the standard library's name
			// left there answered a check that imports only that.
			name:  "a standard-library module shadowed in the workspace",
			agent: `echo garbage > answer.txt; mkdir -p json; printf 'import os\nos._exit(0)\n' > json/__init__.py`,
			check: `python3 -c 'import json, sys; sys.exit(0 if json.load(open("answer.txt")) == 42 else 1)'`,
		},
		{
			// A check that runs the agent's code (a build) runs it where
			// the verifier part is readable and the workspace writable:
			// the agent's build script copies the expected output into
			// the workspace, for the honest check after it.
			name:   "an earlier check runs the agent's code, which writes the answer",
			agent:  `echo wrong > answer.txt; printf 'cp "$HARNESSFACTS_TESTS/expected.txt" answer.txt; echo built\n' > build.sh`,
			before: `sh ./build.sh`,
			check:  `cmp -s answer.txt "$HARNESSFACTS_TESTS/expected.txt"`,
			files:  map[string]string{"tests/expected.txt": "secret-answer-1729\n"},
		},
		{
			name: ".bashrc, .profile, BASH_ENV and ENV hooks",
			agent: `for f in .bashrc .bash_profile .profile .bash_login .shrc; do printf 'exit 0\n' > "$HOME/$f"; done
printf 'exit 0\n' > "$TMPDIR/env.sh"`,
			check: `bash -c 'grep -qx 42 answer.txt'`,
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checks := "- name: honest\n  shell: " + quoteYAML(tc.check) + "\n"
			if tc.before != "" {
				checks = "- name: builds\n  shell: " + quoteYAML(tc.before) + "\n" + checks
			}
			files := map[string]string{
				"fixture.yaml": "prompt: write the answer into answer.txt\nlimits:\n  probeSeconds: 60\nchecks:\n" + checks,
			}
			for k, v := range tc.files {
				files[k] = v
			}
			run := &harnessv1.HarnessRun{
				ObjectMeta: metav1.ObjectMeta{Name: "forge-" + string(rune('a'+i)), Namespace: ns},
				Spec: harnessv1.HarnessRunSpec{
					Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", tc.agent + "\nexit 0"}},
					Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: files}},
				},
			}
			if err := k8s.Create(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			got := waitTerminal(t, client.ObjectKeyFromObject(run))
			if got.Status.Agent == nil || got.Status.Agent.ExitCode == nil || *got.Status.Agent.ExitCode != 0 {
				t.Fatalf("the forging agent did not run to its end: %+v; %s", got.Status.Agent, got.Status.Message)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, harnessv1.ConditionChecksPassed)
			if tc.before != "" && (len(got.Status.Checks) != 2 || !got.Status.Checks[0].Passed) {
				t.Errorf("the check before the honest one did not run and pass: %+v", got.Status.Checks)
			}
			if got.Status.Verdict != harnessv1.VerdictFail || c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("the forgery turned a failing check into verdict %s (%s: %s); checks %+v; agent output:\n%s",
					got.Status.Verdict, got.Status.Reason, got.Status.Message, got.Status.Checks, tailOf(got.Status))
			}
		})
	}
	waitNoRunDirs(t)
}

// quoteYAML writes s as a YAML double-quoted scalar.
func quoteYAML(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// A credential file's refresh token printed on its own (as
// `jq -r .tokens.refresh_token auth.json` does) reaches neither the output
// tail, status, Events nor the evidence.
func TestCredentialFileFieldsAreRedactedEverywhere(t *testing.T) {
	ns := newNamespace(t, "e2e-redact-fields")
	const refresh = "rt-codexRefresh-Hq7Zp2Lm9Xw4"
	authJSON := `{"OPENAI_API_KEY":null,"tokens":{"id_token":"idt-Jq3Vb8Nc1Rt5","access_token":"at-Kd8Wm3Pz6Yq1","refresh_token":"` + refresh + `","account_id":"acct-51f0e2"},"last_refresh":"2026-11-30T10:00:00Z"}`
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "codex", Namespace: ns},
		Data: map[string][]byte{"auth.json": []byte(authJSON)}}); err != nil {
		t.Fatal(err)
	}
	script := `set -eu
printf '%s' "$AUTH_JSON" > auth.json
echo "refresh: $(jq -r .tokens.refresh_token auth.json)"
jq -r .tokens.refresh_token auth.json > token.txt
jq -r .tokens.refresh_token auth.json >&2
exit 4`
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "fields", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", script},
				Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "codex", Key: "auth.json"}, Env: "AUTH_JSON"}}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: print the refresh token\nartifacts: [token.txt]\n"}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Agent == nil || got.Status.Agent.ExitCode == nil || *got.Status.Agent.ExitCode != 4 {
		t.Fatalf("the agent did not run as scripted: %+v %s", got.Status.Agent, got.Status.Message)
	}
	if !strings.Contains(got.Status.Agent.OutputTail, "refresh: [REDACTED") {
		t.Errorf("the output tail does not show the redacted refresh token:\n%s", got.Status.Agent.OutputTail)
	}
	var haystacks []string
	statusYAML, _ := yamlOf(got.Status)
	haystacks = append(haystacks, statusYAML)
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, got)}
	for _, e := range events.Items {
		haystacks = append(haystacks, e.Note)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	for _, v := range cm.Data {
		haystacks = append(haystacks, v)
	}
	for _, v := range cm.BinaryData {
		haystacks = append(haystacks, string(v))
	}
	for _, h := range haystacks {
		for _, f := range []string{refresh, "at-Kd8Wm3Pz6Yq1", "Hq7Zp2Lm9Xw4"} {
			if strings.Contains(h, f) {
				t.Errorf("a field of the credential file (%q) reached status, an Event or the evidence:\n%s", f, h)
			}
		}
	}
	waitNoRunDirs(t)
}
