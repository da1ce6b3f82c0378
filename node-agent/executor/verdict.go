package executor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// outputTailBytes is how much of the redacted log status shows.
const outputTailBytes = 4 << 10

// verdict judges the attempt and builds the status and the evidence.
func (a *attempt) verdict(in *ran) *Outcome {
	run := a.run
	res := &Outcome{}
	st := &res.Status

	// Sandbox.
	st.Sandbox = &harnessv1.SandboxStatus{Mode: string(a.runner.Mode()), Seccomp: in.agent.Seccomp}
	if a.env != nil {
		envStatus := a.env.status
		st.Environment = &envStatus
	}
	if a.diskNote != "" {
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonRunDirFailed, Message: a.diskNote})
	}
	if a.runner.Mode() == sandbox.ModePlain {
		st.Sandbox.FallbackReason = truncate(a.fallbackWhy, 4096)
		msg := sandbox.PlainWarning
		if a.fallbackWhy != "" {
			msg += " (no sandbox worked: " + a.fallbackWhy + ")"
		}
		if a.egress != harnessv1.EgressUnrestricted {
			msg += fmt.Sprintf("; spec.network.egress %s was not enforced: the agent shared the node's network", a.egress)
		}
		setCondition(st, harnessv1.ConditionSandboxed, false, harnessv1.ReasonIsolationFallback, truncate(msg, 32768))
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonIsolationFallback, Message: msg})
	} else {
		setCondition(st, harnessv1.ConditionSandboxed, true, harnessv1.ReasonSandboxed, fmt.Sprintf("the agent ran in %s", a.runner.Mode()))
	}
	if run.Spec.Network.Egress == harnessv1.EgressUnrestricted {
		msg := "spec.network.egress is Unrestricted: the agent shared the node's network and could reach anything the node can"
		setCondition(st, harnessv1.ConditionEgressUnrestricted, true, harnessv1.ReasonEgressUnrestricted, msg)
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonEgressUnrestricted, Message: msg})
	}
	var denied *Warning
	st.Network, denied = networkStatus(a.egress, in.egressStats, a.redactor)
	st.Network.ProviderToolsRefused = in.refusedProviderTools
	if denied != nil {
		res.Warnings = append(res.Warnings, *denied)
	}

	// Agent.
	ag := &harnessv1.AgentStatus{
		Adapter: run.Spec.Agent.Adapter, CLIVersion: truncate(a.version(), 128), CLIDigest: a.cliDigest,
		OOMKilled: in.agent.OOMKilled, TimedOut: in.agent.TimedOut,
		DurationMilliseconds: in.agent.Duration.Milliseconds(),
		OutputBytes:          in.out.rawBytes(),
		Truncated:            in.out.truncated(),
		// Shown to people (kubectl describe prints it as it is): terminal
		// control sequences become inert text. output.log keeps the bytes.
		OutputTail:        termsafe.String(validUTF8(in.out.tail(outputTailBytes))),
		Turns:             in.activity.Turns,
		ToolCalls:         in.activity.ToolCalls,
		PermissionDenials: in.activity.PermissionDenials,
	}
	if a.inv != nil {
		for _, n := range a.inv.Notes {
			if len(ag.Notes) == 8 {
				break
			}
			n = truncate(a.redactor.String(n), 1024)
			ag.Notes = append(ag.Notes, n)
			res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonAdapterNote, Message: n})
		}
	}
	if in.refusedProviderTools > 0 && len(ag.Notes) < 8 {
		// Loud: the agent's CLI got a 403 it may have hidden.
		n := fmt.Sprintf("the model gateway refused %d model requests that asked the provider to reach the network for the agent (hosted web search or fetch, a remote MCP server); spec.network.providerTools: Allowed forwards them",
			in.refusedProviderTools)
		ag.Notes = append(ag.Notes, n)
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonAdapterNote, Message: n})
	}
	if in.providerErrors > 0 && len(ag.Notes) < 8 {
		// Loud: the CLI's own retries, or its failure, followed.
		n := fmt.Sprintf("the provider failed %d of the agent's model requests (a rate limit, an overload, an outage or a refused credential) after the model gateway's own tries, where the provider allowed them; each failure went to the agent's CLI as its answer",
			in.providerErrors)
		ag.Notes = append(ag.Notes, n)
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonAdapterNote, Message: n})
	}
	if d := a.pace.slowed() + a.checksPace.slowed(); d >= time.Second && len(ag.Notes) < 8 {
		// Loud: the run took longer than its agent did.
		n := fmt.Sprintf("the node-agent slowed the run's output by %s in all: redacting it (lines dense in the token rules' keywords) took more than %.0f%% of a core, "+
			"the share a run's redaction may take", d.Round(time.Second), redactShare*100)
		ag.Notes = append(ag.Notes, n)
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonAdapterNote, Message: n})
	}
	if n := a.usageNote; n != "" && len(ag.Notes) < 8 {
		n = truncate(a.redactor.String(n), 1024)
		ag.Notes = append(ag.Notes, n)
		res.Warnings = append(res.Warnings, Warning{Reason: harnessv1.ReasonAdapterNote, Message: n})
	}
	if in.agent.Signal != 0 {
		ag.Signal = fmt.Sprintf("signal %d", in.agent.Signal)
	} else if in.agentErr == nil && in.stop == nil && !in.agent.TimedOut {
		code := int32(in.agent.ExitCode)
		ag.ExitCode = &code
	}
	st.Agent = ag
	st.Usage = in.usage

	// MCP.
	st.MCP = &harnessv1.MCPStatus{Transport: a.transport, Calls: int32(in.mcp.Calls), TokenIssued: in.mcp.TokenIssued, TokenSeen: in.tokenSeen}
	wantMCP := a.transport != harnessv1.MCPTransportNone && a.transport != ""
	switch {
	case a.inv != nil && a.inv.MCPUnsupported:
		st.MCP.Message = strings.Join(a.inv.Notes, "; ")
		setCondition(st, harnessv1.ConditionMCPVerified, false, harnessv1.ReasonMCPUnsupported, st.MCP.Message)
	case !wantMCP:
		st.MCP.Message = "the run asked for no MCP server"
	case in.tokenSeen:
		setCondition(st, harnessv1.ConditionMCPVerified, true, harnessv1.ReasonTokenSeen, "the agent called get_token and the token appeared in its output or artifacts")
	default:
		st.MCP.Message = fmt.Sprintf("the token never appeared in the agent's output or artifacts (%d get_token calls)", in.mcp.Calls)
		setCondition(st, harnessv1.ConditionMCPVerified, false, harnessv1.ReasonTokenNotSeen, st.MCP.Message)
	}

	// Checks and artifacts.
	st.Checks = in.checks
	st.Reward = meanReward(in.checks)
	if len(in.checks) > 0 {
		if allPassed(in.checks) {
			setCondition(st, harnessv1.ConditionChecksPassed, true, harnessv1.ReasonChecksPassed, fmt.Sprintf("%d checks passed", len(in.checks)))
		} else {
			setCondition(st, harnessv1.ConditionChecksPassed, false, harnessv1.ReasonChecksFailed, failedChecks(in.checks))
		}
	}
	for _, r := range in.artifacts {
		st.Artifacts = append(st.Artifacts, r.Status())
	}

	// Verdict: a pure function of what the attempt found.
	j := judgement{
		Stop: in.stop, StoppedInChecks: in.stoppedInChecks, Gateway: in.gatewayStop, ProviderFailing: in.providerFailing,
		TimedOut: in.agent.TimedOut, OOMKilled: ag.OOMKilled, OOMCause: in.agent.OOMCause, Signal: ag.Signal,
		Exited: ag.ExitCode != nil, ExitCode: in.agent.ExitCode,
		MCPUnsupported: a.inv != nil && a.inv.MCPUnsupported, WantMCP: wantMCP, TokenSeen: in.tokenSeen,
		MCPMessage: st.MCP.Message, Checks: in.checks,
		EpisodeSeconds: a.limits.EpisodeSeconds, Memory: a.limits.Memory.String(),
		Unsandboxed: a.runner.Mode() == sandbox.ModePlain,
		DiskFull:    in.diskFull, Disk: a.limits.Disk.String(), NoRoomForChecks: in.noRoomForChecks,
	}
	v := judge(j)
	st.Phase, st.Verdict, st.FailureClass, st.Reason, st.Message = v.Phase, v.Verdict, v.FailureClass, v.Reason, v.Message
	st.Message = a.redactor.String(st.Message)

	ev, digests, err := a.evidence(in, st)
	if err != nil {
		st.Message += "; the evidence could not be built: " + err.Error()
		return res
	}
	st.Evidence = digests
	res.Evidence = ev
	return res
}

