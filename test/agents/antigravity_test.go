package agents

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
)

// The Antigravity CLI (agy) is not published where this project installs
// from, so the real one is never exercised (README says so). A stand-in
// takes its place: it answers --version, and otherwise stays alive long
// enough for the process sampler to read its argv and environment.
const standInScript = `#!/bin/sh
if [ "$1" = "--version" ]; then echo "agy 0.0.0-standin"; exit 0; fi
printf 'hello, harness\n' > greeting.txt
sleep 1
`

// writeAntigravityStandIn writes the stand-in agy into dir/standin/bin.
func writeAntigravityStandIn(dir string) (string, error) {
	bin := filepath.Join(dir, "standin", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	return bin, os.WriteFile(filepath.Join(bin, "agy"), []byte(standInScript), 0o755)
}

// TestAntigravityStandIn: the adapter starts agy with the documented flag,
// with the prompt, and with nothing in its environment beyond the run's
// base variables and the credential the run selected.
func TestAntigravityStandIn(t *testing.T) {
	const key = "AIza-planted-antigravity-3f9c1e"
	o := Run(t, Case{Name: "antigravity", Adapter: harnessv1.AdapterAntigravity, Fixture: "hello",
		Creds: []Cred{{Env: "GEMINI_API_KEY", Value: key}}})

	var argv, environ []string
	for _, p := range o.Processes {
		cmdline, env, _ := strings.Cut(p, ProcSep)
		args := strings.Split(strings.TrimRight(cmdline, "\x00"), "\x00")
		// sandbox-init's own argv also names agy (it starts it), and its
		// environ is what it was started with, config and all; what
		// reaches the agent is the environment of the stand-in itself.
		if slices.Contains(args, "sandbox-init") {
			continue
		}
		// sh runs the stand-in as `sh /…/standin/bin/agy ARGS`.
		for i, a := range args {
			// A sample taken while the process was being set up has no
			// environment yet: keep the one that has.
			if strings.HasSuffix(a, "/standin/bin/agy") && i+1 < len(args) && args[i+1] != "--version" && env != "" {
				argv, environ = args[i+1:], strings.Split(strings.TrimRight(env, "\x00"), "\x00")
			}
		}
	}
	if argv == nil {
		t.Fatalf("the stand-in agy never ran; status %+v", o.Run.Status)
	}
	if !slices.Contains(argv, "--dangerously-skip-permissions") {
		t.Errorf("argv %q lacks --dangerously-skip-permissions", argv)
	}
	if i := slices.Index(argv, "-p"); i < 0 || i+1 >= len(argv) || !strings.Contains(argv[i+1], "hello, harness") {
		t.Errorf("argv %q: want -p with the fixture's prompt", argv)
	}
	// The whole environment, by name: the sandbox's base variables, the
	// egress proxy's, the provider URL and the one selected credential
	// (and PWD, which the stand-in's own shell sets).
	allowed := map[string]bool{"PWD": true, "PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "LANG": true, "TERM": true,
		"TMPDIR": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true, "XDG_STATE_HOME": true, "XDG_CACHE_HOME": true,
		"HARNESSFACTS_RUN": true, "HTTPS_PROXY": true, "https_proxy": true, "HTTP_PROXY": true, "http_proxy": true,
		"NO_PROXY": true, "no_proxy": true, "GOOGLE_GEMINI_BASE_URL": true, "GEMINI_API_KEY": true}
	var names []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		names = append(names, k)
		if !allowed[k] {
			t.Errorf("%s reached the agent; only the allow-list and the selected credential may", k)
		}
		if k == "GEMINI_API_KEY" && v != key {
			t.Errorf("GEMINI_API_KEY is not the selected credential")
		}
	}
	if !slices.Contains(names, "GEMINI_API_KEY") || !slices.Contains(names, "GOOGLE_GEMINI_BASE_URL") {
		t.Errorf("environment %v: want the selected GEMINI_API_KEY and the provider URL", names)
	}
	RequireClean(t, o, key)
	// agy reports no usage and writes no event stream to read a
	// trajectory from (and the stand-in asks no model).
	requireNoUsage(t, o)
	requireNoTrajectory(t, o)

	// Status says plainly that the real CLI was not exercised, and why the
	// run did not pass (the stand-in never calls get_token).
	st := o.Run.Status
	if st.Agent == nil || st.Agent.CLIVersion != "0.0.0-standin" || !slices.Contains(st.Agent.Notes, adapters.AntigravityNote) {
		t.Errorf("agent status %+v: want the stand-in's version and the note that the real CLI was not exercised", st.Agent)
	}
	if !slices.ContainsFunc(o.Events, func(e string) bool { return strings.HasPrefix(e, harnessv1.ReasonAdapterNote+": ") }) {
		t.Errorf("events %v: want an AdapterNote warning", o.Events)
	}
	if st.Verdict == harnessv1.VerdictPass {
		t.Errorf("a stand-in that never called get_token passed: %+v", st)
	}
}
