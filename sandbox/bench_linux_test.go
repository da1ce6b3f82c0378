package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/machinecpu"
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
	raw := append([]string{"--ro-bind", "/", "/"}, bwrapArgs(spec, false)...)
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
			dir, err := fix.MaterializeLimited(root, v.disk)
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
// side in one run. Start is from the runner's Run (for the sandbox: from
// making the run dir's file system) to the payload's first instruction,
// seen as the first byte of its output (`echo x`); each iteration runs
//
//   - bare: bwrap itself, as the run's unprivileged uid, with exactly the
//     runner's namespaces, mounts and seccomp filter on its command line;
//   - sandbox: the runner as a run gets it: a run dir on its own
//     size-limited tmpfs (the disk limit's file system; the fixture is one
//     small file), the next uid of the slot pool, the per-run cgroup (on
//     cgroup v1 bwrap is forked by the runner's forker thread inside it),
//     its own /dev, the seccomp filter;
//   - plain: a fork/exec of the same payload, for scale.
//
// It reports each start's median and sandbox/bare, the goal being at most
// 1.25, and the whole of each (to the end of Run and the run dir removed)
// as *-whole-ms. Then the CPU each costs the machine, which a node whose
// cores are busy pays in runs: b.N of each in a row, the busy time of all
// cores (/proc/stat, the kernel's threads included) per start, and
// sandbox/bare of it:
//
//	go test -run '^$' -bench SandboxStart -benchtime 100x ./sandbox/
func BenchmarkSandboxStart(b *testing.B) {
	r := requireBwrapHost(b)
	echo, err := exec.LookPath("echo")
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
	type samples struct{ start, whole []time.Duration }
	var plain, sandboxed, bare samples
	sandbox := func(into *samples) {
		id, release, err := pool.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		out := &firstByte{}
		start := time.Now()
		dir, err := fix.MaterializeLimited(root, 64<<20)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.Chmod(dir.Path, 0o711); err != nil {
			b.Fatal(err)
		}
		res, err := r.Run(context.Background(), Spec{Argv: []string{"echo", "x"}, Dir: dir.Workspace(), ReadWrite: []string{dir.Workspace()},
			Env: env, UID: id, GID: id, Stdout: out, Limits: Limits{Timeout: time.Minute}})
		if err != nil || res.ExitCode != 0 || res.Seccomp == "" || out.at.IsZero() {
			b.Fatalf("sandbox echo: %+v, %v", res, err)
		}
		if err := dir.Remove(); err != nil {
			b.Fatal(err)
		}
		into.whole = append(into.whole, time.Since(start))
		into.start = append(into.start, out.at.Sub(start))
	}
	command := func(cmd *exec.Cmd, into *samples) {
		out := &firstByte{}
		cmd.Stdout = out
		start := time.Now()
		if err := cmd.Run(); err != nil || out.at.IsZero() {
			b.Fatalf("%s: %v", cmd.Path, err)
		}
		into.whole = append(into.whole, time.Since(start))
		into.start = append(into.start, out.at.Sub(start))
	}
	bareBwrap := func(into *samples) {
		id, release, err := pool.Acquire()
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		spec := Spec{Dir: bareDir, ReadWrite: []string{bareDir}, Env: env}
		sf, _, err := seccompFile()
		if err != nil {
			b.Fatal(err)
		}
		defer sf.Close()
		cmd := exec.Command(r.bwrap, append(bwrapArgs(spec, true), "--", echo, "x")...)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{nil, sf} // the filter on fd 4, as bwrapArgs says
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(id, id)}
		command(cmd, into)
	}
	for b.Loop() {
		command(exec.Command(echo, "x"), &plain)
		sandbox(&sandboxed)
		bareBwrap(&bare)
	}
	ms, mb := median(sandboxed.start), median(bare.start)
	b.ReportMetric(ms.Seconds()*1e3, "sandbox-ms")
	b.ReportMetric(mb.Seconds()*1e3, "bare-bwrap-ms")
	b.ReportMetric(median(plain.start).Seconds()*1e3, "plain-ms")
	b.ReportMetric(float64(ms)/float64(mb), "sandbox/bare(goal≤1.25)")
	b.ReportMetric(median(sandboxed.whole).Seconds()*1e3, "sandbox-whole-ms")
	b.ReportMetric(median(bare.whole).Seconds()*1e3, "bare-whole-ms")

	n := len(bare.start)
	cpu := func(f func(*samples)) time.Duration {
		var discard samples
		before, _ := machinecpu.Read()
		for range n {
			f(&discard)
		}
		after, _ := machinecpu.Read()
		return (after - before) / time.Duration(n)
	}
	cs, cb := cpu(sandbox), cpu(bareBwrap)
	b.ReportMetric(cs.Seconds()*1e3, "sandbox-cpu-ms")
	b.ReportMetric(cb.Seconds()*1e3, "bare-cpu-ms")
	b.ReportMetric(float64(cs)/float64(cb), "sandbox/bare-cpu")
	// Both starts grow with the caller's mount table, which bwrap's new
	// mount namespace copies and tears down again: recorded beside them
	// (docs/performance.md, "The caller's mounts").
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		b.ReportMetric(float64(bytes.Count(data, []byte("\n"))), "caller-mounts")
	}
}

// firstByte records when the first byte was written to it.
type firstByte struct {
	mu sync.Mutex
	at time.Time
}

func (f *firstByte) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return len(p), nil
}