// networkStatus reports the egress mode and what the run's proxy counted
// (stats is nil without a proxy), and the Warning a denial deserves.
func networkStatus(mode harnessv1.Egress, stats *egress.Stats, r *redact.Redactor) (*harnessv1.NetworkStatus, *Warning) {
	n := &harnessv1.NetworkStatus{Egress: mode}
	if stats == nil {
		return n, nil
	}
	n.Allowed, n.Denied = stats.Allowed, stats.Denied
	// A denied host name can carry a secret the agent tried to smuggle out,
	// and whatever the agent wrote in it: the proxy reads a host as Go's
	// URL parser decodes it, which takes percent-encoded non-ASCII (a C1
	// control such as the 8-bit CSI U+009B, a bidi override). Shown in
	// status, the receipt and the EgressDenied Event, it is made inert as
	// the output tail is: raw, it reached terminals through `kubectl get
	// events`, and U+009B made the run, its evidence ConfigMap and every
	// list holding them unprintable as YAML.
	for _, h := range stats.DeniedHosts {
		n.DeniedHosts = append(n.DeniedHosts, truncate(termsafe.String(validUTF8([]byte(r.String(h)))), 261))
	}
	if stats.Denied == 0 {
		return n, nil
	}
	// Which fix the hint names: a host that is not allowed, or one that
	// is (the run's own providerURL, say) but resolves to the node's
	// own or a private address, which allowHosts does not change.
	var inside, outside []string
	for i, h := range stats.DeniedHosts {
		if slices.Contains(stats.InsideHosts, h) {
			inside = append(inside, n.DeniedHosts[i])
		} else {
			outside = append(outside, n.DeniedHosts[i])
		}
	}
	var hints []string
	if len(outside) > 0 {
		hints = append(hints, "add a host the agent needs to spec.network.allowHosts")
	}
	if len(inside) > 0 {
		hints = append(hints, fmt.Sprintf("%s is allowed but resolves to an address of this node or a private network, which the agent reaches only where it is named inside: "+
			"a HarnessPolicy's network.insideHosts on a cluster, --inside-host with harnessfacts run", strings.Join(inside, ", ")))
	}
	return n, &Warning{Reason: harnessv1.ReasonEgressDenied, Message: fmt.Sprintf(
		"the egress proxy refused %d connection(s) of the agent (spec.network.egress ProviderOnly), to %s; %s",
		stats.Denied, strings.Join(n.DeniedHosts, ", "), strings.Join(hints, "; "))}
}

