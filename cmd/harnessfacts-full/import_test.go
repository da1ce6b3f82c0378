package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command says on stderr what the user must do and what was not
// applied, and writes a folder kubectl can apply.
func TestImportHarborSaysWhatItCouldNotMap(t *testing.T) {
	task := filepath.Join(t.TempDir(), "make-hello")
	for p, c := range map[string]string{
		"instruction.md":         "Write hello to /app/hello.txt.\n",
		"task.toml":              "version = \"1.0\"\n[environment]\ncpus = 4\ngpus = 1\nshiny_new_thing = true\n",
		"environment/Dockerfile": "FROM debian:trixie-slim\n",
		"tests/test.sh":          "#!/bin/sh\ntest \"$(cat /app/hello.txt)\" = hello\n",
		"solution/solve.sh":      "#!/bin/sh\necho hello > /app/hello.txt\n",
	} {
		if err := os.MkdirAll(filepath.Join(task, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(task, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"import", "harbor", task, "-o", out, "--oracle", "--agent", "codex:gpt-5", "--suite", "tb"})
	if err := root.Execute(); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"ACTION NEEDED: make-hello has no image pinned by digest. Build " + filepath.Join(task, "environment"),
		"--image make-hello=REGISTRY/REPO@sha256:DIGEST",
		"warning: make-hello: task.toml: environment.shiny_new_thing is not a field this importer knows",
		"warning: make-hello: environment.cpus = 4 is not applied",
		"accelerators",
		"1 of 1 tasks allow the internet",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "kubectl apply -k "+out) {
		t.Errorf("stdout: %s", stdout.String())
	}
	suite, err := os.ReadFile(filepath.Join(out, "suite.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: codex-gpt-5", "model: gpt-5", "adapter: oracle", "harnessfacts.io/fixture-set: tb"} {
		if !strings.Contains(string(suite), want) {
			t.Errorf("suite.yaml lacks %q:\n%s", want, suite)
		}
	}

	for _, bad := range [][]string{
		{"import", "harbor", task, "-o", out},                                 // no agent
		{"import", "harbor", task, "-o", out, "--agent", "exec"},              // exec needs a command
		{"import", "harbor", task, "-o", out, "--oracle", "--egress", "Open"}, // no such egress
		{"import", "harbor", task, "-o", out, "--oracle", "--image", "make-hello"},
		{"import", "harbor", task, "-o", out, "--oracle", "--suite", "Bad_Name"},
	} {
		root := newRootCommand()
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs(bad)
		if err := root.Execute(); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
