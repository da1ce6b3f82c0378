package v1alpha1

import (
	"slices"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lengths the schema allows for the status strings that can grow with what
// an agent, a check or a node prints. The API server rejects a whole status
// write when one of them is longer, and a run whose terminal status is
// rejected never ends: every writer calls Fit before it writes.
const (
	// MaxMessageLength bounds status.message and sandbox.fallbackReason.
	MaxMessageLength = 4096
	// MaxConditionMessageLength is metav1.Condition's bound on message.
	MaxConditionMessageLength = 32768
	// MaxOutputTailLength bounds status.agent.outputTail.
	MaxOutputTailLength = 8192
	// MaxShortMessageLength bounds the messages of MCP, checks, notes and
	// a node's sandbox modes.
	MaxShortMessageLength = 1024
)

// truncatedMark ends a string Fit shortened, so a reader knows.
const truncatedMark = " …[truncated]"

// Truncate returns s cut to at most n bytes at a character boundary, ending
// in a mark that says so; the API server counts characters, which are never
// more than bytes. Invalid UTF-8 is replaced, since the API server would
// store it as garbage.
func Truncate(s string, n int) string {
	if !utf8.ValidString(s) {
		s = toValidUTF8(s)
	}
	if len(s) <= n {
		return s
	}
	keep := n - len(truncatedMark)
	if keep <= 0 {
		keep = n
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	if keep == n {
		return s[:keep]
	}
	return s[:keep] + truncatedMark
}

func toValidUTF8(s string) string {
	b := make([]byte, 0, len(s))
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\uFFFD"...)
		} else {
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return string(b)
}

// Fit shortens every string and list of the status that can outgrow its
// schema bound, so that the API server accepts the write.
func (s *HarnessRunStatus) Fit() {
	s.NodeName = Truncate(s.NodeName, 253)
	s.Reason = Truncate(s.Reason, 128)
	s.Message = Truncate(s.Message, MaxMessageLength)
	s.Conditions = fitConditions(s.Conditions, 16)
	if sb := s.Sandbox; sb != nil {
		sb.Mode = Truncate(sb.Mode, 64)
		sb.FallbackReason = Truncate(sb.FallbackReason, MaxMessageLength)
		sb.Seccomp = Truncate(sb.Seccomp, 512)
	}
	if f := s.FixtureSource; f != nil {
		// The run's own values (bounded by the spec's schema) and digests:
		// only a corrupted status needs these.
		f.Type = Truncate(f.Type, 16)
		f.URL = Truncate(f.URL, 2048)
		f.Commit = Truncate(f.Commit, 64)
		f.Path = Truncate(f.Path, 512)
		f.Ref = Truncate(f.Ref, 512)
		f.Digest = Truncate(f.Digest, 71)
	}
	if e := s.Environment; e != nil {
		// The reference was the run's or fixture's (at most 512 by their
		// own checks) and the digests go-containerregistry's (71): only a
		// corrupted status needs these.
		e.Image = Truncate(e.Image, 512)
		e.Digest = Truncate(e.Digest, 71)
		e.ConfigDigest = Truncate(e.ConfigDigest, 71)
		e.Source = Truncate(e.Source, 16)
	}
	// The live-output endpoint is the node-agent's own (its pod IP and its
	// certificate): one that does not meet the schema is dropped rather
	// than cut, since a shortened URL or digest is of no use; `logs` then
	// prints the stored output.
	if l := s.LiveOutput; l != nil && (len(l.URL) > 512 || !strings.HasPrefix(l.URL, "https://") || !isHexSHA256(l.CertificateSHA256)) {
		s.LiveOutput = nil
	}
	if a := s.Agent; a != nil {
		a.CLIVersion = Truncate(a.CLIVersion, 128)
		a.CLIDigest = Truncate(a.CLIDigest, 71)
		a.Signal = Truncate(a.Signal, 32)
		a.OutputTail = truncateHead(a.OutputTail, MaxOutputTailLength)
		a.Notes = a.Notes[:min(len(a.Notes), 8)]
		for i := range a.Notes {
			a.Notes[i] = Truncate(a.Notes[i], MaxShortMessageLength)
		}
	}
	if m := s.MCP; m != nil {
		m.Message = Truncate(m.Message, MaxShortMessageLength)
	}
	if n := s.Network; n != nil {
		n.DeniedHosts = n.DeniedHosts[:min(len(n.DeniedHosts), 10)]
		for i := range n.DeniedHosts {
			n.DeniedHosts[i] = Truncate(n.DeniedHosts[i], 261)
		}
	}
	if u := s.Usage; u != nil {
		// Figures that name no source claim none.
		if u.Source == "" {
			u.Source = UsageNone
		}
		u.ModelRequested = Truncate(u.ModelRequested, 256)
		u.Models = u.Models[:min(len(u.Models), 8)]
		for i := range u.Models {
			u.Models[i] = Truncate(u.Models[i], 256)
		}
		u.EstimatedCost = Truncate(u.EstimatedCost, 64)
	}
	// An inside host cut short would be another name: one too long is
	// dropped (the controller takes them from policies, whose schema bounds
	// them the same).
	s.InsideHosts = slices.DeleteFunc(s.InsideHosts, func(h string) bool { return len(h) > 253 })
	s.InsideHosts = s.InsideHosts[:min(len(s.InsideHosts), 64)]
	s.ChargedTokens = max(0, s.ChargedTokens)
	s.Checks = s.Checks[:min(len(s.Checks), 64)]
	s.Reward = Truncate(s.Reward, 32)
	for i := range s.Checks {
		c := &s.Checks[i]
		c.Reward = Truncate(c.Reward, 32)
		c.RewardError = Truncate(c.RewardError, 256)
		c.Name = Truncate(c.Name, 128)
		c.Message = Truncate(c.Message, MaxShortMessageLength)
	}
	s.Artifacts = s.Artifacts[:min(len(s.Artifacts), 64)]
	for i := range s.Artifacts {
		a := &s.Artifacts[i]
		a.Path = Truncate(a.Path, 512)
		a.SHA256 = Truncate(a.SHA256, 64)
		a.Rejected = Truncate(a.Rejected, 512)
	}
	if e := s.Evidence; e != nil {
		e.ConfigMapName = Truncate(e.ConfigMapName, 253)
		e.Digest = Truncate(e.Digest, 71)
		e.FixtureDigest = Truncate(e.FixtureDigest, 71)
		e.SpecDigest = Truncate(e.SpecDigest, 71)
		e.SignedBy = Truncate(e.SignedBy, 71)
		e.StoredRef = Truncate(e.StoredRef, 512)
	}
}

// Fit shortens the node's strings that can outgrow their schema bound (a
// preflight's message, a CLI's version line).
func (s *HarnessNodeStatus) Fit() {
	s.OS = Truncate(s.OS, 32)
	s.Arch = Truncate(s.Arch, 32)
	s.AgentVersion = Truncate(s.AgentVersion, 128)
	s.LeaseNamespace = Truncate(s.LeaseNamespace, 63)
	s.Adapters = s.Adapters[:min(len(s.Adapters), 16)]
	for i := range s.Adapters {
		s.Adapters[i].Version = Truncate(s.Adapters[i].Version, 128)
	}
	s.SandboxModes = s.SandboxModes[:min(len(s.SandboxModes), 8)]
	for i := range s.SandboxModes {
		m := &s.SandboxModes[i]
		m.Mode = Truncate(m.Mode, 64)
		m.Message = Truncate(m.Message, MaxShortMessageLength)
	}
	// A shortened key or key id verifies nothing: one beyond its bounds is
	// dropped, and the node's receipts then name a key nobody can find,
	// which a verifier refuses.
	if k := s.EvidenceKey; k != nil && (len(k.KeyID) > 71 || len(k.Algorithm) > 32 || len(k.PublicKey) > 1024) {
		s.EvidenceKey = nil
	}
	s.Conditions = fitConditions(s.Conditions, 8)
}

// Fit shortens the suite's condition messages.
func (s *HarnessSuiteStatus) Fit() {
	s.Conditions = fitConditions(s.Conditions, 8)
}

func fitConditions(cs []metav1.Condition, maxItems int) []metav1.Condition {
	cs = cs[:min(len(cs), maxItems)]
	for i := range cs {
		cs[i].Message = Truncate(cs[i].Message, MaxConditionMessageLength)
	}
	return cs
}

// truncateHead keeps the end of s (an output's tail is read from its end).
func truncateHead(s string, n int) string {
	if !utf8.ValidString(s) {
		s = toValidUTF8(s)
	}
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:]
}

// isHexSHA256 reports whether s is 64 lower-case hex digits.
func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
