package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// BenchmarkBwrapOverhead runs `true` alternately as a plain fork/exec and
// under bwrap with every production flag and a per-run cgroup, and reports
// both medians and the difference:
//
//	go test -run '^$' -bench BwrapOverhead -benchtime 200x ./sandbox/
func BenchmarkBwrapOverhead(b *testing.B) {
	r := requireBwrapHost(b)
	spec := runDir(b, testBase(b), "true")
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	// The same bwrap invocation without the cgroup, to tell bwrap's own cost
	// from the runner's.
	raw := append([]string{"--ro-bind", "/", "/"}, bwrapArgs(spec, false, false)...)
	raw = append(raw, "--", truePath)
	var plain, sandboxed, bare []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		plain = append(plain, time.Since(start))

		start = time.Now()
		res, err := r.Run(context.Background(), spec)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("bwrap true: %+v, %v", res, err)
		}
		sandboxed = append(sandboxed, time.Since(start))

		cmd := exec.Command(r.bwrap, raw...)
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
		start = time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bare bwrap: %v %s", err, out)
		}
		bare = append(bare, time.Since(start))
	}
	mp, ms := median(plain), median(sandboxed)
	b.ReportMetric(ms.Seconds()*1e3, "bwrap-ms")
	b.ReportMetric(mp.Seconds()*1e3, "plain-ms")
	b.ReportMetric((ms-mp).Seconds()*1e3, "added-ms")
	b.ReportMetric(median(bare).Seconds()*1e3, "bare-bwrap-ms")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkSandboxStartCost measures what the seccomp filter and the disk
// limit add to the start of a run, alternately in the same run: each
// iteration makes a run dir from a small fixture (plain, or on its own
// size-limited tmpfs), runs `true` in it under bwrap (without or with the
// filter) and removes the run dir (unmounting the tmpfs). It reports the
// median of each of the four and what each addition costs:
//
//	go test -run '^$' -bench SandboxStartCost -benchtime 100x ./sandbox/
func BenchmarkSandboxStartCost(b *testing.B) {
	r := requireBwrapHost(b)
	bare := *r
	bare.noSeccomp = true
	fix, err := fixture.FromInline(map[string]string{
		"fixture.yaml":      "prompt: p\n",
		"workspace/main.go": "package main\n",
		"workspace/README":  "hello\n",
	}, fixture.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	root := testBase(b)
	type variant struct {
		name    string
		r       *BwrapRunner
		disk    int64
		samples []time.Duration
	}
	vs := []*variant{
		{name: "bwrap", r: &bare},
		{name: "seccomp", r: r},
		{name: "disk", r: &bare, disk: 64 << 20},
		{name: "both", r: r, disk: 64 << 20},
	}
	for b.Loop() {
		for _, v := range vs {
			start := time.Now()
			dir, err := fix.MaterializeLimited(root, "bench", 1, v.disk)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.Chmod(dir.Path, 0o711); err != nil {
				b.Fatal(err)
			}
			spec := Spec{Argv: []string{"true"}, Dir: dir.Workspace(), ReadWrite: []string{dir.Workspace()},
				Env: []string{"PATH=/usr/bin:/bin"}, Limits: Limits{Timeout: time.Minute}}
			res, err := v.r.Run(context.Background(), spec)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: %+v, %v", v.name, res, err)
			}
			if err := dir.Remove(); err != nil {
				b.Fatal(err)
			}
			v.samples = append(v.samples, time.Since(start))
		}
	}
	m := map[string]time.Duration{}
	for _, v := range vs {
		m[v.name] = median(v.samples)
		b.ReportMetric(m[v.name].Seconds()*1e3, v.name+"-ms")
	}
	b.ReportMetric((m["seccomp"]-m["bwrap"]).Seconds()*1e3, "seccomp-added-ms")
	b.ReportMetric((m["disk"]-m["bwrap"]).Seconds()*1e3, "disk-added-ms")
	b.ReportMetric((m["both"]-m["bwrap"]).Seconds()*1e3, "both-added-ms")
}

// BenchmarkSandboxStart is issue #18's sandbox start goal, measured side by
// side in one run: each iteration runs `true`
//
//   - bare: bwrap itself, as the run's unprivileged uid, with exactly the
//     runner's namespaces, mounts and seccomp filter on its command line;
//   - sandbox: the runner as a run gets it: a run dir on its own
//     size-limited tmpfs (the disk limit's file system; the fixture is one
//     small file), the next uid of the slot pool, the per-run cgroup, the
//     seccomp filter, then Run, and the run dir removed;
//   - plain: a fork/exec of `true`, for scale.
//
// It reports each median and sandbox/bare, the goal being at most 1.25:
//
//	go test -run '^$' -bench SandboxStart -benchtime 100x ./sandbox/
func BenchmarkSandboxStart(b *testing.B) {
	r := requireBwrapHost(b)
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	ids, err := ParseIDRange(DefaultIDRange)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := NewIDPool(ids)
	if err != nil {
		b.Fatal(err)
	}
	fix, err := fixture.FromInline(map[string]string{"fixture.yaml": "prompt: p\n"}, fixture.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	root := testBase(b)
	bareDir := filepath.Join(root, "bare")
	if err := os.Mkdir(bareDir, 0o777); err != nil {
		b.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin"}
	var plain, sandboxed, bare []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		plain = append(plain, time.Since(start))

		id, release, err := pool.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		dir, err := fix.MaterializeLimited(root, "bench", 1, 64<<20)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.Chmod(dir.Path, 0o711); err != nil {
			b.Fatal(err)
		}
		res, err := r.Run(context.Background(), Spec{Argv: []string{"true"}, Dir: dir.Workspace(), ReadWrite: []string{dir.Workspace()},
			Env: env, UID: id, GID: id, Limits: Limits{Timeout: time.Minute}})
		if err != nil || res.ExitCode != 0 || res.Seccomp == "" {
			b.Fatalf("sandbox true: %+v, %v", res, err)
		}
		if err := dir.Remove(); err != nil {
			b.Fatal(err)
		}
		sandboxed = append(sandboxed, time.Since(start))

		spec := Spec{Dir: bareDir, ReadWrite: []string{bareDir}, Env: env}
		sf, _, err := seccompFile()
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(r.bwrap, append(bwrapArgs(spec, false, true), "--", truePath)...)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{nil, sf} // the filter on fd 4, as bwrapArgs says
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(id, id)}
		start = time.Now()
		out, err := cmd.CombinedOutput()
		bare = append(bare, time.Since(start))
		sf.Close()
		release()
		if err != nil {
			b.Fatalf("bare bwrap: %v %s", err, out)
		}
	}
	ms, mb := median(sandboxed), median(bare)
	b.ReportMetric(ms.Seconds()*1e3, "sandbox-ms")
	b.ReportMetric(mb.Seconds()*1e3, "bare-bwrap-ms")
	b.ReportMetric(median(plain).Seconds()*1e3, "plain-ms")
	b.ReportMetric(float64(ms)/float64(mb), "sandbox/bare(goal≤1.25)")
}
