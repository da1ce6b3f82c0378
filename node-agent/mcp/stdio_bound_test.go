package mcp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// An agent's stdio message is decoded in the node-agent's memory: one over
// MaxMessageBytes ends the session instead of being read whole.
func TestStdioRefusesAMessageOverTheBound(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(context.Background(), inR, outW, "hft_x", NewReceipts(v1alpha1.MCPTransportStdio, 0), nil)
		_ = outW.Close()
	}()
	answers := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(outR)
		answers <- string(b)
	}()
	// A well-formed request, just too large: 2 MiB of params.
	big := `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2*MaxMessageBytes) + `"}}` + "\n"
	go func() {
		_, _ = io.WriteString(inW, big)
		_ = inW.Close()
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ServeStdio ended without an error after a message over the bound")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio still serves after a message over the bound")
	}
	_ = inR.Close()
	if got := <-answers; strings.Contains(got, `"id":7`) {
		t.Errorf("the oversized message was answered: %.200s", got)
	}
}

// The SDK answers each call on a goroutine of its own: an agent that sends
// calls and never reads the answers must not make the node-agent hold a
// goroutine (and a request) for every call it sends. The session stops
// reading at MaxCallsInFlight and answers them all once the agent reads.
func TestStdioCallsInFlightAreBounded(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(ctx, inR, outW, "hft_x", NewReceipts(v1alpha1.MCPTransportStdio, 0), nil)
		_ = outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	}()
	if !sc.Scan() || !strings.Contains(sc.Text(), `"id":0`) {
		t.Fatalf("initialize: %q %v", sc.Text(), sc.Err())
	}
	base := runtime.NumGoroutine()
	const calls = 3000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 1; i <= calls; i++ {
			if _, err := fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i); err != nil {
				return
			}
		}
	}()
	// Nobody reads the answers yet.
	most := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		most = max(most, runtime.NumGoroutine()-base)
	}
	if most > MaxCallsInFlight+32 {
		t.Errorf("%d goroutines more while %d calls waited for an agent that does not read, want at most about %d", most, calls, MaxCallsInFlight)
	}
	// The agent reads now: every call is answered.
	answered := 0
	for answered < calls && sc.Scan() {
		answered++
	}
	<-sent
	_ = inW.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeStdio: %v", err)
	}
	_ = outR.Close()
	if answered != calls {
		t.Errorf("%d answers, want %d", answered, calls)
	}
}

// Notifications wait in the SDK's queue while an answer is being written:
// an agent that never reads its initialize answer and sends notifications
// must find the session no longer reading, not fill the node-agent's
// memory.
func TestStdioNotificationsWhileAnAnswerWaitsAreBounded(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(ctx, inR, outW, "hft_x", NewReceipts(v1alpha1.MCPTransportStdio, 0), nil)
		_ = outW.Close()
	}()
	var sent atomic.Int64
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		for i := 0; i < 100000; i++ {
			if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/x"}`+"\n"); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	time.Sleep(2 * time.Second)
	if n := sent.Load(); n > 4*MaxReadWhileWriting {
		t.Errorf("%d notifications read while the initialize answer waited, want at most about %d", n, MaxReadWhileWriting)
	}
	// The agent reads now: the session answers and reads on.
	sc := bufio.NewScanner(outR)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"id":0`) {
		t.Errorf("initialize: %q %v", sc.Text(), sc.Err())
	}
	for deadline := time.Now().Add(10 * time.Second); sent.Load() <= 4*MaxReadWhileWriting && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := sent.Load(); n <= 4*MaxReadWhileWriting {
		t.Errorf("the session did not read on once its answer was read (%d notifications)", n)
	}
	_ = inR.Close()
	_ = inW.Close()
	cancel()
	<-done
	_ = outR.Close()
}

// stdioSession is one session of ServeStdio, initialized, with the
// agent's ends of its pipes.
type stdioSession struct {
	in   *io.PipeWriter
	out  *io.PipeReader
	sc   *bufio.Scanner
	done chan error
}

func startStdioSession(ctx context.Context, t *testing.T, calls Calls) *stdioSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &stdioSession{in: inW, out: outR, sc: bufio.NewScanner(outR), done: make(chan error, 1)}
	go func() {
		s.done <- ServeStdio(ctx, inR, outW, "hft_x", NewReceipts(v1alpha1.MCPTransportStdio, 0), calls)
		_ = outW.Close()
		_ = inR.Close()
	}()
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	}()
	if !s.sc.Scan() || !strings.Contains(s.sc.Text(), `"id":0`) {
		t.Fatalf("initialize: %q %v", s.sc.Text(), s.sc.Err())
	}
	return s
}

// A run's calls in flight are bounded over all its sessions, not each:
// eight sessions that send calls and never read the answers hold
// MaxCallsInFlight calls of the run's, not eight times that. Sessions that
// wait idle hold none; the run's other session is answered once the
// hostile ones end.
func TestStdioCallsInFlightAreBoundedPerRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := NewCalls()
	// Idle sessions first: an honest session is answered beside them.
	for range 2 * MaxCallsInFlight {
		startStdioSession(ctx, t, calls)
	}
	honest := startStdioSession(ctx, t, calls)
	answer := func(id int) chan string {
		got := make(chan string, 1)
		go func() {
			_, _ = fmt.Fprintf(honest.in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_token","arguments":{}}}`+"\n", id)
			if honest.sc.Scan() {
				got <- honest.sc.Text()
			}
		}()
		return got
	}
	select {
	case a := <-answer(1):
		if !strings.Contains(a, "hft_x") {
			t.Fatalf("get_token beside idle sessions: %s", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a call was not answered beside %d idle sessions of its run", 2*MaxCallsInFlight)
	}

	base := runtime.NumGoroutine()
	var hostile []*stdioSession
	for range 8 {
		hostile = append(hostile, startStdioSession(ctx, t, calls))
	}
	for _, s := range hostile {
		go func() {
			for i := 1; i <= 500; i++ {
				if _, err := fmt.Fprintf(s.in, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i); err != nil {
					return
				}
			}
		}()
	}
	most := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		most = max(most, runtime.NumGoroutine()-base)
	}
	// Each session has a few goroutines of its own (the SDK's loops, the
	// flood's writer) and each call in flight one, with its answer's
	// write: 43 here, and 71 with the bound per session.
	if limit := 8*5 + 2*MaxCallsInFlight + 8; most > limit {
		t.Errorf("%d goroutines more with 8 sessions flooding the run with calls, want at most %d", most, limit)
	}
	pending := answer(2)
	select {
	case a := <-pending:
		t.Fatalf("the run's ninth session was answered while eight held %d calls unread: %s", MaxCallsInFlight, a)
	case <-time.After(500 * time.Millisecond):
	}
	if n := len(calls); n != MaxCallsInFlight {
		t.Errorf("%d of the run's slots held by eight sessions flooding it, want all %d", n, MaxCallsInFlight)
	}
	for _, s := range hostile {
		_ = s.in.Close()
		_ = s.out.Close()
	}
	select {
	case a := <-pending:
		if !strings.Contains(a, "hft_x") {
			t.Errorf("get_token once the hostile sessions ended: %s", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run's other session was never answered once the hostile sessions ended: their slots were lost")
	}
	for _, s := range hostile {
		<-s.done
	}
}
