package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels and annotations of a HarnessSuite's runs and fixtures.
const (
	// LabelFixture marks a ConfigMap as a fixture a HarnessSuite may use. The
	// controller watches only ConfigMaps with LabelFixture=true, so it never
	// caches the namespace's other ConfigMaps (nor the runs' evidence).
	LabelFixture = "harnessfacts.io/fixture"

	// LabelSuite is set on every run of a suite to the suite's name.
	LabelSuite = "harnessfacts.io/suite"
	// LabelSuiteRound is the round (status.round) the run belongs to.
	LabelSuiteRound = "harnessfacts.io/suite-round"
	// LabelSuiteAgent is the name of the run's agent in spec.agents.
	LabelSuiteAgent = "harnessfacts.io/suite-agent"
	// LabelSuiteFixture is the run's fixture ConfigMap name, when it fits in
	// a label value (63 characters); the run's spec.fixture.configMapRef
	// always names it.
	LabelSuiteFixture = "harnessfacts.io/suite-fixture"

	// AnnotationSuiteRepeat is the run's repeat index, from 0.
	AnnotationSuiteRepeat = "harnessfacts.io/suite-repeat"
	// AnnotationFixtureHash is "sha256:<hex>" of the fixture ConfigMap's
	// content when the suite created the run (see FixtureStatus.hash). The
	// run's status.evidence.fixtureDigest says what it really ran against.
	AnnotationFixtureHash = "harnessfacts.io/fixture-hash"
)

// MaxRoundRuns bounds a suite's round: agents × fixtures × repeats. The
// schema holds a suite that names its fixtures to it; one that selects them
// by label is held to it by the controller, once it knows how many match.
const MaxRoundRuns = 100000

