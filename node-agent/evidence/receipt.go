// Package evidence builds, stores and verifies a run's hashed evidence: the
// canonical JSON receipt of DESIGN.md "Evidence", the redacted output log
// and the collected artifacts, as a folder (local runs) or as ConfigMap data
// (cluster runs), and Verify for both, which recomputes every digest and
// names the part that differs.
//
// The receipt's digest — sha256 of its canonical bytes, "sha256:<hex>" —
// is status.evidence.digest. The receipt holds the digest of every other
// part, so the one digest vouches for the whole evidence.
//
// Canonical JSON: encoding/json of Receipt (fields in declaration order,
// map keys sorted), no HTML escaping, no insignificant whitespace, no
// trailing newline, times in UTC.
package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
)

// Schema names the receipt format; a reader refuses another.
const Schema = "harnessfacts.io/receipt/v1"

// Receipt is what happened in one attempt of a run.
type Receipt struct {
	// Schema is always Schema.
	Schema string `json:"schema"`
	// Run identifies the run and attempt.
	Run RunRef `json:"run"`
	// SpecDigest is the sha256 of the run's canonical spec.
	SpecDigest string `json:"specDigest"`
	// FixtureDigest is the fixture's tree hash.
	FixtureDigest string `json:"fixtureDigest"`
	// FixtureSource is where a git or OCI fixture came from: the
	// repository's URL and the commit read, or the artifact's reference
	// and the manifest digest pulled.
	FixtureSource *v1alpha1.FixtureSourceStatus `json:"fixtureSource,omitempty"`
	// HarnessVersion is the node-agent's version.
	HarnessVersion string `json:"harnessVersion,omitempty"`
	// HarnessImage is the node-agent's container image as its pod spec
	// names it (repository@sha256:... when the chart pins a digest); empty
	// outside a pod.
	HarnessImage string `json:"harnessImage,omitempty"`
	// Agent is the adapter, the CLI version it reported and the CLI's
	// binary by digest.
	Agent Agent `json:"agent"`
	// Provider is the model endpoint the run used (never a credential).
	Provider *Provider `json:"provider,omitempty"`
	// Usage is the run's status.usage: the model asked for, the models
	// that answered, tokens, and where the figures came from.
	Usage *v1alpha1.UsageStatus `json:"usage,omitempty"`
	// Node is the node that ran the attempt.
	Node string `json:"node"`
	// Sandbox is the isolation really used.
	Sandbox v1alpha1.SandboxStatus `json:"sandbox"`
	// Environment is the image the sandbox's root came from: the
	// reference, the manifest digest pulled and checked, and the config's
	// digest (absent without an environment image).
	Environment *v1alpha1.EnvironmentStatus `json:"environment,omitempty"`
	// Limits are the limits in force.
	Limits v1alpha1.Limits `json:"limits"`
	// Timings say when things happened.
	Timings Timings `json:"timings"`
	// Exit is how the agent ended.
	Exit Exit `json:"exit"`
	// Output describes the agent's redacted output and what of it is stored.
	Output Output `json:"output"`
	// Trajectory describes trajectory.json, the run's conversation in ATIF
	// (absent when the adapter's CLI writes no event stream to build it
	// from: Aider, Antigravity, exec).
	Trajectory *Trajectory `json:"trajectory,omitempty"`
	// MCP is what the token server recorded, and whether the token was seen.
	MCP MCP `json:"mcp"`
	// Network is the egress mode used and what the run's egress proxy
	// counted (absent in receipts written before it was recorded).
	Network *v1alpha1.NetworkStatus `json:"network,omitempty"`
	// Reward is the run's reward, the mean of its checks' (absent when no
	// check reported one); each check's is in Checks.
	Reward string `json:"reward,omitempty"`
	// Checks are the fixture's checks and their results.
	Checks []v1alpha1.CheckResult `json:"checks,omitempty"`
	// Artifacts are the requested files, collected or rejected.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Dropped lists, in plain words, what was left out of the stored
	// evidence to keep it within its size bound.
	Dropped []string `json:"dropped,omitempty"`
}

// RunRef identifies a run's attempt.
type RunRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	Attempt   int32  `json:"attempt"`
}

