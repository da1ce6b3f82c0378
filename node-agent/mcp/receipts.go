package mcp

import (
	"sync"
	"time"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Outcomes of a call.
const (
	// OutcomeIssued: the token was returned.
	OutcomeIssued = "issued"
	// OutcomeRefusedLimit: the run's call limit (maxDecisions) was reached.
	OutcomeRefusedLimit = "refused: call limit reached"
)

// MaxKeptReceipts bounds the receipts kept in memory and in evidence; calls
// beyond it are counted, not kept.
const MaxKeptReceipts = 64

// Receipt records one tool call.
type Receipt struct {
	// Time is when the call was answered, in UTC.
	Time time.Time `json:"time"`
	// Transport is HTTP or Stdio.
	Transport v1alpha1.MCPTransport `json:"transport"`
	// Tool is the tool called (get_token).
	Tool string `json:"tool"`
	// Outcome is OutcomeIssued or OutcomeRefusedLimit.
	Outcome string `json:"outcome"`
}

// Recorder takes a call's receipt. Record decides whether the call may be
// answered: it returns false when the call limit is reached.
type Recorder interface {
	Record(r Receipt) (allowed bool)
}

// Summary is what a run's status and evidence say about the MCP server.
type Summary struct {
	// Transport is the transport served.
	Transport v1alpha1.MCPTransport `json:"transport"`
	// Calls counts every call, answered or refused.
	Calls int64 `json:"calls"`
	// TokenIssued is true when at least one call returned the token.
	TokenIssued bool `json:"tokenIssued"`
	// Receipts are the first MaxKeptReceipts calls.
	Receipts []Receipt `json:"receipts,omitempty"`
	// ReceiptsDropped counts the calls not kept in Receipts.
	ReceiptsDropped int64 `json:"receiptsDropped,omitempty"`
}

// Receipts is an in-memory Recorder, safe for concurrent use, that answers
// at most maxCalls calls.
type Receipts struct {
	mu        sync.Mutex
	transport v1alpha1.MCPTransport
	maxCalls  int64
	issued    int64
	sum       Summary
}

// NewReceipts returns a Recorder allowing maxCalls answered calls (no limit
// when maxCalls <= 0).
func NewReceipts(transport v1alpha1.MCPTransport, maxCalls int64) *Receipts {
	return &Receipts{transport: transport, maxCalls: maxCalls, sum: Summary{Transport: transport}}
}

// Record implements Recorder.
func (r *Receipts) Record(rc Receipt) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	allowed := r.maxCalls <= 0 || r.issued < r.maxCalls
	if !allowed {
		rc.Outcome = OutcomeRefusedLimit
	}
	r.add(rc)
	return allowed
}

func (r *Receipts) add(rc Receipt) {
	r.sum.Calls++
	if rc.Outcome == OutcomeIssued {
		r.sum.TokenIssued = true
		r.issued++
	}
	if len(r.sum.Receipts) < MaxKeptReceipts {
		r.sum.Receipts = append(r.sum.Receipts, rc)
	} else {
		r.sum.ReceiptsDropped++
	}
}

// Summary returns a copy of what was recorded.
func (r *Receipts) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	s.Receipts = append([]Receipt(nil), r.sum.Receipts...)
	return s
}
