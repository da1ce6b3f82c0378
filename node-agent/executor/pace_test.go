package executor

import (
	"testing"
	"time"
)

func TestPaceSpend(t *testing.T) {
	p := &pace{share: 0.1, burst: time.Second, credit: time.Second, last: time.Now()}
	if w := p.spend(900 * time.Millisecond); w != 0 {
		t.Fatalf("within the burst: wait %v", w)
	}
	// 200 ms more is 100 ms over: at a tenth of a core, a second's wait.
	if w := p.spend(200 * time.Millisecond); w < 990*time.Millisecond || w > time.Second {
		t.Fatalf("past the burst: wait %v, want about 1s", w)
	}
	if p.slowed() < 990*time.Millisecond {
		t.Fatalf("slowed %v", p.slowed())
	}
	// A write far over the credit waits at most maxPaceWait; the debt
	// stays for the next.
	p = &pace{share: 0.1, burst: time.Second, credit: 0, last: time.Now()}
	if w := p.spend(time.Second); w != maxPaceWait {
		t.Fatalf("a debt of 10 s: one wait of %v, want %v", w, maxPaceWait)
	}
	if w := p.spend(0); w != maxPaceWait {
		t.Fatalf("the debt was forgotten: the next write waits %v", w)
	}
	var none *pace
	if none.slowed() != 0 {
		t.Fatal("a nil pace slowed")
	}
}
