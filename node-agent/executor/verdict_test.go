package executor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
)

// TestJudgementOrder covers the whole judgement order: each failure class,
// which reason wins when several apply, the plain fallback, an unseen
// token, an MCP server the CLI cannot use, a full run dir (limits.disk),
// OOM and timeout.
func TestJudgementOrder(t *testing.T) {
	passed := []harnessv1.CheckResult{{Name: "a", Passed: true}, {Name: "b", Passed: true}}
	failing := []harnessv1.CheckResult{{Name: "a", Passed: true}, {Name: "b"}}
	ok := judgement{Exited: true, Checks: passed, WantMCP: true, TokenSeen: true, EpisodeSeconds: 60, Memory: "2Gi"}
	with := func(f func(*judgement)) judgement { j := ok; f(&j); return j }
	stop := &StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"}
	full := &fixture.DiskUsage{Bytes: 8 << 20, LimitBytes: 8 << 20, Files: 12, LimitFiles: 2048, Full: true}

	cases := []struct {
		name    string
		in      judgement
		phase   harnessv1.RunPhase
		verdict harnessv1.Verdict
		class   harnessv1.FailureClass
		reason  string
		message string // the whole message when it starts with "=", else a part of it
	}{
		{"pass", ok, harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted,
			"=the agent finished and 2 checks passed; the MCP token was seen"},
		{"pass without MCP or checks", judgement{Exited: true}, harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted,
			"=the agent finished and 0 checks passed"},
		{"a stop before everything", with(func(j *judgement) {
			j.Stop, j.TimedOut, j.OOMKilled, j.ExitCode, j.Checks, j.TokenSeen = stop, true, true, 137, failing, false
		}), harnessv1.RunFailed, harnessv1.VerdictError, "", harnessv1.ReasonCancelled,
			"=spec.cancel stopped the run; the agent's process tree was killed"},
		{"a stop before the gateway's", with(func(j *judgement) {
			j.Stop, j.Gateway = stop, &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "down", Infrastructure: true}
		}), harnessv1.RunFailed, harnessv1.VerdictError, "", harnessv1.ReasonCancelled, "spec.cancel"},
		{"a provider failing to the end before a timeout and the agent's failure", with(func(j *judgement) {
			j.Gateway = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "the provider still failed", Infrastructure: true}
			j.TimedOut, j.Exited, j.Signal = true, false, "signal 9"
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureInfrastructure, harnessv1.ReasonProviderUnavailable,
			"=the provider still failed; the agent's process tree was killed"},
		{"a provider failing at the agent's last request, and the checks failed", with(func(j *judgement) {
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "the provider p failed the agent's last model request", Infrastructure: true}
			j.Checks = failing
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureInfrastructure, harnessv1.ReasonProviderUnavailable,
			"=the provider p failed the agent's last model request; then 1 of 2 checks failed: b"},
		{"a provider failing while the CLI retried to the deadline", with(func(j *judgement) {
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "429", Infrastructure: true}
			j.TimedOut, j.Exited, j.Signal = true, false, "signal 9"
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureInfrastructure, harnessv1.ReasonProviderUnavailable,
			"=429; then the agent did not finish within limits.episodeSeconds (60s) and was killed"},
		{"a provider failing, unsandboxed: the fallback said once", with(func(j *judgement) {
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "502", Infrastructure: true}
			j.ExitCode, j.Unsandboxed = 1, true
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureInfrastructure, harnessv1.ReasonProviderUnavailable,
			"=502; then the agent exited with code 1 (UNSANDBOXED: see condition Sandboxed)"},
		{"a provider failing at the end, and the agent passed anyway", with(func(j *judgement) {
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "429", Infrastructure: true}
		}), harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted, "2 checks passed"},
		{"a provider failing does not hide the agent's OOM", with(func(j *judgement) {
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "429", Infrastructure: true}
			j.Exited, j.OOMKilled, j.Signal = false, true, "signal 9"
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed, "memory limit"},
		{"a gateway stop before a provider failing", with(func(j *judgement) {
			j.Gateway = &gateway.Stop{Reason: harnessv1.ReasonGatewayTokenLimit, Message: "tokens"}
			j.ProviderFailing = &gateway.Stop{Reason: harnessv1.ReasonProviderUnavailable, Message: "429", Infrastructure: true}
			j.Exited, j.Signal = false, "signal 9"
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonGatewayTokenLimit, "tokens"},
		{"a certificate that does not verify", with(func(j *judgement) {
			j.Gateway = &gateway.Stop{Reason: harnessv1.ReasonProviderCertificateInvalid, Message: "x509", Infrastructure: true}
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureInfrastructure, harnessv1.ReasonProviderCertificateInvalid, "x509"},
		{"a provider address the policy refuses judges nobody", with(func(j *judgement) {
			j.Gateway = &gateway.Stop{Reason: harnessv1.ReasonPolicyViolation, Message: "inside address"}
			j.Exited, j.Signal = false, "signal 9"
		}), harnessv1.RunFailed, "", "", harnessv1.ReasonPolicyViolation, "inside address"},
		{"a gateway limit is the agent's", with(func(j *judgement) {
			j.Gateway = &gateway.Stop{Reason: harnessv1.ReasonGatewayTokenLimit, Message: "tokens"}
			j.Exited, j.Signal = false, "signal 9"
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonGatewayTokenLimit, "tokens"},
		{"a timeout before the agent's failure", with(func(j *judgement) {
			j.TimedOut, j.Exited, j.Signal, j.Checks = true, false, "signal 9", failing
		}), harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureTimeout, harnessv1.ReasonDeadlineExceeded,
			"=the agent did not finish within limits.episodeSeconds (60s) and was killed"},
		{"a full disk, ignored, before the checks and the token", with(func(j *judgement) {
			j.DiskFull, j.Disk, j.Checks, j.TokenSeen = full, "8Mi", failing, false
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonDiskLimitExceeded,
			"=the run dir was full when the agent ended (limits.disk 8Mi: 8388608 of 8388608 bytes, 12 of 2048 files in use); writes beyond it failed with ENOSPC; the agent exited with code 0"},
		{"a full disk before the agent's failure", with(func(j *judgement) { j.DiskFull, j.Disk, j.ExitCode = full, "8Mi", 1 }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonDiskLimitExceeded,
			"writes beyond it failed with ENOSPC; the agent exited with code 1"},
		{"a full disk before OOM", with(func(j *judgement) {
			j.DiskFull, j.Disk, j.Exited, j.OOMKilled, j.Signal = full, "8Mi", false, true, "signal 9"
		}),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonDiskLimitExceeded,
			"=the run dir was full when the agent ended (limits.disk 8Mi: 8388608 of 8388608 bytes, 12 of 2048 files in use); writes beyond it failed with ENOSPC"},
		{"a timeout before a full disk", with(func(j *judgement) { j.TimedOut, j.Exited, j.DiskFull = true, false, full }),
			harnessv1.RunFailed, harnessv1.VerdictError, harnessv1.FailureTimeout, harnessv1.ReasonDeadlineExceeded,
			"=the agent did not finish within limits.episodeSeconds (60s) and was killed"},
		{"a stop before a full disk", with(func(j *judgement) { j.Stop, j.DiskFull = stop, full }),
			harnessv1.RunFailed, harnessv1.VerdictError, "", harnessv1.ReasonCancelled,
			"=spec.cancel stopped the run; the agent's process tree was killed"},
		{"a full disk in the fallback, loudly", with(func(j *judgement) { j.DiskFull, j.Disk, j.Unsandboxed = full, "8Mi", true }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonDiskLimitExceeded,
			"the agent exited with code 0 (UNSANDBOXED: see condition Sandboxed)"},
		{"OOM before its signal", with(func(j *judgement) { j.Exited, j.OOMKilled, j.Signal = false, true, "signal 9" }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent was killed at its memory limit (2Gi)"},
		{"OOM of socket buffers, said so", with(func(j *judgement) {
			j.Exited, j.OOMKilled, j.Signal = false, true, "signal 9"
			j.OOMCause = "its TCP socket buffers (60 MiB) and the rest of its memory (5 MiB) together passed it"
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent was killed at its memory limit (2Gi): its TCP socket buffers (60 MiB) and the rest of its memory (5 MiB) together passed it"},
		{"a child's OOM, the agent exiting 0, said so", with(func(j *judgement) { j.OOMKilled = true }),
			harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted,
			"=the agent finished and 2 checks passed; the MCP token was seen; a process of the agent's was killed at its memory limit (2Gi)"},
		{"a child's OOM beside failed checks", with(func(j *judgement) { j.OOMKilled, j.Checks = true, failing }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureCheck, harnessv1.ReasonChecksFailed,
			"=1 of 2 checks failed: b; a process of the agent's was killed at its memory limit (2Gi)"},
		{"a signal", with(func(j *judgement) { j.Exited, j.Signal = false, "signal 11" }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent was killed by signal 11"},
		{"a status above 128 from bwrap: a signal, or the code itself", with(func(j *judgement) { j.Exited, j.Signal, j.ExitCode = false, "signal 16", 144 }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent was killed by signal 16, or exited with code 144 (bwrap reports the two alike)"},
		{"an exit code before the checks and the token", with(func(j *judgement) { j.ExitCode, j.Checks, j.TokenSeen = 3, failing, false }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent exited with code 3"},
		{"a command that could not be started", with(func(j *judgement) { j.ExitCode = 127 }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent exited with code 127 (127: a command that was not found or could not be started; the end of the agent's output says why)"},
		{"a command that could not be executed", with(func(j *judgement) { j.ExitCode = 126 }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonAgentFailed,
			"=the agent exited with code 126 (126: a command that was found but could not be executed; the end of the agent's output says why)"},
		{"MCP unsupported before the checks it fails", with(func(j *judgement) {
			j.MCPUnsupported, j.MCPMessage, j.Checks, j.TokenSeen = true, "this CLI has no MCP client", failing, false
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonMCPUnsupported,
			"=this CLI has no MCP client; 1 of 2 checks failed: b"},
		{"MCP unsupported with passing checks", with(func(j *judgement) {
			j.MCPUnsupported, j.MCPMessage, j.TokenSeen = true, "this CLI has no MCP client", false
		}), harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonMCPUnsupported,
			"=this CLI has no MCP client"},
		{"checks before the token", with(func(j *judgement) { j.Checks, j.TokenSeen = failing, false }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureCheck, harnessv1.ReasonChecksFailed,
			"=1 of 2 checks failed: b"},
		{"token not seen", with(func(j *judgement) { j.TokenSeen, j.MCPMessage = false, "the token never appeared" }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureAgent, harnessv1.ReasonTokenNotSeen,
			"=the token never appeared"},
		{"a token without an MCP server is not asked for", with(func(j *judgement) { j.WantMCP, j.TokenSeen = false, false }),
			harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted,
			"=the agent finished and 2 checks passed"},
		{"the fallback passes, loudly", with(func(j *judgement) { j.Unsandboxed = true }),
			harnessv1.RunSucceeded, harnessv1.VerdictPass, "", harnessv1.ReasonCompleted,
			"=the agent finished and 2 checks passed; the MCP token was seen (UNSANDBOXED: see condition Sandboxed)"},
		{"the fallback fails, loudly", with(func(j *judgement) { j.Unsandboxed, j.Checks = true, failing }),
			harnessv1.RunSucceeded, harnessv1.VerdictFail, harnessv1.FailureCheck, harnessv1.ReasonChecksFailed,
			"=1 of 2 checks failed: b (UNSANDBOXED: see condition Sandboxed)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.in)
			if v.Phase != tc.phase || v.Verdict != tc.verdict || v.FailureClass != tc.class || v.Reason != tc.reason {
				t.Errorf("got %s/%s/%q/%s, want %s/%s/%q/%s", v.Phase, v.Verdict, v.FailureClass, v.Reason,
					tc.phase, tc.verdict, tc.class, tc.reason)
			}
			if want, whole := strings.CutPrefix(tc.message, "="); whole && v.Message != want {
				t.Errorf("message %q, want %q", v.Message, want)
			} else if !whole && !strings.Contains(v.Message, tc.message) {
				t.Errorf("message %q, want it to contain %q", v.Message, tc.message)
			}
		})
	}
}

// TestFailureCarriesItsReason: a step's typed failure becomes the
// outcome's reason and message, and keeps its cause for errors.Is.
func TestFailureCarriesItsReason(t *testing.T) {
	cause := errors.New("no such ConfigMap")
	err := fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be used: %w", cause))
	if !errors.Is(err, cause) {
		t.Errorf("%v does not wrap its cause", err)
	}
	out := failed(err)
	st := out.Status
	if st.Phase != harnessv1.RunFailed || st.Verdict != harnessv1.VerdictError || st.FailureClass != harnessv1.FailureInfrastructure ||
		st.Reason != harnessv1.ReasonBadFixture || st.Message != "the fixture cannot be used: no such ConfigMap" {
		t.Errorf("outcome %+v", st)
	}
	// A refusal by a HarnessPolicy judges nobody: no verdict, no class,
	// as when the controller refuses a run before binding it.
	refused := failed(fail(harnessv1.ReasonPolicyViolation, errors.New("refused by the namespace's HarnessPolicies"))).Status
	if refused.Phase != harnessv1.RunFailed || refused.Verdict != "" || refused.FailureClass != "" || refused.Reason != harnessv1.ReasonPolicyViolation {
		t.Errorf("a refusal: %+v", refused)
	}
	// An error no step typed is a bug of the executor, and says so.
	if st := failed(cause).Status; st.Reason != harnessv1.ReasonExecutorPanic || st.FailureClass != harnessv1.FailureInfrastructure {
		t.Errorf("an untyped error: %+v", st)
	}
}
