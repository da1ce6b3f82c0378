package v1alpha1

// Condition types of a HarnessRun. Each is a metav1.Condition in
// status.conditions.
const (
	// ConditionScheduled is True once the controller bound the run to a node;
	// its message names the node. While False (reason Unschedulable) its
	// message says in plain words why no node fits.
	ConditionScheduled = "Scheduled"

	// ConditionSandboxed is True when the agent ran in an OS sandbox (bwrap or
	// AppContainer); False (reason IsolationFallback) when it ran as a plain
	// child because the run's isolation policy allowed it.
	ConditionSandboxed = "Sandboxed"

	// ConditionMCPVerified is True when the agent called get_token and the
	// token appeared in its output or artifacts.
	ConditionMCPVerified = "MCPVerified"

	// ConditionChecksPassed is True when every fixture check passed.
	ConditionChecksPassed = "ChecksPassed"

	// ConditionReady is True when the run finished with verdict Pass. Its
	// reason and message say why a run is not (yet) ready.
	ConditionReady = "Ready"

	// ConditionFinished is True once the run reached a terminal phase
	// (Succeeded or Failed), whatever its verdict, so that
	// `kubectl wait --for=condition=Finished` waits for the end of a run.
	// Its reason is the verdict (Pass, Fail, Error), or the run's reason
	// when it ended without one (Cancelled, Deleted); its message is the
	// run's message. It is False (reason NotFinished) before.
	ConditionFinished = "Finished"

	// ConditionStalled is kstatus' Stalled condition, set True (with the
	// Finished reason) when a run ends without verdict Pass, so that kstatus
	// (Flux's health checks) reports a finished run Failed, as it does a
	// failed Job, instead of in progress (Ready=False) forever. It is not
	// set on a run that passed or has not finished.
	ConditionStalled = "Stalled"

	// ConditionStopRequested is True when the run must stop: spec.cancel was
	// set or the run is being deleted. See the cancel protocol below.
	ConditionStopRequested = "StopRequested"

	// ConditionEgressUnrestricted is True, as a warning, when the agent shared
	// the node's network (spec.network.egress Unrestricted).
	ConditionEgressUnrestricted = "EgressUnrestricted"
)

// Condition types of a HarnessNode.
const (
	// ConditionNodeReady is True while the node-agent heartbeats its Lease and
	// at least one sandbox mode passed preflight.
	ConditionNodeReady = "Ready"
)

