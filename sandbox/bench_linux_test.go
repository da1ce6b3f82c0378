package sandbox

import (
	"context"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
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

// BenchmarkSandboxStartCost runs `true` under bwrap without the seccomp
// filter and with it, alternately in the same run, and reports each median
// and what the filter adds:
//
//	go test -run '^$' -bench SandboxStartCost -benchtime 100x ./sandbox/
func BenchmarkSandboxStartCost(b *testing.B) {
	r := requireBwrapHost(b)
	bare := *r
	bare.noSeccomp = true
	spec := runDir(b, testBase(b), "true")
	var without, with []time.Duration
	for b.Loop() {
		for _, c := range []struct {
			r *BwrapRunner
			d *[]time.Duration
		}{{&bare, &without}, {r, &with}} {
			start := time.Now()
			res, err := c.r.Run(context.Background(), spec)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("bwrap true: %+v, %v", res, err)
			}
			*c.d = append(*c.d, time.Since(start))
		}
	}
	m0, ms := median(without), median(with)
	b.ReportMetric(m0.Seconds()*1e3, "bwrap-ms")
	b.ReportMetric(ms.Seconds()*1e3, "seccomp-ms")
	b.ReportMetric((ms-m0).Seconds()*1e3, "seccomp-added-ms")
}
