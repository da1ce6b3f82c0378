package executor

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/syncbuf"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// TestLiveViewIsTheLogOnce: with a live view, the agent's two streams
// written at once while the live view passes on held lines (every
// livePeriod) come out of the one redactor as the log: the live view shows
// exactly the log's text, each byte once, with the run's credential and a
// token gitleaks knows redacted in both, and its first lines shown before
// the output is closed (the log holds them back until then).
func TestLiveViewIsTheLogOnce(t *testing.T) {
	const credential = "sk-test-credential-0123456789abcdef"
	const ghToken = "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"
	red, err := redact.New(redact.Options{Secrets: []string{credential}})
	if err != nil {
		t.Fatal(err)
	}
	out := newOutput(red, "", 8<<20)
	live := &syncbuf.Buffer{}
	out.startLive(live)
	var wg sync.WaitGroup
	for _, stream := range []string{"out", "err"} {
		wg.Add(1)
		w := out.writer()
		go func() {
			defer wg.Done()
			for i := range 30 {
				fmt.Fprintf(w, "%s line %d uses %s and %s\n", stream, i, credential, ghToken)
				time.Sleep(15 * time.Millisecond)
			}
		}()
	}
	// The lines are fewer than the redactor holds back (8 KiB): before
	// the output is closed, only the live view's flushes can show them.
	var early string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if early = live.String(); strings.Contains(early, " line 0 ") {
			break
		}
	}
	wg.Wait()
	out.close()

	log := string(out.capture.Bytes())
	got := live.String()
	if got != log {
		t.Fatalf("the live view differs from the log:\nlive %q\nlog  %q", got, log)
	}
	if n := strings.Count(log, "\n"); n != 60 {
		t.Fatalf("the log has %d lines, want 60", n)
	}
	if strings.Contains(log, credential) || strings.Contains(log, ghToken) {
		t.Fatalf("a secret was left: %q", log)
	}
	if strings.Count(log, "[REDACTED:github-pat]") != 60 {
		t.Errorf("the token was not redacted on every line: %q", log)
	}
	if !strings.Contains(early, " line 0 uses [REDACTED] and ") {
		t.Errorf("before the output was closed the live view showed %q: the first lines were not passed on", early)
	}
}
