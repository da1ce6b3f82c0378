package sandbox

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A process that crashes dumps core through the node's kernel.core_pattern,
// which is global: a pipe there (systemd-coredump, apport, a cloud's crash
// collector) starts a helper as root in the node's own namespaces, outside
// the run's cgroup, which keeps the core on the node's disk. An agent
// could raise its own core limit to the hard limit it inherited and crash
// as often as it likes. The sandbox's hard core limit is 0: no core, under
// any core_pattern. (This host's pattern, "core", writes into the cwd, so
// a file there shows that a dump happened.)
func TestBwrapCrashDumpsNoCore(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "/bin/sh", "-c",
		`echo "hard $(ulimit -H -c)"; ulimit -c unlimited 2>/dev/null; echo "soft $(ulimit -c)"; grep "core file" /proc/self/limits; sh -c 'kill -SEGV $$'; echo crashed`)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "crashed") {
		t.Fatalf("the command did not run to its end: %+v %q", res, out)
	}
	if !strings.Contains(out, "hard 0\n") || !strings.Contains(out, "soft 0\n") {
		t.Errorf("the sandbox's core limits are not 0 blocks: %q", out)
	}
	// 1 byte, not 0: a pipe in kernel.core_pattern (systemd-coredump,
	// apport) is started for a crash under a limit of 0, as root on the
	// node; under 1 it is not (core(5)). The node's core_pattern is not
	// changed here (it is every process's), so the limit itself is read.
	if !regexp.MustCompile(`Max core file size\s+1\s+1\s+bytes`).MatchString(out) {
		t.Errorf("the sandbox's core limit is not 1 byte, soft and hard: %q", out)
	}
	entries, _ := os.ReadDir(spec.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "core") {
			fi, _ := os.Stat(filepath.Join(spec.Dir, e.Name()))
			t.Errorf("a crash in the sandbox dumped core: %s (%d bytes)", e.Name(), fi.Size())
		}
	}
}
