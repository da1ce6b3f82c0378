package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// preparedProcs is the cgroup.procs file of the cgroup p holds.
func preparedProcs(t *testing.T, p *Prepared) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch cg := p.parts.cg.(type) {
	case *v1Cgroup:
		return filepath.Join(cg.paths[cgroup1.Pids], "cgroup.procs")
	case *v2Cgroup:
		return filepath.Join(cg.dir, "cgroup.procs")
	}
	t.Fatalf("a cgroup of type %T", p.parts.cg)
	return ""
}

// devMounts are the mounts under dir.
func devMounts(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			ms = append(ms, f[4])
		}
	}
	return ms
}

// TestPreparedPartsAreTakenOrRemoved: a sandbox's cgroup made ahead
// (Prepare, with its network namespace, and no mount) is the one its Run
// starts bwrap in, and is gone with it; parts no Run took, or made for
// other limits, are removed by Close and never used.
func TestPreparedPartsAreTakenOrRemoved(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	devIn := filepath.Join(base, "devs")
	if err := os.Mkdir(devIn, 0o711); err != nil { // bwrap, as the run's uid, passes through
		t.Fatal(err)
	}
	spec := runDir(t, base, "sh", "-c", "echo ran")
	spec.DevIn = devIn
	spec.Limits.MemoryBytes = 256 << 20

	p, err := r.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	procs := preparedProcs(t, p)
	if got := devMounts(t, devIn); len(got) != 0 {
		t.Fatalf("Prepare mounted %v: a mount made while another sandbox's bwrap is in its setup can fail it", got)
	}
	var bornThere string
	spec.Prepared = p
	spec.Started = func() {
		data, _ := os.ReadFile(procs)
		bornThere = strings.TrimSpace(string(data))
	}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	if bornThere == "" {
		t.Fatalf("bwrap was not started in the cgroup made ahead (%s was empty)", procs)
	}
	if _, err := os.Stat(filepath.Dir(procs)); !os.IsNotExist(err) {
		t.Errorf("the cgroup made ahead outlived its run: %v", err)
	}
	if got := devMounts(t, devIn); len(got) != 0 {
		t.Errorf("the run's /dev outlived it: %v", got)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close after the run took the parts: %v", err)
	}

	// Made for other limits: the run makes its own, and Close removes
	// them.
	other := spec
	other.Started = nil
	other.Limits.MemoryBytes = 128 << 20
	q, err := r.Prepare(other)
	if err != nil {
		t.Fatal(err)
	}
	procs = preparedProcs(t, q)
	spec.Prepared, spec.Started = q, func() {
		if data, _ := os.ReadFile(procs); len(strings.TrimSpace(string(data))) != 0 {
			t.Errorf("bwrap was started in the cgroup made for other limits")
		}
	}
	// (Not run(): the parts made ahead are still there, as they should.)
	if res, err := r.Run(context.Background(), spec); err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v, %v", res, err)
	}
	if _, err := os.Stat(procs); err != nil {
		t.Fatalf("the parts made for other limits were taken or removed by the run: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(procs)); !os.IsNotExist(err) {
		t.Errorf("Close left the cgroup made ahead: %v", err)
	}
	assertNoRunCgroups(t)
}
