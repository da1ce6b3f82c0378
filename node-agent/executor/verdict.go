package executor

import (
	"fmt"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
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
	st.Sandbox = &harnessv1.SandboxStatus{Mode: string(a.runner.Mode())}
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
	if denied != nil {
		res.Warnings = append(res.Warnings, *denied)
	}

	// Agent.
	ag := &harnessv1.AgentStatus{
		Adapter: run.Spec.Agent.Adapter, CLIVersion: truncate(a.cliVersion, 128),
		OOMKilled: in.agent.OOMKilled, TimedOut: in.agent.TimedOut,
		DurationMilliseconds: in.agent.Duration.Milliseconds(),
		OutputBytes:          in.out.rawBytes(),
		Truncated:            in.out.truncated(),
		OutputTail:           validUTF8(in.out.tail(outputTailBytes)),
		Turns:                in.activity.Turns,
		ToolCalls:            in.activity.ToolCalls,
		PermissionDenials:    in.activity.PermissionDenials,
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
	if in.agent.Signal != 0 {
		ag.Signal = fmt.Sprintf("signal %d", in.agent.Signal)
	} else if in.agentErr == nil && in.stop == nil && !in.agent.TimedOut {
		code := int32(in.agent.ExitCode)
		ag.ExitCode = &code
	}
	st.Agent = ag

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
	allPassed := true
	for _, c := range in.checks {
		allPassed = allPassed && c.Passed
	}
	if len(in.checks) > 0 {
		if allPassed {
			setCondition(st, harnessv1.ConditionChecksPassed, true, harnessv1.ReasonChecksPassed, fmt.Sprintf("%d checks passed", len(in.checks)))
		} else {
			setCondition(st, harnessv1.ConditionChecksPassed, false, harnessv1.ReasonChecksFailed, failedChecks(in.checks))
		}
	}
	for _, r := range in.artifacts {
		st.Artifacts = append(st.Artifacts, r.Status())
	}

	// Verdict: the first reason that applies, in the order a user reads them.
	exitedOK := ag.ExitCode != nil && *ag.ExitCode == 0
	switch {
	case in.stop != nil:
		// Stopping is nobody's failure: no failure class, never retried.
		st.Phase, st.Verdict = harnessv1.RunFailed, harnessv1.VerdictError
		st.Reason, st.Message = in.stop.Reason, in.stop.Message+"; the agent's process tree was killed"
	case in.agent.TimedOut:
		st.Phase, st.Verdict, st.FailureClass = harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureTimeout
		st.Reason = harnessv1.ReasonDeadlineExceeded
		st.Message = fmt.Sprintf("the agent did not finish within limits.episodeSeconds (%ds) and was killed", a.limits.EpisodeSeconds)
	case !exitedOK:
		st.Phase, st.Verdict, st.FailureClass = harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent
		st.Reason = harnessv1.ReasonAgentFailed
		switch {
		case ag.OOMKilled:
			st.Message = fmt.Sprintf("the agent was killed at its memory limit (%s)", a.limits.Memory.String())
		case ag.Signal != "":
			st.Message = "the agent was killed by " + ag.Signal
		default:
			st.Message = fmt.Sprintf("the agent exited with code %d", in.agent.ExitCode)
		}
	case a.inv != nil && a.inv.MCPUnsupported:
		// Before the checks: a fixture that needs MCP fails its checks when
		// the CLI has none, and the reason to read first is why.
		st.Phase, st.Verdict, st.FailureClass = harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent
		st.Reason, st.Message = harnessv1.ReasonMCPUnsupported, st.MCP.Message
		if !allPassed {
			st.Message += "; " + failedChecks(in.checks)
		}
	case !allPassed:
		st.Phase, st.Verdict, st.FailureClass = harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureCheck
		st.Reason, st.Message = harnessv1.ReasonChecksFailed, failedChecks(in.checks)
	case wantMCP && !in.tokenSeen:
		st.Phase, st.Verdict, st.FailureClass = harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent
		st.Reason, st.Message = harnessv1.ReasonTokenNotSeen, st.MCP.Message
	default:
		st.Phase, st.Verdict = harnessv1.RunSucceeded, harnessv1.VerdictPass
		st.Reason = harnessv1.ReasonCompleted
		st.Message = fmt.Sprintf("the agent finished and %d checks passed", len(in.checks))
		if wantMCP {
			st.Message += "; the MCP token was seen"
		}
	}
	if a.runner.Mode() == sandbox.ModePlain {
		st.Message += " (UNSANDBOXED: see condition Sandboxed)"
	}
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
	// A denied host name can carry a secret the agent tried to smuggle out.
	for _, h := range stats.DeniedHosts {
		n.DeniedHosts = append(n.DeniedHosts, strings.ToValidUTF8(truncate(r.String(h), 261), ""))
	}
	if stats.Denied == 0 {
		return n, nil
	}
	return n, &Warning{Reason: harnessv1.ReasonEgressDenied, Message: fmt.Sprintf(
		"the egress proxy refused %d connection(s) of the agent (spec.network.egress ProviderOnly), to %s; "+
			"add a host the agent needs to spec.network.allowHosts", stats.Denied, strings.Join(n.DeniedHosts, ", "))}
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
