package runcmd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/localrun"
)

// exposedSources are the parts of a local run's sources that every user of
// the machine may read: its fixture's verifier part and reference solution,
// and its secrets folder, each as the first such file found (path: what).
// This run's sandbox hides them, but a concurrent local run's does not (its
// masks were fixed when it started), and its agent runs as an unprivileged
// uid of its own: to it they are as readable as to any other user.
func exposedSources(run *harnessv1.HarnessRun, sources localrun.Sources) map[string]string {
	out := map[string]string{}
	if dir := fixtureFolder(run, sources); dir != "" {
		if data, err := os.ReadFile(filepath.Join(dir, "fixture.yaml")); err == nil {
			if m, err := fixture.ParseManifest(data); err == nil {
				parts := map[string]string{m.VerifierDir(): "the fixture's verifier part"}
				if m.Solution != nil {
					parts[m.SolutionDir()] = "the fixture's reference solution"
				}
				for rel, what := range parts {
					if f := firstExposed(filepath.Join(dir, filepath.FromSlash(rel))); f != "" {
						out[f] = what
					}
				}
			}
		}
	}
	if sources.SecretsDir != "" {
		if f := firstExposed(sources.SecretsDir); f != "" {
			out[f] = "a key of the secrets folder"
		}
	}
	return out
}

// fixtureFolder is the host folder the run's fixture is read from, "" for
// an inline fixture.
func fixtureFolder(run *harnessv1.HarnessRun, sources localrun.Sources) string {
	ref := run.Spec.Fixture.ConfigMapRef
	switch {
	case ref == nil:
		return ""
	case sources.FixtureDir != "":
		return sources.FixtureDir
	case sources.FixturesDir != "":
		return filepath.Join(sources.FixturesDir, filepath.Base(ref.Name))
	}
	return ""
}

// maxExposedScan bounds the files firstExposed looks at.
const maxExposedScan = 10000

// firstExposed returns the first regular file at or below root that a user
// who is neither its owner nor in its group can read (read for others on
// it, search for others on every folder above it), or "".
func firstExposed(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil || !searchableByOthers(filepath.Dir(abs)) {
		return ""
	}
	found, seen := "", 0
	stop := errors.New("stop")
	_ = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if seen++; err != nil || seen > maxExposedScan {
			return stop
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return nil
		case fi.IsDir():
			if fi.Mode().Perm()&0o001 == 0 {
				return filepath.SkipDir
			}
		case fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0:
			found = p
			return stop
		}
		return nil
	})
	return found
}

// searchableByOthers says whether every folder from / to dir may be
// searched by others.
func searchableByOthers(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}
