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