func failedChecks(checks []harnessv1.CheckResult) string {
	var failed []string
	for _, c := range checks {
		if !c.Passed {
			failed = append(failed, c.Name)
		}
	}
	return fmt.Sprintf("%d of %d checks failed: %s", len(failed), len(checks), strings.Join(failed, ", "))
}

// validUTF8 keeps status strings valid: the API server stores strings, and a
// cut in the middle of a character would otherwise turn into garbage.
func validUTF8(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// judgement is all the verdict depends on.
type judgement struct {
	// Stop is why the run was stopped (cancelled, deleted); nil if not.
	// StoppedInChecks: the agent had ended, and the stop cut its checks.
	Stop            *StopCause
	StoppedInChecks bool
	// Gateway is why the model gateway ended the run; nil if it did not.
	Gateway *gateway.Stop
	// ProviderFailing is the provider's failure that answered the agent's
	// last model requests, with no answer since, if it held
	// (gateway.ProviderFailing).
	ProviderFailing *gateway.Stop
	// TimedOut, OOMKilled and Signal say how the agent ended, when it did
	// not exit by itself; Exited says it did, with ExitCode.
	TimedOut  bool
	OOMKilled bool
	// OOMCause is what passed the memory limit when the tree's memory
	// alone did not (sandbox.Result.OOMCause: socket buffers on cgroup
	// v1).
	OOMCause string
	Signal   string
	Exited   bool
	ExitCode int
	// MCPUnsupported: the agent's CLI cannot use the run's MCP server.
	MCPUnsupported bool
	// WantMCP: the run has an MCP server; TokenSeen: its token appeared in
	// the agent's output or artifacts; MCPMessage is status.mcp.message.
	WantMCP    bool
	TokenSeen  bool
	MCPMessage string
	Checks     []harnessv1.CheckResult
	// EpisodeSeconds and Memory are the limits, for the messages.
	EpisodeSeconds int32
	Memory         string
	// Unsandboxed: the agent ran in the plain fallback.
	Unsandboxed bool
	// DiskFull is the run dir's usage when it was full as the agent ended
	// (nil if it was not); Disk is limits.disk, for the message.
	DiskFull *fixture.DiskUsage
	Disk     string
	// NoRoomForChecks: DiskFull is the usage when the verifier part could
	// not be written for lack of room the agent had taken.
	NoRoomForChecks bool
}

// verdict is the judgement's result: status' phase, verdict, failure class,
// reason and message.
type verdict struct {
	Phase        harnessv1.RunPhase
	Verdict      harnessv1.Verdict
	FailureClass harnessv1.FailureClass
	Reason       string
	Message      string
}

// judge is the product's judgement order: the first reason that applies,
// in the order a user reads them. A stop, a timeout and the agent's own
// failure come before what the agent did; an MCP server the CLI cannot use
// comes before the checks (which then fail because of it); the checks come
// before the token.
func judge(j judgement) verdict {
	var v verdict
	switch {
	case j.Stop != nil:
		// Stopping is nobody's failure: no failure class, never retried.
		what := "; the agent's process tree was killed"
		if j.StoppedInChecks {
			what = "; the agent had ended, and its checks were stopped"
		}
		v = verdict{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
			Reason: j.Stop.Reason, Message: j.Stop.Message + what}
	case j.Gateway != nil && j.Gateway.Reason == harnessv1.ReasonPolicyViolation:
		// The gateway refused the provider's address (egress.Inside): a
		// refusal judges nobody, as when a policy refuses a run at claim.
		v = verdict{Phase: harnessv1.RunFailed, Reason: j.Gateway.Reason, Message: j.Gateway.Message + "; the agent's process tree was killed"}
	case j.Gateway != nil && j.Gateway.Infrastructure:
		// The provider failed, or could not be verified: nobody's answer
		// was judged, and a retry of the run may pass.
		v = verdict{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError, FailureClass: harnessv1.FailureInfrastructure,
			Reason: j.Gateway.Reason, Message: j.Gateway.Message + "; the agent's process tree was killed"}
	case j.Gateway != nil:
		// A request or token limit: the agent used what the run allows.
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureAgent,
			Reason: j.Gateway.Reason, Message: j.Gateway.Message + "; the agent's process tree was killed"}
	case j.ProviderFailing != nil && !j.OOMKilled && j.DiskFull == nil:
		// The agent's CLI had its provider's failure for an answer to the
		// end: if the agent did not pass, the provider, not the agent, is
		// what the run shows (a retry of the run may pass), and the
		// message says how the agent ended; an agent that passed anyway
		// passes. How it ended is what the cases below say of it.
		rest := j
		rest.ProviderFailing, rest.Unsandboxed = nil, false
		v = judge(rest)
		if v.Verdict != harnessv1.VerdictPass {
			v = verdict{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError, FailureClass: harnessv1.FailureInfrastructure,
				Reason: j.ProviderFailing.Reason, Message: j.ProviderFailing.Message + "; then " + v.Message}
		}
	case j.TimedOut:
		v = verdict{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError, FailureClass: harnessv1.FailureTimeout,
			Reason:  harnessv1.ReasonDeadlineExceeded,
			Message: fmt.Sprintf("the agent did not finish within limits.episodeSeconds (%ds) and was killed", j.EpisodeSeconds)}
	case j.DiskFull != nil:
		// Before the exit code: the agent may have died of ENOSPC or
		// ignored it and exited 0; either way the limit is the reason.
		u := j.DiskFull
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureAgent,
			Reason: harnessv1.ReasonDiskLimitExceeded,
			Message: fmt.Sprintf("the run dir was full when the agent ended (limits.disk %s: %d of %d bytes, %d of %d files in use); writes beyond it failed with ENOSPC",
				j.Disk, u.Bytes, u.LimitBytes, u.Files, u.LimitFiles)}
		if j.NoRoomForChecks {
			v.Message = fmt.Sprintf("the agent left too little of the run dir (limits.disk %s: %d of %d bytes, %d of %d files in use) for the fixture's verifier part, so no check could run",
				j.Disk, u.Bytes, u.LimitBytes, u.Files, u.LimitFiles)
		}
		if j.Exited {
			v.Message += fmt.Sprintf("; the agent exited with code %d", j.ExitCode)
		}
	case !j.Exited || j.ExitCode != 0:
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureAgent,
			Reason: harnessv1.ReasonAgentFailed}
		switch {
		case j.OOMKilled:
			v.Message = fmt.Sprintf("the agent was killed at its memory limit (%s)", j.Memory)
			if j.OOMCause != "" {
				v.Message += ": " + j.OOMCause
			}
		case j.Signal != "" && j.ExitCode > 128:
			// bwrap reports a payload killed by signal N as status
			// 128+N, and a payload's own exit code 128+N the same
			// (Gemini CLI exits 144 on some errors): both are said.
			v.Message = fmt.Sprintf("the agent was killed by %s, or exited with code %d (bwrap reports the two alike)", j.Signal, j.ExitCode)
		case j.Signal != "":
			v.Message = "the agent was killed by " + j.Signal
		default:
			v.Message = fmt.Sprintf("the agent exited with code %d", j.ExitCode) + exitCodeHint(j.ExitCode)
		}
	case j.MCPUnsupported:
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureAgent,
			Reason: harnessv1.ReasonMCPUnsupported, Message: j.MCPMessage}
		if !allPassed(j.Checks) {
			v.Message += "; " + failedChecks(j.Checks)
		}
	case !allPassed(j.Checks):
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureCheck,
			Reason: harnessv1.ReasonChecksFailed, Message: failedChecks(j.Checks)}
	case j.WantMCP && !j.TokenSeen:
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureAgent,
			Reason: harnessv1.ReasonTokenNotSeen, Message: j.MCPMessage}
	default:
		v = verdict{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass, Reason: harnessv1.ReasonCompleted,
			Message: fmt.Sprintf("the agent finished and %d checks passed", len(j.Checks))}
		if j.WantMCP {
			v.Message += "; the MCP token was seen"
		}
	}
	switch v.Reason {
	case harnessv1.ReasonCompleted, harnessv1.ReasonChecksFailed, harnessv1.ReasonTokenNotSeen, harnessv1.ReasonMCPUnsupported:
		if !j.OOMKilled {
			break
		}
		// A process of the agent's (a build, a test run) was killed at
		// the memory limit and the agent exited 0 all the same: the
		// status's agent.oomKilled says so, and so does the message, or
		// a reader sees oomKilled beside "finished" with nothing to join
		// them.
		v.Message += fmt.Sprintf("; a process of the agent's was killed at its memory limit (%s)", j.Memory)
		if j.OOMCause != "" {
			v.Message += ": " + j.OOMCause
		}
	}
	if j.Unsandboxed {
		v.Message += " (UNSANDBOXED: see condition Sandboxed)"
	}
	return v
}

func allPassed(checks []harnessv1.CheckResult) bool {
	for _, c := range checks {
		if !c.Passed {
			return false
		}
	}
	return true
}

// exitCodeHint says what the shells' codes for a command that could not be
// run mean: the sandbox reports an agent's command that bwrap could not
// execute the same way (127 missing, 126 a folder or not executable;
// sandbox-init, where it starts the agent, 127 for every start that
// failed), and the reason is only in the output, where a bare "exited with
// code 127" does not send the reader.
func exitCodeHint(code int) string {
	switch code {
	case 126:
		return " (126: a command that was found but could not be executed; the end of the agent's output says why)"
	case 127:
		return " (127: a command that was not found or could not be started; the end of the agent's output says why)"
	}
	return ""
}