// Agent is the agent CLI that ran.
type Agent struct {
	Adapter    v1alpha1.Adapter `json:"adapter"`
	CLIVersion string           `json:"cliVersion,omitempty"`
	// CLIPath is the command the sandbox started (symbolic links
	// resolved), and CLIDigest the sha256 of that file: for a CLI that is
	// a script, of its entry script only.
	CLIPath   string `json:"cliPath,omitempty"`
	CLIDigest string `json:"cliDigest,omitempty"`
}

// Provider is where the run's model requests went.
type Provider struct {
	// URL is the provider's base URL, without user info, query or
	// fragment: spec.agent.providerURL, else the adapter's provider when
	// the model gateway knew it; empty when the CLI chose alone.
	URL string `json:"url,omitempty"`
	// Gateway is true when the node-agent's model gateway carried the
	// requests (and counted usage).
	Gateway bool `json:"gateway,omitempty"`
}

// Timings of the attempt, in UTC.
type Timings struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// AgentMilliseconds is the agent's wall time.
	AgentMilliseconds int64 `json:"agentMilliseconds"`
}

// Exit is how the agent ended.
type Exit struct {
	ExitCode  *int32 `json:"exitCode,omitempty"`
	Signal    string `json:"signal,omitempty"`
	TimedOut  bool   `json:"timedOut,omitempty"`
	OOMKilled bool   `json:"oomKilled,omitempty"`
	// OOMCause says what passed the memory limit when the agent's memory
	// alone did not: its TCP socket buffers on cgroup v1
	// (sandbox.Result.OOMCause).
	OOMCause string `json:"oomCause,omitempty"`
}

// Output describes the agent's captured, redacted output.
type Output struct {
	// Digest is the sha256 of the whole captured output ("sha256:<hex>").
	Digest string `json:"digest"`
	// Bytes is the captured output's length.
	Bytes int64 `json:"bytes"`
	// Truncated is true when the capture itself dropped output beyond
	// limits.maxOutputBytes (as the sandbox reported it).
	Truncated bool `json:"truncated,omitempty"`
	// StoredDigest and StoredBytes describe output.log as stored; they
	// differ from Digest and Bytes when the log was shortened to fit.
	StoredDigest string `json:"storedDigest"`
	StoredBytes  int64  `json:"storedBytes"`
}

// Trajectory describes the stored trajectory.json.
type Trajectory struct {
	// Format is the trajectory's format and version ("ATIF-v1.4").
	Format string `json:"format"`
	// Steps counts its steps.
	Steps int `json:"steps"`
	// Size and SHA256 (hex) describe trajectory.json as built (bounded and
	// redacted).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Stored is false when it was left out to fit (its digest still
	// vouches for it).
	Stored bool `json:"stored"`
}

// MCP is the token server's record.
type MCP struct {
	mcp.Summary
	// TokenSeen is true when the token appeared in the output or artifacts.
	TokenSeen bool `json:"tokenSeen"`
}

// Artifact is one requested file.
type Artifact struct {
	Path string `json:"path"`
	// Size and SHA256 (hex) describe the redacted content, when collected.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Rejected says why it was not collected.
	Rejected string `json:"rejected,omitempty"`
	// Stored is true when the content is in the evidence; false when it was
	// rejected or dropped to fit (its digest still vouches for it).
	Stored bool `json:"stored"`
}

// Canonical returns the receipt's canonical bytes.
func (r *Receipt) Canonical() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Digest returns sha256 of the canonical bytes, "sha256:<hex>".
func (r *Receipt) Digest() (string, error) {
	b, err := r.Canonical()
	if err != nil {
		return "", err
	}
	return Sum(b), nil
}

// Sum is "sha256:<hex>" of b.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// parseReceipt reads canonical receipt bytes strictly: unknown fields, a
// foreign schema or bytes that are not canonical are errors.
func parseReceipt(b []byte) (*Receipt, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Receipt
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("not a receipt: %w", err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("schema %q, want %q", r.Schema, Schema)
	}
	c, err := r.Canonical()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(c, b) {
		return nil, fmt.Errorf("not in canonical form (was it edited?)")
	}
	return &r, nil
}
