package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HarnessPolicySpec is an operator's rules for the HarnessRuns and
// HarnessSuites of the namespaces it selects. Every rule is optional; an
// unset rule allows what the run asks. A run or suite that breaks a rule is
// refused at admission (the chart's harnessfacts-policy
// ValidatingAdmissionPolicy, with a message naming the policy and the rule);
// fairShare is a queue, not a refusal, kept by the controller's dispatch.
// Where several policies select a namespace, each applies: the strictest
// wins.
type HarnessPolicySpec struct {
	// namespaceSelector selects the namespaces this policy governs, by their
	// labels. An empty selector ({}) selects every namespace.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// isolation rules.
	// +optional
	Isolation *PolicyIsolation `json:"isolation,omitempty"`

	// network rules.
	// +optional
	Network *PolicyNetwork `json:"network,omitempty"`

	// limits are ceilings on the limits a run resolves (its own, else its
	// fixture's, else the default). A limit the run sets above a ceiling is
	// refused at admission; one its fixture sets above a ceiling ends the
	// run with PolicyViolation on its node; neither is ever silently cut. A
	// default above a ceiling, which nobody asked for, gives way to it
	// (status.limitSources of the run says so).
	// +optional
	Limits *PolicyLimits `json:"limits,omitempty"`

	// adapters, when set, are the only adapters runs may use.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	Adapters []Adapter `json:"adapters,omitempty"`

	// requiredNodeSelector pairs must be in every run's nodeSelector (for
	// example a node pool set aside for agents).
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	RequiredNodeSelector map[string]string `json:"requiredNodeSelector,omitempty"`

	// fairShare bounds what one namespace holds at once, so that one large
	// suite cannot starve every other team. Runs beyond it wait in Pending;
	// they are not refused.
	// +optional
	FairShare *PolicyFairShare `json:"fairShare,omitempty"`

	// spend bounds the tokens a namespace or a suite round may use (from
	// each run's status.usage). When a budget is used up, new runs of the
	// namespace (or round) wait in Pending (reason Spend, the message naming
	// the policy and the rule); running runs go on. The controller charges
	// a run's tokens to status.spent when the run ends, so deleting
	// finished runs does not give a budget back.
	// +optional
	Spend *PolicySpend `json:"spend,omitempty"`

	// gateway bounds what each run's model gateway forwards (the
	// node-agent's per-run proxy that holds the API key outside the
	// sandbox): requests and tokens per run, and the provider base URLs a
	// run may name.
	// +optional
	Gateway *PolicyGateway `json:"gateway,omitempty"`

	// pricing is the operator's price table: per model, the price of a
	// million input, output and cache tokens. When a run over the
	// namespace ends, its node-agent prices status.usage with it, before
	// the receipt is signed, into status.usage.estimatedCost. When several
	// policies over a namespace have one, the first by name is used.
	// +optional
	Pricing *PolicyPricing `json:"pricing,omitempty"`
}

// PolicyGateway are the model gateway's rules. Where several policies
// select a namespace, the smallest limit applies and a provider URL must be
// allowed by each that lists providers.
type PolicyGateway struct {
	// maxRequestsPerRun is the most model requests one run may send through
	// its gateway; the request beyond it ends the run (reason
	// GatewayRequestLimit, verdict Fail, class Agent).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxRequestsPerRun *int64 `json:"maxRequestsPerRun,omitempty"`

	// maxTokensPerRun is the most tokens (input, output and cache) the
	// provider may serve one run through its gateway; reaching it ends the
	// run (reason GatewayTokenLimit, verdict Fail, class Agent), as does an
	// answer that arrives whole without token figures, which the limit
	// could not hold.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxTokensPerRun *int64 `json:"maxTokensPerRun,omitempty"`

	// allowedProviders are the provider base URLs spec.agent.providerURL
	// may name: the same scheme, host and port, and a path at or below the
	// entry's ("https://llm.example.com/v1" allows
	// "https://llm.example.com/v1/team-a", not "https://llm.example.com").
	// Empty: any. A run without a providerURL uses its adapter's own
	// provider.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=atomic
	// +optional
	AllowedProviders []string `json:"allowedProviders,omitempty"`
}

