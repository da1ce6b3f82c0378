package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps is `go list -deps` of pkg: every package it links, pkg last. Tests
// that keep a binary from linking something (the CRD validator in the
// node-agent daemon, Go's plugin package anywhere) read it.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps %s printed %d packages: not a dependency list", pkg, len(deps))
	}
	return deps
}

// Forbid fails t for each package pkg links that forbidden names: a
// package, or a folder of them (a trailing "/" is optional: "k8s.io/apiserver"
// covers every package below it). It returns pkg's dependencies.
func Forbid(t testing.TB, pkg string, forbidden []string) []string {
	t.Helper()
	deps := Deps(t, pkg)
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
	return deps
}
