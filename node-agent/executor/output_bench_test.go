package executor

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// benchBytes is the stream length: HARNESSFACTS_BENCH_BYTES, default 64 MiB
// (set it to 1073741824 for the 1 GiB).
func benchBytes() int64 {
	if v, err := strconv.ParseInt(os.Getenv("HARNESSFACTS_BENCH_BYTES"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 64 << 20
}

// agentLike is output that looks like an agent's: JSON lines with paths,
// code and the odd token-shaped word, in 32 KiB writes.
func agentLike() []byte {
	line := []byte(`{"type":"tool_use","name":"Bash","input":{"command":"go test ./... && grep -rn TODO src/"},"id":"toolu_01AbCdEf"}` + "\n")
	return bytes.Repeat(line, 32<<10/len(line))
}

// BenchmarkOutputPipeline compares the agent's output path (token watcher →
// redactor with gitleaks' rules and a credential → bounded capture) with
// piping the same bytes into `cat > /dev/null`, in one run. MB/s is the figure to compare; the
// heap reported after the stream shows the pipeline's memory stays bounded.
func BenchmarkOutputPipeline(b *testing.B) {
	chunk := agentLike()
	total := benchBytes()
	run := func(b *testing.B, w io.Writer, done func()) {
		b.SetBytes(total)
		for range b.N {
			for n := int64(0); n < total; n += int64(len(chunk)) {
				_, _ = w.Write(chunk)
			}
		}
		if done != nil {
			done()
		}
	}
	// The baseline is what the issue names: the bytes piped into
	// `cat > /dev/null`, a process that does nothing with them.
	b.Run("cat-to-devnull", func(b *testing.B) {
		cmd := exec.Command("cat")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		run(b, stdin, func() { _ = stdin.Close(); _ = cmd.Wait() })
	})
	b.Run("watch+redact+capture", func(b *testing.B) {
		red, err := redact.New(redact.Options{Secrets: []string{"sk-benchmark-credential-0123456789"}, Keep: []string{"hft_token"}})
		if err != nil {
			b.Fatal(err)
		}
		out := newOutput(red, "hft_token", 8<<20)
		run(b, out.writer(), out.close)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	})
}