// PolicyPricing is a price table in one currency.
type PolicyPricing struct {
	// currency is the prices' ISO 4217 code (USD, EUR, ...).
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	// +required
	Currency string `json:"currency"`

	// models are the prices, per model.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=model
	// +required
	Models []ModelPrice `json:"models"`
}

// ModelPrice is the price of one model's tokens, per million, as decimals
// ("3", "0.30").
type ModelPrice struct {
	// model is the model's name as the provider's replies name it
	// (status.usage.models), or a prefix ending in "*" that covers its
	// dated snapshots ("claude-sonnet-4-5*"). An exact name wins over a
	// prefix, a longer prefix over a shorter one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Model string `json:"model"`

	// input is the price of a million input tokens (cache excluded).
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +required
	Input string `json:"input"`

	// output is the price of a million output tokens.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +required
	Output string `json:"output"`

	// cacheRead is the price of a million tokens read from the provider's
	// cache; unset: the input price.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	CacheRead string `json:"cacheRead,omitempty"`

	// cacheWrite is the price of a million tokens written to the
	// provider's cache; unset: the input price.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	// +optional
	CacheWrite string `json:"cacheWrite,omitempty"`
}

// PolicyIsolation are the isolation rules of a HarnessPolicy.
type PolicyIsolation struct {
	// forbidFallback refuses runs with isolation.policy AllowFallback: every
	// agent runs sandboxed or not at all.
	// +optional
	ForbidFallback bool `json:"forbidFallback,omitempty"`
}

// PolicyNetwork are the network rules of a HarnessPolicy.
type PolicyNetwork struct {
	// forbidUnrestricted refuses runs with network.egress Unrestricted.
	// +optional
	ForbidUnrestricted bool `json:"forbidUnrestricted,omitempty"`

	// forbidProviderTools refuses runs with network.providerTools Allowed:
	// no provider reaches the network for an agent (hosted web search and
	// fetch, remote MCP servers).
	// +optional
	ForbidProviderTools bool `json:"forbidProviderTools,omitempty"`

	// allowedHosts, when set, are the only hosts a run may add: each of its
	// network.allowHosts entries and the host of agent.providerURL must be
	// one of them (an entry "host" allows every port of host; "host:port"
	// only that port). The adapters' own provider hosts are not affected.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$`
	// +listType=set
	// +optional
	AllowedHosts []string `json:"allowedHosts,omitempty"`

	// allowedSources, when set, are the only hosts the node-agent fetches a
	// run's files from: the host of fixture.git.url and the registries of
	// fixture.oci.ref and environment.image ("docker.io" for a reference
	// that names none) must each be one of them ("host" allows every port
	// of host; "host:port" only that port). The node-agent fetches from the
	// node's network, private addresses included: without the list a run
	// author may name any git server or registry it reaches. ConfigMap and
	// inline fixtures are not affected.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$`
	// +listType=set
	// +optional
	AllowedSources []string `json:"allowedSources,omitempty"`

	// insideHosts are names that may resolve to inside addresses (loopback,
	// private, link-local, CGNAT, the cluster's Pod and Service ranges,
	// metadata services), for example a company model gateway on a private
	// address. Egress ProviderOnly refuses every other connection to such an
	// address, judged on the address dialled; the one exception is a
	// loopback providerURL, on its exact port.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$`
	// +listType=set
	// +optional
	InsideHosts []string `json:"insideHosts,omitempty"`
}

