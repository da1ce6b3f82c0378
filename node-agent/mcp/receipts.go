package mcp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

// FileRecorder appends each receipt as a JSON line to a file, for a stdio
// server running in another process than the node-agent. It enforces the
// call limit for its own process.
type FileRecorder struct {
	mu   sync.Mutex
	f    *os.File
	mem  *Receipts
	werr error
}

// NewFileRecorder opens (creating, appending) the receipt file at path.
func NewFileRecorder(path string, maxCalls int64) (*FileRecorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening MCP receipt file: %w", err)
	}
	return &FileRecorder{f: f, mem: NewReceipts(v1alpha1.MCPTransportStdio, maxCalls)}, nil
}

// Record implements Recorder. A receipt that cannot be written refuses the
// call: an unrecorded token would be an unexplained one.
func (fr *FileRecorder) Record(rc Receipt) bool {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	allowed := fr.mem.Record(rc)
	if !allowed {
		rc.Outcome = OutcomeRefusedLimit
	}
	line, _ := json.Marshal(rc)
	if _, err := fr.f.Write(append(line, '\n')); err != nil {
		fr.werr = err
		return false
	}
	return allowed
}

// Close closes the file and returns the first write error, if any.
func (fr *FileRecorder) Close() error {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return errors.Join(fr.werr, fr.f.Close())
}

// ReadReceiptFile reads a receipt file written by FileRecorder into a
// Summary. A malformed line is an error naming it; a torn last line (the
// process killed mid-write) is ignored.
func ReadReceiptFile(path string) (Summary, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Summary{Transport: v1alpha1.MCPTransportStdio}, nil
	}
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	return readReceipts(f)
}

func readReceipts(rd io.Reader) (Summary, error) {
	r := NewReceipts(v1alpha1.MCPTransportStdio, 0)
	sc := bufio.NewScanner(rd)
	var pending error
	for n := 1; sc.Scan(); n++ {
		if pending != nil {
			return Summary{}, pending
		}
		var rc Receipt
		if err := json.Unmarshal(sc.Bytes(), &rc); err != nil {
			pending = fmt.Errorf("MCP receipt file line %d: %w", n, err)
			continue
		}
		r.add(rc)
	}
	if err := sc.Err(); err != nil {
		return Summary{}, err
	}
	return r.Summary(), nil
}
