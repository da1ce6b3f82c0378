package v1alpha1

// Condition types of a HarnessSuite. Each is a metav1.Condition in
// status.conditions.
const (
	// SuiteConditionProgressing is True while the current round has runs to
	// create or runs unfinished; False once the round is complete (reason
	// RoundComplete), while it is suspended (reason Suspended) or when it
	// cannot go on (reason FixturesNotFound or RunsRefused).
	SuiteConditionProgressing = "Progressing"

	// SuiteConditionComplete is True once every run of the current round has
	// finished (reason RoundComplete); False (reason RoundInProgress) until
	// then. A new spec.revision sets it back to False.
	SuiteConditionComplete = "Complete"

	// SuiteConditionSuspended is True while spec.suspend is true (reason
	// Suspended): no run is created, the existing ones finish.
	SuiteConditionSuspended = "Suspended"

	// SuiteConditionFixtureChanged is True, as a warning, when a fixture
	// ConfigMap's content changed after the current round started using it
	// (reason FixtureChanged; the message names the fixtures). Runs created
	// before the change keep the hash they were created with, later ones
	// record the new one: the round mixes both. Change spec.revision for a
	// clean round.
	SuiteConditionFixtureChanged = "FixtureChanged"

	// SuiteConditionReconciling is kstatus' abnormal-true condition for
	// work under way: True while the current round has runs to create or to
	// finish and nothing stops it (the same as Progressing), so kstatus,
	// Flux and Argo CD see the suite as in progress. False once the round is
	// complete, suspended or stalled.
	SuiteConditionReconciling = "Reconciling"

	// SuiteConditionStalled is kstatus' abnormal-true condition for a suite
	// that cannot go on without a change from its author or the operator:
	// True when a fixture is missing (reason FixturesNotFound) or the API
	// server refused to create its runs (reason RunsRefused: an admission
	// policy, a quota, an invalid run template; the message quotes the
	// refusal). kstatus reports such a suite as Failed. False (reason
	// NotStalled) otherwise.
	SuiteConditionStalled = "Stalled"
)

// Reasons of a HarnessSuite's conditions.
const (
	// SuiteReasonRoundInProgress: the round has runs to create or to finish.
	SuiteReasonRoundInProgress = "RoundInProgress"
	// SuiteReasonRoundComplete: every run of the round finished.
	SuiteReasonRoundComplete = "RoundComplete"
	// SuiteReasonSuspended: spec.suspend is true.
	SuiteReasonSuspended = "Suspended"
	// SuiteReasonResumed: spec.suspend is false (the Suspended condition's
	// reason when False).
	SuiteReasonResumed = "Resumed"
	// SuiteReasonFixturesNotFound: a named fixture ConfigMap does not exist
	// (or lacks the label harnessfacts.io/fixture=true), the selector matches
	// none, or it matches more than 64; the message says which.
	SuiteReasonFixturesNotFound = "FixturesNotFound"
	// SuiteReasonFixtureChanged: a fixture's content changed mid-round.
	SuiteReasonFixtureChanged = "FixtureChanged"
	// SuiteReasonRunsRefused: the API server refused to create the suite's
	// runs (condition Stalled).
	SuiteReasonRunsRefused = "RunsRefused"
	// SuiteReasonNotStalled: nothing stops the suite (the Stalled
	// condition's reason when False).
	SuiteReasonNotStalled = "NotStalled"
	// SuiteReasonFixturesUnchanged: no fixture changed during the round (the
	// FixtureChanged condition's reason when False).
	SuiteReasonFixturesUnchanged = "FixturesUnchanged"
)