// PolicyLimits are ceilings on a run's limits.
type PolicyLimits struct {
	// maxMemory is the most limits.memory may be.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('16Mi')) >= 0",message="limits.maxMemory must be at least 16Mi, the least limits.memory may be"
	// +optional
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`

	// maxEpisodeSeconds is the most limits.episodeSeconds may be.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxEpisodeSeconds *int32 `json:"maxEpisodeSeconds,omitempty"`

	// maxOutputBytes is the most limits.maxOutputBytes may be.
	// +kubebuilder:validation:Minimum=1024
	// +optional
	MaxOutputBytes *int64 `json:"maxOutputBytes,omitempty"`

	// maxDecisions is the most limits.maxDecisions may be.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxDecisions *int32 `json:"maxDecisions,omitempty"`

	// maxProbeSeconds is the most limits.probeSeconds may be: how long one
	// check (or MCP call) may hold its run's node slot.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxProbeSeconds *int32 `json:"maxProbeSeconds,omitempty"`

	// maxProcesses is the most limits.maxProcesses may be: the processes
	// (pids) one run may hold of its node's.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxProcesses *int32 `json:"maxProcesses,omitempty"`

	// maxArtifactBytes is the most limits.maxArtifactBytes may be: what one
	// run's artifacts may add to its evidence.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxArtifactBytes *int64 `json:"maxArtifactBytes,omitempty"`

	// maxDisk is the most limits.disk may be.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="limits.maxDisk must be at least 1Mi, the least limits.disk may be"
	// +optional
	MaxDisk *resource.Quantity `json:"maxDisk,omitempty"`
}

// PolicyFairShare bounds one namespace's share of the fleet.
type PolicyFairShare struct {
	// maxRunsInFlight is how many runs of one namespace may be bound to a
	// node (Scheduled or Running) at once. Each run holds one slot of its
	// node, so this is also the most slots the namespace holds. More runs
	// wait in Pending (reason FairShare in their message) until one ends.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxRunsInFlight *int32 `json:"maxRunsInFlight,omitempty"`
}

// PolicySpend are token budgets. A namespace's (or round's) spending is
// what status.spent charged it (runs that ended since the rule was set),
// plus the tokens its runs present in the namespace report that were not
// charged yet (runs in flight). A run is charged status.usage's total
// (input, output and cache tokens) once, when it ends, and so is its
// usage's later growth. Budgets are soft: runs already bound finish, and
// may go past them. A budget is charged from the tokens the run's model
// gateway counted, so that count must be whole: as under
// gateway.maxTokensPerRun, a run a budget governs ends (reason
// GatewayTokenLimit) when an answer's tokens could not be counted (it
// arrived whole without figures, or the agent cut one before its closing
// figures and asked again).
type PolicySpend struct {
	// namespaceTokens is the most tokens the runs of one namespace may use.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NamespaceTokens *int64 `json:"namespaceTokens,omitempty"`

	// suiteTokens is the most tokens the runs of one suite round may use
	// (a new round, spec.revision changed, starts at 0).
	// +kubebuilder:validation:Minimum=0
	// +optional
	SuiteTokens *int64 `json:"suiteTokens,omitempty"`
}

// HarnessPolicyStatus is what the controller counted against the policy.
type HarnessPolicyStatus struct {
	// spent are the tokens charged to this policy's spend rules, per
	// namespace, by the runs that ended while the policy had a spend rule.
	// Written by the controller only; an operator resets a namespace's
	// count by removing its entry (kubectl edit --subresource=status), or
	// by re-creating the policy.
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Spent []NamespaceSpend `json:"spent,omitempty"`
}

// NamespaceSpend are the tokens charged to one namespace.
type NamespaceSpend struct {
	// namespace is the namespace's name.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`
	// tokens are the tokens its ended runs used.
	// +kubebuilder:validation:Minimum=0
	// +required
	Tokens int64 `json:"tokens"`
	// suites are the tokens of each suite's latest charged round.
	// +listType=map
	// +listMapKey=suite
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Suites []SuiteSpend `json:"suites,omitempty"`
}

// SuiteSpend are the tokens charged to one round of a suite.
type SuiteSpend struct {
	// suite is the HarnessSuite's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Suite string `json:"suite"`
	// round is the round (the suite's status.round) the tokens are of.
	// +kubebuilder:validation:Minimum=0
	// +required
	Round int32 `json:"round"`
	// tokens are the tokens the round's ended runs used.
	// +kubebuilder:validation:Minimum=0
	// +required
	Tokens int64 `json:"tokens"`
}

// HarnessPolicy is a cluster operator's rules for the runs of the namespaces
// it selects: the one place where an operator says "never unsandboxed here"
// or "at most 4 GiB".
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=hfpolicy,categories=harnessfacts
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HarnessPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the policy's rules.
	// +required
	Spec HarnessPolicySpec `json:"spec"`

	// status is what the controller counted against the policy's spend
	// rules.
	// +optional
	Status HarnessPolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// HarnessPolicyList is a list of HarnessPolicies.
type HarnessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarnessPolicy `json:"items"`
}