// HarnessSuiteSpec is a matrix of agents × fixtures × repeats and how to run it.
// A round runs one matrix: agents, fixtures, repeats and template change only
// together with revision (which starts a new round); parallelism and suspend
// change at any time.
//
// +kubebuilder:validation:XValidation:rule="(has(self.revision) != has(oldSelf.revision) || (has(self.revision) && string(self.revision) != string(oldSelf.revision))) || (self.agents == oldSelf.agents && self.fixtures == oldSelf.fixtures && self.repeats == oldSelf.repeats && has(self.template) == has(oldSelf.template) && (!has(self.template) || self.template == oldSelf.template))",message="spec.agents, spec.fixtures, spec.repeats and spec.template change only together with spec.revision: a round runs one matrix (change spec.revision too, which starts a new round)"
// +kubebuilder:validation:XValidation:rule="size(self.agents) * (has(self.fixtures.names) ? size(self.fixtures.names) : 1) * self.repeats <= 100000",message="a round may have at most 100000 runs (agents × fixtures × repeats)"
type HarnessSuiteSpec struct {
	// agents are the agents to compare; each is a row of the matrix, named
	// for the status and the report.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +required
	Agents []SuiteAgent `json:"agents"`

	// fixtures are the columns of the matrix: ConfigMaps in the suite's
	// namespace that hold a fixture and carry the label
	// harnessfacts.io/fixture=true.
	// +required
	Fixtures SuiteFixtures `json:"fixtures"`

	// repeats is how many runs each agent × fixture cell gets per round.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Repeats int32 `json:"repeats,omitempty"`

	// parallelism is the most runs of the suite that exist unfinished at
	// once; the next run is created when one finishes.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Parallelism int32 `json:"parallelism,omitempty"`

	// template is copied into every run of the suite.
	// +optional
	Template SuiteRunTemplate `json:"template,omitempty"`

	// revision names the round: changing it (a string or a number, for
	// example a git commit or a counter) starts a new round. The runs of the
	// earlier round are deleted, their summary is kept in status.rounds.
	// +optional
	Revision intstr.IntOrString `json:"revision,omitempty"`

	// suspend, while true, stops the suite from creating runs; the runs that
	// exist go on to finish. Setting it back to false resumes the round.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SuiteAgent is one agent of a suite: a name and the agent spec its runs get.
type SuiteAgent struct {
	// name identifies the agent in the suite's status, labels and report.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// agent is the agent each run of this row gets, as in a HarnessRun's
	// spec.agent.
	// +required
	Agent AgentSpec `json:"agent"`
}

// SuiteFixtures selects the fixture ConfigMaps. Exactly one of selector and
// names is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.selector) != has(self.names)",message="set exactly one of fixtures.selector and fixtures.names"
type SuiteFixtures struct {
	// selector selects the fixture ConfigMaps by label (in addition to
	// harnessfacts.io/fixture=true). It must not be empty. At most 64
	// ConfigMaps may match.
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="fixtures.selector must not be empty: it would select every fixture ConfigMap of the namespace"
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// names lists the fixture ConfigMaps by name.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	Names []string `json:"names,omitempty"`
}

// SuiteRunTemplate is what every run of a suite gets besides its agent and
// fixture. Each field is the HarnessRun field of the same name. It has no
// ttlSecondsAfterFinished: a suite's runs live until the suite or their
// round goes, because the suite's status and report are made from them.
type SuiteRunTemplate struct {
	// prompt overrides each fixture's prompt.
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="must not hold a NUL byte: it would end the prompt where the agent receives it"
	// +optional
	Prompt string `json:"prompt,omitempty"`

	// mcp overrides the fixtures' MCP settings.
	// +optional
	MCP *MCPSpec `json:"mcp,omitempty"`

	// network says what the agents may reach.
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// isolation says what happens when a node cannot sandbox an agent.
	// +optional
	Isolation *IsolationSpec `json:"isolation,omitempty"`

	// limits bound each run.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// nodeSelector restricts the runs to HarnessNodes with these labels.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// retries is each run's number of retries after an infrastructure
	// failure.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	Retries int32 `json:"retries,omitempty"`
}

// SuiteCounts counts runs of a round by phase and verdict.
type SuiteCounts struct {
	// total is the number of runs the round has: agents × fixtures × repeats.
	// +optional
	Total int32 `json:"total"`
	// created is the number of runs created so far.
	// +optional
	Created int32 `json:"created"`
	// pending counts runs Pending or Scheduled.
	// +optional
	Pending int32 `json:"pending"`
	// running counts runs Running.
	// +optional
	Running int32 `json:"running"`
	// finished counts runs in a terminal phase.
	// +optional
	Finished int32 `json:"finished"`
	// passed counts finished runs with verdict Pass.
	// +optional
	Passed int32 `json:"passed"`
	// failed counts finished runs with verdict Fail.
	// +optional
	Failed int32 `json:"failed"`
	// errored counts finished runs with verdict Error, or none (cancelled).
	// They are left out of the pass rate: the harness could not judge the
	// agent.
	// +optional
	Errored int32 `json:"errored"`
}

// SuiteCell is one agent × fixture cell of the current round.
type SuiteCell struct {
	// agent is the agent's name in spec.agents.
	// +kubebuilder:validation:MaxLength=40
	// +required
	Agent string `json:"agent"`
	// fixture is the fixture ConfigMap's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Fixture string `json:"fixture"`
	// n is the number of judged runs: passed + failed.
	// +optional
	N int32 `json:"n"`
	// passed counts runs with verdict Pass.
	// +optional
	Passed int32 `json:"passed"`
	// failed counts runs with verdict Fail.
	// +optional
	Failed int32 `json:"failed"`
	// errored counts finished runs with verdict Error or none.
	// +optional
	Errored int32 `json:"errored"`
	// unfinished counts the cell's runs not yet finished or not yet created.
	// +optional
	Unfinished int32 `json:"unfinished"`
	// passRate is passed / n as a percentage with one decimal ("85.0%"),
	// empty while n is 0.
	// +kubebuilder:validation:MaxLength=8
	// +optional
	PassRate string `json:"passRate,omitempty"`
	// fixtureHashes are the distinct fixture hashes the cell's runs were
	// created with; more than one means the fixture changed mid-round.
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	// +optional
	FixtureHashes []string `json:"fixtureHashes,omitempty"`
	// inputTokens, outputTokens and cacheTokens (reads and writes) sum the
	// status.usage of the cell's finished runs that had figures
	// (countedRuns); uncountedRuns finished without any (usage source None).
	// partlyCountedRuns are the counted runs whose figures are a lower
	// bound: the gateway read none from some of their answers
	// (status.usage.uncountedResponses).
	// +kubebuilder:validation:Minimum=0
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	CacheTokens int64 `json:"cacheTokens,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	CountedRuns int32 `json:"countedRuns,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	UncountedRuns int32 `json:"uncountedRuns,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartlyCountedRuns int32 `json:"partlyCountedRuns,omitempty"`
	// rewardN counts the cell's finished runs that reported a reward
	// (status.reward, from a Harbor-style verifier).
	// +optional
	RewardN int32 `json:"rewardN,omitempty"`
	// rewardMean is the mean of those rewards, empty while rewardN is 0.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	RewardMean string `json:"rewardMean,omitempty"`
	// rewardInterval is the 95% confidence interval of the mean
	// ("[low, high]", Student's t), empty while rewardN is below 2.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	RewardInterval string `json:"rewardInterval,omitempty"`
}

// FixtureStatus is one fixture ConfigMap as the suite last saw it.
type FixtureStatus struct {
	// name is the ConfigMap's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// hash is "sha256:<hex>" over the ConfigMap's data and binaryData, keys
	// sorted: the same content gives the same hash in every round.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	Hash string `json:"hash,omitempty"`
	// roundHash is the hash the fixture had when the round first used it.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	RoundHash string `json:"roundHash,omitempty"`
	// changedInRound is true when the fixture's content changed after the
	// round started using it: runs created since get the new content.
	// +optional
	ChangedInRound bool `json:"changedInRound,omitempty"`
	// unchangedSincePreviousRound is true when the fixture's content is what
	// the previous round used.
	// +optional
	UnchangedSincePreviousRound bool `json:"unchangedSincePreviousRound,omitempty"`
}

// RoundSummary is what a finished or superseded round came to.
type RoundSummary struct {
	// round is the round's number.
	// +required
	Round int32 `json:"round"`
	// revision is spec.revision during the round.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Revision string `json:"revision,omitempty"`
	// startTime is when the round started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the round's last run finished; unset for a
	// round superseded before it completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// counts are the round's last counts.
	// +optional
	Counts SuiteCounts `json:"counts,omitempty"`
	// passRate is passed / (passed + failed) of the round, as in status.
	// +kubebuilder:validation:MaxLength=8
	// +optional
	PassRate string `json:"passRate,omitempty"`
	// fixtureHashes maps each fixture to the hash the round used.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	FixtureHashes map[string]string `json:"fixtureHashes,omitempty"`
}

// HarnessSuiteStatus is how the current round is going.
type HarnessSuiteStatus struct {
	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// round counts the rounds, from 1; it goes up when spec.revision changes.
	// Runs carry it in the label harnessfacts.io/suite-round.
	// +optional
	Round int32 `json:"round,omitempty"`

	// revision is spec.revision of the current round.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Revision string `json:"revision,omitempty"`

	// progress is "finished/total" of the current round, e.g. "37/120".
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Progress string `json:"progress,omitempty"`

	// passRate is passed / (passed + failed) of the current round as a
	// percentage ("85.0%"), empty while no run was judged.
	// +kubebuilder:validation:MaxLength=8
	// +optional
	PassRate string `json:"passRate,omitempty"`

	// counts count the current round's runs by phase and verdict.
	// +optional
	Counts SuiteCounts `json:"counts,omitempty"`

	// cells are the agent × fixture cells of the current round, in the order
	// of spec.agents, then by fixture name.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Cells []SuiteCell `json:"cells,omitempty"`

	// fixtures are the fixture ConfigMaps of the current round.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Fixtures []FixtureStatus `json:"fixtures,omitempty"`

	// startTime is when the current round started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the current round's last run finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// rounds are the summaries of the earlier rounds, newest first, at most
	// 10.
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Rounds []RoundSummary `json:"rounds,omitempty"`

	// conditions: Progressing, Complete, Suspended, kstatus' Reconciling
	// and Stalled, and the warning FixtureChanged.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// HarnessSuite runs a matrix of agents × fixtures × repeats as HarnessRuns it
// owns, at most spec.parallelism at a time, and sums up their verdicts per
// agent × fixture cell. A new spec.revision starts a new round.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="a HarnessSuite's name may have at most 52 characters: its runs are named <suite>-<10 hex digits>, at most 63"
// +kubebuilder:resource:shortName=hfsuite,categories=harnessfacts
// +kubebuilder:printcolumn:name="Round",type=integer,JSONPath=`.status.round`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Pass Rate",type=string,JSONPath=`.status.passRate`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Suspended",type=string,JSONPath=`.status.conditions[?(@.type=="Suspended")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HarnessSuite struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the matrix and how to run it.
	// +required
	Spec HarnessSuiteSpec `json:"spec"`

	// status is how the current round is going, written by the controller.
	// Until its first write the API server shows observedGeneration 0 (a
	// default), so that kstatus (Flux's health checks) sees a suite the
	// controller has not reconciled yet as InProgress, not Current.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status HarnessSuiteStatus `json:"status,omitempty"`
}

// HarnessSuiteList is a list of HarnessSuites.
//
// +kubebuilder:object:root=true
type HarnessSuiteList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarnessSuite `json:"items"`
}
