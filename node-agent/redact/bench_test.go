package redact

import (
	"errors"
	"io"
	"os"
	"strconv"
	"testing"
	"time"
)

// benchBytes is the stream length of BenchmarkStream:
// HARNESSFACTS_BENCH_BYTES (for example 1073741824), else 256 MiB.
func benchBytes(b *testing.B) int64 {
	if s := os.Getenv("HARNESSFACTS_BENCH_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("HARNESSFACTS_BENCH_BYTES=%q: want a positive byte count", s)
		}
		return n
	}
	return 256 << 20
}

// source repeats a block of agent-like text up to n bytes, written in
// 32 KiB reads like a pipe from the agent.
type source struct {
	block []byte
	off   int
	left  int64
}

func (s *source) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), 32<<10, int(min(s.left, 1<<30)))]
	n := copy(p, s.block[s.off:])
	s.off = (s.off + n) % len(s.block)
	s.left -= int64(n)
	return n, nil
}

// WriteTo keeps io.Copy from using io.Discard's ReaderFrom with a different
// buffer size: both sides read the same 32 KiB chunks.
func (s *source) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := s.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
	}
}

// BenchmarkStream compares redaction throughput with a plain copy of the
// same stream to io.Discard. Compare the MB/s of the sub-benchmarks.
func BenchmarkStream(b *testing.B) {
	size := benchBytes(b)
	block := []byte(corpus(4 << 20))
	secrets := []string{"sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678", "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"}
	run := func(b *testing.B, dst func() io.WriteCloser) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			w := dst()
			if _, err := io.Copy(w, &source{block: block, left: size}); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("copy", func(b *testing.B) {
		run(b, func() io.WriteCloser { return nopCloser{io.Discard} })
	})
	b.Run("pipe-copy", func(b *testing.B) {
		// What capturing an agent's output costs without redaction: the
		// stream goes through an OS pipe, like `cat > /dev/null`.
		b.SetBytes(size)
		for b.Loop() {
			pr, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				_, _ = io.Copy(pw, &source{block: block, left: size})
				pw.Close()
			}()
			if _, err := io.Copy(io.Discard, pr); err != nil {
				b.Fatal(err)
			}
			pr.Close()
		}
	})
	b.Run("secrets", func(b *testing.B) {
		r := newRedactor(b, Options{Secrets: secrets, NoRules: true})
		run(b, func() io.WriteCloser { return r.NewWriter(io.Discard) })
	})
	b.Run("secrets+gitleaks", func(b *testing.B) {
		r := newRedactor(b, Options{Secrets: secrets})
		run(b, func() io.WriteCloser { return r.NewWriter(io.Discard) })
	})
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// BenchmarkKeywordScan measures the keyword automaton's lanes on one core
// against one automaton stepping through the same bytes (the baseline, in
// the same run): the scan is most of the output pipeline's CPU.
//
//	GOMAXPROCS=1 go test -run '^$' -bench KeywordScan ./node-agent/redact/
func BenchmarkKeywordScan(b *testing.B) {
	rs, err := defaultRules()
	if err != nil {
		b.Fatal(err)
	}
	buf := []byte(corpus(1 << 20))
	var lane kwLanes
	var out []kwHit
	var oneD, lanesD time.Duration
	for b.Loop() {
		start := time.Now()
		one := rs.kw.scan(buf, 0, 0, len(buf), out[:0])
		oneD += time.Since(start)
		start = time.Now()
		out = rs.kw.hitsIn(buf, 0, len(buf), out[:0], &lane)
		lanesD += time.Since(start)
		if len(one) != len(out) {
			b.Fatalf("lanes found %d keyword ends, one automaton %d", len(out), len(one))
		}
	}
	mbs := func(d time.Duration) float64 { return float64(b.N) * float64(len(buf)) / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(oneD), "one-MB/s")
	b.ReportMetric(mbs(lanesD), "lanes-MB/s")
	b.ReportMetric(float64(oneD)/float64(lanesD), "lanes/one-automaton")
}