// Reasons used in conditions and in status.reason.
const (
	// ReasonNotFinished: the run has not reached a terminal phase yet
	// (condition Finished).
	ReasonNotFinished = "NotFinished"
	// ReasonPending: the run waits for the controller.
	ReasonPending = "Pending"
	// ReasonUnschedulable: no node fits the run; the message says why.
	ReasonUnschedulable = "Unschedulable"
	// ReasonBound: the run is bound to the node named in the message.
	ReasonBound = "Bound"
	// ReasonRunning: the node-agent is executing the attempt.
	ReasonRunning = "Running"
	// ReasonCompleted: the run finished and its evidence was written.
	ReasonCompleted = "Completed"
	// ReasonChecksFailed: at least one fixture check failed.
	ReasonChecksFailed = "ChecksFailed"
	// ReasonAgentFailed: the agent exited non-zero or was killed by a signal.
	ReasonAgentFailed = "AgentFailed"
	// ReasonDiskLimitExceeded: the run dir was full (limits.disk, bytes or
	// files) when the agent exited; the verdict is Fail (class Agent), even
	// if the agent exited 0 after ignoring ENOSPC.
	ReasonDiskLimitExceeded = "DiskLimitExceeded"
	// ReasonTokenNotSeen: the fixture asked for MCP and the token never
	// appeared in the agent's output or artifacts.
	ReasonTokenNotSeen = "TokenNotSeen"
	// ReasonMCPUnsupported: the run asked for MCP and its adapter has none.
	ReasonMCPUnsupported = "MCPUnsupported"
	// ReasonDeadlineExceeded: the run did not finish within
	// limits.episodeSeconds plus the controller's grace period.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonNodeLost: the node's Lease expired while the run was on it.
	ReasonNodeLost = "NodeLost"
	// ReasonClaimTimeout: the run stayed Scheduled on a live node longer
	// than the controller's claim timeout; the attempt is retried like a
	// lost node's.
	ReasonClaimTimeout = "ClaimTimeout"
	// ReasonNodeAgentRestarted: the node-agent restarted during the attempt.
	// The restarted node-agent sets Ready=False with this reason on the run,
	// whose phase it leaves Running; the controller then ends the run (Failed,
	// class Infrastructure) or retries it while spec.retries allows.
	ReasonNodeAgentRestarted = "NodeAgentRestarted"
	// ReasonHandedBack: a node-agent that was shutting down (its pod
	// replaced by a helm upgrade, or deleted) stopped an attempt that could
	// not finish within its shutdown grace, removed its run dir, and handed
	// it back: it sets Ready=False with this reason on the run, whose phase
	// it leaves Running, and writes no verdict. The controller then sends
	// the run back to Pending for a new attempt (status.handedBack + 1),
	// which does not count against spec.retries (up to MaxHandBacks), with
	// this reason.
	ReasonHandedBack = "HandedBack"
	// ReasonDraining: on a HarnessNode, Ready=False with this reason says
	// its node-agent is shutting down: it claims no new run, lets its
	// attempts finish within its shutdown grace and hands back the others.
	// The node-agent that starts next on the node sets Ready again.
	ReasonDraining = "Draining"
	// ReasonRetrying: an infrastructure failure sent the run back to Pending
	// for another attempt (spec.retries).
	ReasonRetrying = "Retrying"
	// ReasonBadFixture: the fixture is missing, malformed or unsafe.
	ReasonBadFixture = "BadFixture"
	// ReasonFixtureUnavailable: the run's git or OCI fixture could not be
	// fetched or was refused: an unknown repository, artifact or commit, a
	// commit or digest that does not match the pin, refused credentials, a
	// source that does not answer. A fixture that was fetched but is
	// malformed or unsafe is BadFixture.
	ReasonFixtureUnavailable = "FixtureUnavailable"
	// ReasonEnvironmentUnavailable: the run's environment image could not be
	// pulled (a wrong digest, an unknown image, refused credentials), was
	// refused (too large, an entry leaving its root) or could not be
	// mounted on the node.
	ReasonEnvironmentUnavailable = "EnvironmentUnavailable"
	// ReasonCredentialsUnavailable: a selected Secret key could not be read.
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonSandboxUnavailable: no sandbox works on the node and the run's
	// isolation policy is Required.
	ReasonSandboxUnavailable = "SandboxUnavailable"
	// ReasonIsolationFallback: the agent ran as a plain child, unsandboxed.
	ReasonIsolationFallback = "IsolationFallback"
	// ReasonCancelled: spec.cancel stopped the run.
	ReasonCancelled = "Cancelled"
	// ReasonPolicyViolation: the run breaks a rule of a HarnessPolicy that
	// selects its namespace (the message names each). Admission refuses such
	// runs; the controller refuses, before binding, those admitted before
	// the policy was made or tightened; the node-agent refuses a run whose
	// fixture sets a limit above a ceiling (status.limitCeilings).
	ReasonPolicyViolation = "PolicyViolation"
	// ReasonDeleted: the run was deleted while it ran.
	ReasonDeleted = "Deleted"
	// ReasonStopped: the node-agent stopped the run after StopRequested (or
	// as it shut down), or a local run was interrupted (SIGINT, SIGTERM).
	ReasonStopped = "Stopped"
	// ReasonSandboxed: the agent ran in an OS sandbox (condition Sandboxed).
	ReasonSandboxed = "Sandboxed"
	// ReasonTokenSeen: the MCP token appeared in the agent's output or
	// artifacts (condition MCPVerified).
	ReasonTokenSeen = "TokenSeen"
	// ReasonChecksPassed: every fixture check passed (condition ChecksPassed).
	ReasonChecksPassed = "ChecksPassed"
	// ReasonEgressUnrestricted: the agent shared the node's network.
	ReasonEgressUnrestricted = "EgressUnrestricted"
	// ReasonEgressDenied: the egress proxy refused connections (a Warning
	// Event; status.network counts them).
	ReasonEgressDenied = "EgressDenied"
	// ReasonEgressProxyFailed: the run's egress proxy could not start or its
	// allow list is invalid.
	ReasonEgressProxyFailed = "EgressProxyFailed"
	// ReasonGatewayRequestLimit: the agent's model requests through the run's
	// model gateway reached HarnessPolicy gateway.maxRequestsPerRun; the agent
	// was killed (verdict Fail, class Agent).
	ReasonGatewayRequestLimit = "GatewayRequestLimit"
	// ReasonGatewayTokenLimit: the tokens the provider served through the
	// run's model gateway reached HarnessPolicy gateway.maxTokensPerRun, or
	// could not be counted under it or under a spend budget; the agent was
	// killed (verdict Fail, class Agent).
	ReasonGatewayTokenLimit = "GatewayTokenLimit"
	// ReasonProviderCertificateInvalid: the model provider's TLS certificate
	// did not verify in the run's model gateway; the agent was killed and
	// no request reached the provider over that connection (class
	// Infrastructure).
	ReasonProviderCertificateInvalid = "ProviderCertificateInvalid"
	// ReasonProviderUnavailable: the model provider still answered 5xx (or
	// could not be reached) after the gateway's retries at the agent's
	// last model requests, or rate-limited them for a minute and three
	// requests, with no answer since; the CLI had those answers and the
	// agent did not pass. The run is an infrastructure failure (class
	// Infrastructure): a new run (harnessfacts retry) may pass.
	ReasonProviderUnavailable = "ProviderUnavailable"
	// ReasonProviderRefusedCredential: the model provider refused the
	// run's credential or its account (401; 402; OpenAI's 429
	// insufficient_quota; Gemini's API_KEY_INVALID) at the agent's last
	// model requests, with no answer since; the CLI had those answers and
	// the agent did not pass. Class Infrastructure: the key, not the
	// agent, failed.
	ReasonProviderRefusedCredential = "ProviderRefusedCredential"
	// ReasonRunDirFailed: the run dir could not be prepared on the node.
	ReasonRunDirFailed = "RunDirFailed"
	// ReasonMCPServerFailed: the run's MCP token server could not start.
	ReasonMCPServerFailed = "MCPServerFailed"
	// ReasonRedactionFailed: the run's redactor could not be built.
	ReasonRedactionFailed = "RedactionFailed"
	// ReasonAdapterUnavailable: the node has no adapter for the run.
	ReasonAdapterUnavailable = "AdapterUnavailable"
	// ReasonAdapterFailed: the adapter could not prepare the run.
	ReasonAdapterFailed = "AdapterFailed"
	// ReasonAdapterNote: a Warning Event carrying one of status.agent.notes.
	ReasonAdapterNote = "AdapterNote"
	// ReasonExecutorPanic: the node-agent failed while executing the run.
	ReasonExecutorPanic = "ExecutorPanic"
	// ReasonHeartbeat: the node-agent's Lease is fresh.
	ReasonHeartbeat = "Heartbeat"
	// ReasonLeaseExpired: the node-agent's Lease expired.
	ReasonLeaseExpired = "LeaseExpired"
)

// RunFinalizer keeps a HarnessRun until its node-agent has stopped it and
// written what it knows. It is part of the cancel protocol, by which a run
// is stopped whatever its phase:
//
//  1. A user sets spec.cancel to true, or deletes the run (the finalizer
//     RunFinalizer holds it).
//  2. A run that is Pending or Scheduled (never claimed) is ended by the
//     controller: phase Failed, reason Cancelled (or Deleted).
//  3. For a Running run the controller sets condition StopRequested=True
//     with reason Cancelled or Deleted. The node-agent, which watches its
//     runs, kills the agent's process tree, still collects and writes what it
//     knows, and ends the run: phase Failed, reason Cancelled (or Deleted),
//     StopRequested keeps True, Ready=False with reason Stopped.
//  4. Once the run is terminal the controller removes RunFinalizer, so a
//     deleted run goes away only after its node-agent let go of it. If the
//     node is lost, node-loss handling ends the run instead.
const RunFinalizer = "harnessfacts.io/run-protection"
