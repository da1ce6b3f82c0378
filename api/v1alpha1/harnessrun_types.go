package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Adapter names the agent CLI a run drives.
// +kubebuilder:validation:Enum=codex;claude-code;gemini;opencode;aider;antigravity;exec;oracle
type Adapter string

// The adapters a HarnessRun may name.
const (
	AdapterCodex       Adapter = "codex"
	AdapterClaudeCode  Adapter = "claude-code"
	AdapterGemini      Adapter = "gemini"
	AdapterOpenCode    Adapter = "opencode"
	AdapterAider       Adapter = "aider"
	AdapterAntigravity Adapter = "antigravity"
	AdapterExec        Adapter = "exec"
	// AdapterOracle runs the fixture's own solution (fixture.yaml
	// solution:, Harbor's solution/solve.sh) instead of an agent, in the
	// same sandbox, to validate the fixture: its checks should pass. The
	// solution is hidden from every run but an oracle's.
	AdapterOracle Adapter = "oracle"
)

// Adapters lists every adapter, in the order documentation shows them.
var Adapters = []Adapter{AdapterCodex, AdapterClaudeCode, AdapterGemini, AdapterOpenCode, AdapterAider, AdapterAntigravity, AdapterExec, AdapterOracle}

// CredentialFile names a credential file an adapter knows how to place.
// +kubebuilder:validation:Enum=CodexAuth;ClaudeCredentials;OpenCodeAuth
type CredentialFile string

// The credential files adapters know.
const (
	// CredentialFileCodexAuth is Codex's login file, placed as auth.json in a
	// temporary CODEX_HOME. Only the codex adapter accepts it.
	CredentialFileCodexAuth CredentialFile = "CodexAuth"
	// CredentialFileClaudeCredentials is Claude Code's .credentials.json,
	// placed in its isolated config dir. Only the claude-code adapter accepts it.
	CredentialFileClaudeCredentials CredentialFile = "ClaudeCredentials"
	// CredentialFileOpenCodeAuth is OpenCode's auth.json, placed under its
	// isolated data dir. Only the opencode adapter accepts it.
	CredentialFileOpenCodeAuth CredentialFile = "OpenCodeAuth"
)

// MCPTransport says how the agent reaches the run's MCP token server.
// +kubebuilder:validation:Enum=None;HTTP;Stdio
type MCPTransport string

// The MCP transports.
const (
	MCPTransportNone  MCPTransport = "None"
	MCPTransportHTTP  MCPTransport = "HTTP"
	MCPTransportStdio MCPTransport = "Stdio"
)

// Egress says what the sandboxed agent may reach over the network.
// +kubebuilder:validation:Enum=ProviderOnly;None;Unrestricted
type Egress string

// The egress modes.
const (
	// EgressProviderOnly lets the agent reach only its model provider's hosts,
	// spec.network.allowHosts and the run's MCP server, through a per-run proxy.
	EgressProviderOnly Egress = "ProviderOnly"
	// EgressNone gives the agent no network at all.
	EgressNone Egress = "None"
	// EgressUnrestricted shares the node's network with the agent. The run
	// carries a warning condition and Event saying so.
	EgressUnrestricted Egress = "Unrestricted"
)

// ProviderTools says whether the model gateway forwards requests that ask
// the provider to reach the network for the agent.
// +kubebuilder:validation:Enum=Refused;Allowed
type ProviderTools string

// The provider-tools settings.
const (
	// ProviderToolsRefused: such a request gets 403 from the gateway.
	ProviderToolsRefused ProviderTools = "Refused"
	// ProviderToolsAllowed: the gateway forwards them.
	ProviderToolsAllowed ProviderTools = "Allowed"
)

// IsolationPolicy says what happens when the node cannot sandbox the agent.
// +kubebuilder:validation:Enum=Required;AllowFallback
type IsolationPolicy string

// The isolation policies.
const (
	// IsolationRequired: no sandbox, no run. The run fails with class
	// Infrastructure instead of running the agent unsandboxed.
	IsolationRequired IsolationPolicy = "Required"
	// IsolationAllowFallback lets the agent run as a plain child process with
	// only the allow-listed environment when no sandbox works, with a loud
	// warning condition and Event.
	IsolationAllowFallback IsolationPolicy = "AllowFallback"
)

// HarnessRunSpec is what to run, against what, and within which bounds. It
// cannot change after creation, except cancel and ttlSecondsAfterFinished.
//
// +kubebuilder:validation:XValidation:rule="self.agent == oldSelf.agent",message="spec.agent is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="self.fixture == oldSelf.fixture",message="spec.fixture is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.mcp) == has(oldSelf.mcp) && (!has(self.mcp) || self.mcp == oldSelf.mcp)",message="spec.mcp is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.network) == has(oldSelf.network) && (!has(self.network) || self.network == oldSelf.network)",message="spec.network is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.isolation) == has(oldSelf.isolation) && (!has(self.isolation) || self.isolation == oldSelf.isolation)",message="spec.isolation is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.limits) == has(oldSelf.limits) && (!has(self.limits) || self.limits == oldSelf.limits)",message="spec.limits is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.nodeSelector) == has(oldSelf.nodeSelector) && (!has(self.nodeSelector) || self.nodeSelector == oldSelf.nodeSelector)",message="spec.nodeSelector is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="has(self.retries) == has(oldSelf.retries) && (!has(self.retries) || self.retries == oldSelf.retries)",message="spec.retries is immutable: create a new HarnessRun instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false once a run is cancelled"
// +kubebuilder:validation:XValidation:rule="has(self.environment) == has(oldSelf.environment) && (!has(self.environment) || self.environment == oldSelf.environment)",message="spec.environment is immutable: create a new HarnessRun instead"
type HarnessRunSpec struct {
	// agent is the coding agent to run and the credentials it may use.
	// +required
	Agent AgentSpec `json:"agent"`

	// fixture is where the task's files come from. Exactly one source is set.
	// +required
	Fixture FixtureSource `json:"fixture"`

	// mcp overrides how the agent reaches the run's MCP token server. When
	// omitted, the fixture's choice applies.
	// +optional
	MCP *MCPSpec `json:"mcp,omitempty"`

	// environment is the OCI image whose file system becomes the sandbox's
	// root for the agent and the checks (a Terminal-Bench task's image),
	// with a throwaway writable layer over it. When omitted, the fixture's
	// fixture.yaml environment: applies; when neither names one, the agent
	// runs over the node's own root file system, read-only, as before.
	// +optional
	Environment *EnvironmentSpec `json:"environment,omitempty"`

	// network says what the agent may reach.
	// +kubebuilder:default={}
	// +optional
	Network NetworkSpec `json:"network,omitempty"`

	// isolation says what happens when the node cannot sandbox the agent.
	// +kubebuilder:default={}
	// +optional
	Isolation IsolationSpec `json:"isolation,omitempty"`

	// limits bound the run's time, memory, disk, processes, decisions and
	// output. A limit left unset is the fixture's, else the API's default;
	// status.limits says what applied and status.limitSources where each
	// came from.
	//
	// The empty default fills no limit: it is here because a Go client
	// always sends limits (a struct is never omitted), and the rule that
	// spec.limits is immutable compares has(limits) before and after.
	// +kubebuilder:default={}
	// +optional
	Limits Limits `json:"limits,omitempty"`

	// nodeSelector restricts the run to HarnessNodes whose labels (mirrored
	// from their Node) match every pair.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// retries is how many times the run goes back to Pending after an
	// infrastructure failure (its node lost, its node-agent restarted).
	// An agent's own failure, a timeout or a failed check is never retried.
	// An attempt handed back by a node-agent that was shutting down (status.handedBack)
	// is scheduled again without using a retry.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	Retries int32 `json:"retries,omitempty"`

	// ttlSecondsAfterFinished deletes the run (and its evidence) this many
	// seconds after it finished. When omitted, finished runs are kept. It may
	// be changed after creation.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// cancel, once set to true, stops the run: a run not yet started ends at
	// once, a running one is stopped by its node-agent, which still records
	// what it knows. It cannot be set back to false.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// AgentSpec names the agent CLI and what it receives.
//
// +kubebuilder:validation:XValidation:rule="self.adapter != 'exec' || (has(self.command) && size(self.command) > 0)",message="agent.command is required when agent.adapter is exec"
// +kubebuilder:validation:XValidation:rule="self.adapter == 'exec' || !has(self.command)",message="agent.command is only allowed with agent.adapter exec: the other adapters build their own command line (use agent.extraArgs to add flags)"
// +kubebuilder:validation:XValidation:rule="!has(self.command) || size(self.command) == 0 || size(self.command[0]) > 0",message="agent.command[0], the program to run, must not be empty"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || self.credentials.all(c, !has(c.file) || c.file != 'CodexAuth' || self.adapter == 'codex')",message="credential file CodexAuth is only accepted by the codex adapter"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || self.credentials.all(c, !has(c.file) || c.file != 'ClaudeCredentials' || self.adapter == 'claude-code')",message="credential file ClaudeCredentials is only accepted by the claude-code adapter"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || self.credentials.all(c, !has(c.file) || c.file != 'OpenCodeAuth' || self.adapter == 'opencode')",message="credential file OpenCodeAuth is only accepted by the opencode adapter"
// +kubebuilder:validation:XValidation:rule="!has(self.providerURL) || self.adapter == 'exec' || self.adapter == 'oracle' || !self.providerURL.matches('[?#]')",message="agent.providerURL must be a base URL without a query or fragment: each CLI appends its API's path to it (a query such as ?api-version= ended up inside the path of every request)"
type AgentSpec struct {
	// adapter is the agent CLI: codex, claude-code, gemini, opencode, aider,
	// antigravity, or exec for any command given in agent.command.
	// +required
	Adapter Adapter `json:"adapter"`

	// version pins the CLI version the run needs; only nodes whose
	// HarnessNode reports that version of the adapter are chosen.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`

	// model is the model the CLI is asked to use; the CLI's default when empty.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="must not hold a NUL byte: it would end the model name where the agent receives it"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('[\\x01-\\x1f\\x7f-\\x9f]')`,message="must not hold a control character: a model name has none, and a terminal escape in it reached whoever described the run"
	// +optional
	Model string `json:"model,omitempty"`

	// command is the argv of the exec adapter (required with it, forbidden
	// with the others). It runs in the sandbox with the fixture's workspace as
	// its working directory and the prompt in HARNESSFACTS_PROMPT. Never put a
	// secret here: command lines are world-readable on a node.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self.all(a, !a.contains('\u0000'))`,message="must not hold a NUL byte: it would end the argument where the agent receives it"
	// +listType=atomic
	// +optional
	Command []string `json:"command,omitempty"`

	// extraArgs are appended to the argv the adapter builds.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self.all(a, !a.contains('\u0000'))`,message="must not hold a NUL byte: it would end the argument where the agent receives it"
	// +listType=atomic
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`

	// providerURL points the CLI at another model provider endpoint (for
	// example a scripted provider in tests, or a company gateway): its root,
	// to which each CLI adds the API's version and path (/v1/messages,
	// /v1/responses, /v1beta/models/...). A URL written as an SDK's base URL,
	// ending in /v1 or /v1beta, is given to the CLI without that last segment,
	// and status.agent.notes says so (not for exec and oracle, whose
	// commands get it as written). Its host is added to the hosts the agent
	// may reach. It has no query or fragment (but for exec and oracle):
	// each CLI appends its API's path after it.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="agent.providerURL must be an absolute http or https URL"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || url(self).getHostname() != ''",message="agent.providerURL must name a host"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*:(0*|[0-9]{6,}|6553[6-9]|655[4-9][0-9]|65[6-9][0-9][0-9]|6[6-9][0-9][0-9][0-9]|[7-9][0-9][0-9][0-9][0-9])([/?#].*)?$')",message="agent.providerURL's port must be 1 to 65535"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@')",message="agent.providerURL must not carry a user or password: it reaches the agent as written; give the key as a credential"
	// +optional
	ProviderURL string `json:"providerURL,omitempty"`

	// credentials are the Secret keys the agent may use, each delivered
	// exactly one way. Nothing else of the node's environment or files
	// reaches the agent.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.env) || self.exists_one(d, has(d.env) && d.env == c.env))",message="each credential env name may appear only once"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.file) || self.exists_one(d, has(d.file) && d.file == c.file))",message="each credential file may appear only once"
	// +listType=atomic
	// +optional
	Credentials []Credential `json:"credentials,omitempty"`
}

// Credential is one Secret key handed to the agent, as an environment
// variable or as a file the adapter knows.
//
// +kubebuilder:validation:XValidation:rule="has(self.env) != has(self.file)",message="each credential is delivered exactly one way: set env or file, not both and not neither"
type Credential struct {
	// secretKeyRef selects the key of a Secret in the run's namespace.
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`

	// env delivers the value as this environment variable (for example
	// OPENAI_API_KEY). Names the harness sets itself (PATH, HOME, TMPDIR,
	// XDG_*, HARNESSFACTS_*, proxy settings) are refused.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'TMPDIR', 'TMP', 'TEMP', 'PWD', 'LANG', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'no_proxy', 'all_proxy', 'NODE_OPTIONS', 'BASH_ENV', 'ENV', 'GCONV_PATH']) && !self.startsWith('LD_') && !self.startsWith('XDG_') && !self.startsWith('HARNESSFACTS_') && !self.startsWith('LC_')",message="this environment variable is set by the harness and cannot carry a credential"
	// +optional
	Env string `json:"env,omitempty"`

	// file delivers the value as a credential file the adapter knows:
	// CodexAuth (codex), ClaudeCredentials (claude-code) or OpenCodeAuth
	// (opencode).
	// +optional
	File CredentialFile `json:"file,omitempty"`
}

// SecretKeySelector selects one key of a Secret in the run's namespace.
type SecretKeySelector struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key is the key within the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// FixtureSource says where a fixture's files come from. Exactly one source
// is set. A fixture is a fixture.yaml (prompt, MCP transport, artifacts,
// checks, limits) and a workspace/ folder the agent works in.
//
// +kubebuilder:validation:XValidation:rule="(has(self.configMapRef) ? 1 : 0) + (has(self.inline) ? 1 : 0) + (has(self.git) ? 1 : 0) + (has(self.oci) ? 1 : 0) == 1",message="exactly one fixture source must be set: fixture.configMapRef, fixture.inline, fixture.git or fixture.oci"
type FixtureSource struct {
	// configMapRef names a ConfigMap in the run's namespace holding the
	// fixture, as kustomize's configMapGenerator makes it from a fixture
	// folder.
	// +optional
	ConfigMapRef *ConfigMapFixture `json:"configMapRef,omitempty"`

	// inline holds the fixture's files in the run itself, for small fixtures.
	// +optional
	Inline *InlineFixture `json:"inline,omitempty"`

	// git fetches the fixture from a git repository at a pinned commit: a
	// fixture bigger than a ConfigMap, or a repository at a commit (a
	// SWE-bench task). The node-agent fetches it, checks that the commit it
	// reads is the one pinned, and keeps it in its node's cache by commit.
	// +optional
	Git *GitFixture `json:"git,omitempty"`

	// oci pulls the fixture as an OCI artifact pinned by digest (one tar
	// layer of media type FixtureLayerMediaType, see docs/fixtures.md and
	// `harnessfacts fixture push`). The node-agent checks the digest and
	// keeps it in its node's cache by digest.
	// +optional
	OCI *OCIFixture `json:"oci,omitempty"`

	// prompt overrides the fixture's prompt.
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="must not hold a NUL byte: it would end the prompt where the agent receives it"
	// +optional
	Prompt string `json:"prompt,omitempty"`
}

// ConfigMapFixture names a ConfigMap that holds a fixture.
type ConfigMapFixture struct {
	// name is the ConfigMap's name, in the run's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// InlineFixture is a fixture carried in the run.
//
// +kubebuilder:validation:XValidation:rule="'fixture.yaml' in self.files",message="an inline fixture needs a fixture.yaml entry in fixture.inline.files"
type InlineFixture struct {
	// files maps a relative slash-separated path (fixture.yaml,
	// workspace/main.go, ...) to the file's content.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(p, size(p) <= 512 && !p.startsWith('/') && !p.endsWith('/') && !p.split('/').exists(s, s == '..' || s == '.' || s == ''))",message="fixture.inline.files keys must be relative paths of at most 512 characters without '.', '..' or empty segments"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !p.matches(r'[\\x00-\\x1f\\x7f\\\\:]'))",message="fixture.inline.files keys must not hold control characters, '\\' or ':'"
	// +kubebuilder:validation:XValidation:rule="!('workspace' in self)",message="fixture.inline.files: workspace is the agent's folder, not a file; name its files workspace/..."
	// +kubebuilder:validation:XValidation:rule="self.all(p, p.split('/').all(s, size(bytes(s)) <= 255))",message="fixture.inline.files keys: each file or folder name may have at most 255 bytes (the file system's limit)"
	// +required
	Files map[string]string `json:"files"`
}

// GitFixture is a fixture in a git repository, at a pinned commit.
//
// +kubebuilder:validation:XValidation:rule="!has(self.secretRef) || url(self.url).getScheme() == 'https' || url(self.url).getHostname() in ['localhost', '127.0.0.1', '::1']",message="fixture.git.secretRef needs an https URL: credentials are never sent over plain http (except to a loopback address)"
type GitFixture struct {
	// url is the repository's http or https URL. It carries no user name
	// or password: credentials come from secretRef.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="fixture.git.url must be an absolute http or https URL"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="fixture.git.url must not carry credentials (user@ or user:password@): use fixture.git.secretRef"
	// +required
	URL string `json:"url"`

	// commit is the full SHA-1 of the commit to use, 40 lower-case hex
	// digits. A branch or tag name is refused: it can move under a run.
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{40}$')",message="fixture.git.commit must be a full commit SHA (40 lower-case hex digits), not a branch, tag or short SHA: those can change under a run"
	// +required
	Commit string `json:"commit"`

	// path is the fixture's folder within the repository (where its
	// fixture.yaml is); the repository's root when empty.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.split('/').exists(s, s == '..' || s == '.' || s == '')",message="fixture.git.path must be a relative path without '.', '..' or empty segments"
	// +optional
	Path string `json:"path,omitempty"`

	// secretRef names a Secret in the run's namespace with the keys
	// username and password (a kubernetes.io/basic-auth Secret) sent to
	// the repository with HTTP basic authentication. For a token, put it
	// in password and any non-empty user name (x-access-token, oauth2)
	// in username. The node-agent reads the two keys through the
	// controller's run source while the run is active.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// OCIFixture is a fixture pushed as an OCI artifact.
type OCIFixture struct {
	// ref is the artifact, pinned by digest:
	// registry/repository[:tag]@sha256:<64 hex digits>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._:/-][a-zA-Z0-9_.-]+)*@sha256:[a-f0-9]{64}$')",message="fixture.oci.ref must be pinned by digest (registry/repository[:tag]@sha256:<64 hex digits>): a tag alone can change under a run"
	// +required
	Ref string `json:"ref"`

	// imagePullSecrets name Secrets of type kubernetes.io/dockerconfigjson
	// in the run's namespace, as spec.environment.imagePullSecrets do.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// The OCI artifact of a fixture: its manifest's artifactType, its config's
// media type (the empty descriptor of the OCI image spec) and the media
// type of its one layer, a tar of the fixture folder, gzip-compressed.
const (
	FixtureArtifactType   = "application/vnd.harnessfacts.fixture.v1"
	FixtureLayerMediaType = "application/vnd.harnessfacts.fixture.v1.tar+gzip"
)

// FixtureSourceStatus says where an attempt's fixture came from.
type FixtureSourceStatus struct {
	// type is ConfigMap, Inline, Git or OCI.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	Type string `json:"type,omitempty"`

	// url is the git repository's URL (Git).
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`

	// commit is the commit the node-agent read and checked (Git).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Commit string `json:"commit,omitempty"`

	// path is the fixture's folder in the repository (Git).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Path string `json:"path,omitempty"`

	// ref is the OCI artifact's reference (OCI).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Ref string `json:"ref,omitempty"`

	// digest is the artifact manifest's digest the node-agent pulled and
	// checked (OCI).
	// +kubebuilder:validation:MaxLength=71
	// +optional
	Digest string `json:"digest,omitempty"`

	// cached is true when the node's fixture cache held the fixture
	// already (the source was still asked, with the run's credentials,
	// whether the run may read it).
	// +optional
	Cached bool `json:"cached,omitempty"`
}

// EnvironmentImagePattern is what spec.environment.image must look like: a
// reference pinned by digest (repository@sha256:<64 hex>), with an optional
// tag before the digest that only documents it. A tag alone can change under
// a run; a digest cannot.
const EnvironmentImagePattern = `^[a-z0-9]+([._:/-][a-zA-Z0-9_.-]+)*@sha256:[a-f0-9]{64}$`

// EnvironmentSpec is a run's environment image.
type EnvironmentSpec struct {
	// image is the image, pinned by digest:
	// registry/repository[:tag]@sha256:<64 hex digits>. The node-agent pulls
	// it, checks the digest, and unpacks it once into its node cache.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._:/-][a-zA-Z0-9_.-]+)*@sha256:[a-f0-9]{64}$')",message="environment.image must be pinned by digest (registry/repository[:tag]@sha256:<64 hex digits>): a tag alone can change under a run"
	// +required
	Image string `json:"image"`

	// imagePullSecrets name Secrets of type kubernetes.io/dockerconfigjson
	// in the run's namespace, as a Pod's do. The node-agent reads their
	// .dockerconfigjson key through the controller's run source while the
	// run is active; it holds no right to read Secrets itself.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// LocalObjectReference names an object in the run's namespace.
type LocalObjectReference struct {
	// name is the object's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// MCPSpec overrides the fixture's MCP settings.
type MCPSpec struct {
	// transport is how the agent reaches the MCP token server: None, HTTP
	// (a loopback URL) or Stdio (a command the agent starts).
	// +required
	Transport MCPTransport `json:"transport"`
}

// NetworkSpec says what the agent may reach.
type NetworkSpec struct {
	// egress is ProviderOnly (default: the adapter's provider hosts,
	// allowHosts and the MCP server, through a per-run proxy), None, or
	// Unrestricted (the node's network; reported loudly).
	// +kubebuilder:default=ProviderOnly
	// +optional
	Egress Egress `json:"egress,omitempty"`

	// allowHosts adds host or host:port entries the agent may reach with
	// egress ProviderOnly.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$`
	// +kubebuilder:validation:XValidation:rule="self.all(h, !h.matches(':(0+|6553[6-9]|655[4-9][0-9]|65[6-9][0-9][0-9]|6[6-9][0-9][0-9][0-9]|[7-9][0-9][0-9][0-9][0-9])$'))",message="network.allowHosts: a port must be 1 to 65535"
	// +kubebuilder:validation:XValidation:rule="self.all(h, size(h.split(':')[0]) <= 253 && h.split(':')[0].split('.').all(l, size(l) >= 1 && size(l) <= 63 && !l.startsWith('-') && !l.endsWith('-')))",message="network.allowHosts: each entry must be a host name (dot-separated labels of 1 to 63 characters, none starting or ending with '-', at most 253 in all) or an IPv4 address, with an optional :port"
	// +listType=set
	// +optional
	AllowHosts []string `json:"allowHosts,omitempty"`

	// providerTools says whether the model gateway forwards a request that
	// asks the provider to reach the network for the agent: hosted web
	// search and fetch (Anthropic's web_search and web_fetch tools, OpenAI's
	// web_search tool, Chat Completions' web_search_options and search
	// models, Gemini's
	// googleSearch and urlContext) and remote MCP servers (Anthropic's
	// mcp_servers, OpenAI's mcp tool). Refused (default): the provider would
	// fetch past egress ProviderOnly whatever the agent put in a URL or a
	// query; such a request gets 403 and the run a note. Allowed forwards
	// them (HarnessPolicy network.forbidProviderTools can refuse that).
	// +kubebuilder:default=Refused
	// +optional
	ProviderTools ProviderTools `json:"providerTools,omitempty"`
}

// IsolationSpec says what happens when the node cannot sandbox the agent.
type IsolationSpec struct {
	// policy is Required (default: no sandbox, no run) or AllowFallback
	// (a plain child process with the allow-listed environment, reported
	// loudly in status and Events).
	// +kubebuilder:default=Required
	// +optional
	Policy IsolationPolicy `json:"policy,omitempty"`
}

// Limits bound a run. The schema fills none of them: each limit a run leaves
// unset is its fixture's, else the default constant of this package
// (ResolveLimits), and status.limits records what the attempt ran under.
//
// +kubebuilder:validation:XValidation:rule="!has(self.probeSeconds) || !has(self.episodeSeconds) || self.probeSeconds <= self.episodeSeconds",message="limits.probeSeconds must not be longer than limits.episodeSeconds"
type Limits struct {
	// episodeSeconds bounds the agent's whole episode, from start to exit.
	// Unset: the fixture's, then DefaultEpisodeSeconds (360).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	EpisodeSeconds int32 `json:"episodeSeconds,omitempty"`

	// probeSeconds bounds each fixture check and each MCP call. Unset: the
	// fixture's, then DefaultProbeSeconds (120); never longer than the
	// resolved episodeSeconds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ProbeSeconds int32 `json:"probeSeconds,omitempty"`

	// memory bounds the memory of the agent's whole process tree. Unset: the
	// fixture's, then DefaultMemory (2Gi).
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('16Mi')) >= 0",message="limits.memory must be at least 16Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('256Gi')) <= 0",message="limits.memory must be at most 256Gi"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`

	// disk bounds the files of the run: the run dir (the workspace, the
	// agent's HOME, TMPDIR and the fixture's files) is a tmpfs of this size
	// that the node-agent mounts, so the kernel refuses writes beyond it
	// (ENOSPC) and the node's disk is never touched. A tmpfs lives in memory
	// and its files are charged to the memory cgroup of the process that
	// wrote them: the agent's files count against limits.memory as well, so
	// disk and memory share one budget (a run with memory 2Gi and disk 1Gi
	// may hold up to 1Gi of files, and its processes have what the files
	// leave of the 2Gi). An agent that fills it ends with reason
	// DiskLimitExceeded. Unset: the fixture's, then DefaultDisk (1Gi).
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="limits.disk must be at least 1Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('256Gi')) <= 0",message="limits.disk must be at most 256Gi"
	// +optional
	Disk *resource.Quantity `json:"disk,omitempty"`

	// maxDecisions bounds the agent's turns where its CLI has a turn limit,
	// and the MCP calls it may make. Unset: the fixture's, then
	// DefaultMaxDecisions (5000).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	MaxDecisions int32 `json:"maxDecisions,omitempty"`

	// maxProcesses bounds the processes (and threads) in the agent's tree;
	// the sandbox's own (bwrap's, sandbox-init's) come on top. Unset: the
	// fixture's, then DefaultMaxProcesses (1024).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MaxProcesses int32 `json:"maxProcesses,omitempty"`

	// maxOutputBytes bounds the agent's captured stdout and stderr; beyond it
	// the head and tail are kept and the dropped bytes counted. The node-agent
	// streams the output: a large value costs no memory up front. Unset: the
	// fixture's, then DefaultMaxOutputBytes (8 MiB).
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=1073741824
	// +optional
	MaxOutputBytes int64 `json:"maxOutputBytes,omitempty"`

	// maxArtifactBytes bounds each collected artifact; a larger one is
	// rejected with a reason in status. Unset: the fixture's, then
	// DefaultMaxArtifactBytes (256 KiB).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1073741824
	// +optional
	MaxArtifactBytes int64 `json:"maxArtifactBytes,omitempty"`
}

// RunPhase is where a run is in its life.
// +kubebuilder:validation:Enum=Pending;Scheduled;Running;Succeeded;Failed
type RunPhase string

// The phases of a run. Succeeded and Failed are terminal.
const (
	// RunPending: waiting for a node.
	RunPending RunPhase = "Pending"
	// RunScheduled: bound to a node (status.nodeName), not yet claimed by its node-agent.
	RunScheduled RunPhase = "Scheduled"
	// RunRunning: claimed by the node-agent, which is executing the attempt.
	RunRunning RunPhase = "Running"
	// RunSucceeded: the run finished and its evidence was written. The verdict
	// says whether the agent passed.
	RunSucceeded RunPhase = "Succeeded"
	// RunFailed: the run could not finish (infrastructure, timeout, cancel).
	RunFailed RunPhase = "Failed"
)

// Terminal reports whether the phase is final.
func (p RunPhase) Terminal() bool { return p == RunSucceeded || p == RunFailed }

// Verdict is the outcome of a finished run.
// +kubebuilder:validation:Enum=Pass;Fail;Error
type Verdict string

// The verdicts.
const (
	// VerdictPass: the agent exited, every check passed and, when the fixture
	// asks for MCP, the token was seen.
	VerdictPass Verdict = "Pass"
	// VerdictFail: the agent or a check failed (failure class Agent or Check).
	VerdictFail Verdict = "Fail"
	// VerdictError: the harness could not judge the agent (failure class
	// Infrastructure or Timeout).
	VerdictError Verdict = "Error"
)

// FailureClass says whose failure ended a run.
// +kubebuilder:validation:Enum=Infrastructure;Agent;Timeout;Check
type FailureClass string

// The failure classes. Only Infrastructure is retried.
const (
	FailureInfrastructure FailureClass = "Infrastructure"
	FailureAgent          FailureClass = "Agent"
	FailureTimeout        FailureClass = "Timeout"
	FailureCheck          FailureClass = "Check"
)

// HarnessRunStatus is what really happened.
type HarnessRunStatus struct {
	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Scheduled, Running, Succeeded or Failed.
	// +optional
	Phase RunPhase `json:"phase,omitempty"`

	// nodeName is the HarnessNode the run is bound to. It is a selectable
	// field, so a node-agent watches only its own runs.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// attempt counts the attempts, starting at 1 when the first is bound.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// handedBack counts the attempts a shutting-down node-agent handed back
	// (reason HandedBack): its pod was replaced or deleted before the
	// attempt could finish, so it stopped the agent, removed the run dir
	// and gave the run back to be scheduled again. The first
	// MaxHandBacks of them do not count against spec.retries; the retries
	// used are attempt - 1 - handedBack.
	// +kubebuilder:validation:Minimum=0
	// +optional
	HandedBack int32 `json:"handedBack,omitempty"`

	// scheduledTime is when the current attempt was bound to a node.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`

	// startTime is when the node-agent claimed the current attempt.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the run reached a terminal phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// verdict is Pass, Fail or Error, set with the terminal phase.
	// +optional
	Verdict Verdict `json:"verdict,omitempty"`

	// failureClass says whose failure it was: Infrastructure, Agent, Timeout
	// or Check.
	// +optional
	FailureClass FailureClass `json:"failureClass,omitempty"`

	// reason is a CamelCase word for why the run is in its phase (one of the
	// Reason constants of the API).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`

	// message explains the phase in plain words.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`

	// conditions: Scheduled, Sandboxed, MCPVerified, ChecksPassed, Ready,
	// Finished, Stalled, StopRequested, and the warnings IsolationFallback
	// and EgressUnrestricted.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// fixtureSource is where the attempt's fixture came from: a git
	// repository's URL and commit, or an OCI artifact's reference and
	// digest. evidence.fixtureDigest is the tree hash of its files.
	// +optional
	FixtureSource *FixtureSourceStatus `json:"fixtureSource,omitempty"`

	// environment is the image the run's sandbox root came from, when it
	// had one: the reference asked for and the digests really used.
	// +optional
	Environment *EnvironmentStatus `json:"environment,omitempty"`

	// sandbox is the isolation the agent really ran under.
	// +optional
	Sandbox *SandboxStatus `json:"sandbox,omitempty"`

	// agent is what the agent process did.
	// +optional
	Agent *AgentStatus `json:"agent,omitempty"`

	// mcp is what happened with the MCP token server.
	// +optional
	MCP *MCPStatus `json:"mcp,omitempty"`

	// network counts the agent's connections through the egress proxy.
	// +optional
	Network *NetworkStatus `json:"network,omitempty"`

	// checks are the fixture's checks and their results.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Checks []CheckResult `json:"checks,omitempty"`

	// artifacts are the files the fixture asked for, collected or rejected.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Artifacts []ArtifactResult `json:"artifacts,omitempty"`

	// evidence points at the run's hashed evidence.
	// +optional
	Evidence *EvidenceStatus `json:"evidence,omitempty"`

	// limits are the limits the attempt ran under, every one set: the run's,
	// else its fixture's, else the API's default (a default above a
	// HarnessPolicy ceiling gives way to the ceiling). Written by the
	// node-agent as soon as it has read the fixture, before the agent
	// starts, and again with the outcome.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// plannedChecks is how many checks the attempt's fixture names. They
	// run after the agent, each within limits.probeSeconds, and the
	// controller's deadline for the attempt allows for them. Written with
	// status.limits.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	PlannedChecks int32 `json:"plannedChecks,omitempty"`

	// limitSources says where each of status.limits came from, by its name
	// (episodeSeconds, probeSeconds, memory, disk, maxDecisions,
	// maxProcesses, maxOutputBytes, maxArtifactBytes): "run", "fixture",
	// "default", or "HarnessPolicy NAME limits.RULE" for a default lowered
	// to that policy's ceiling.
	// +kubebuilder:validation:MaxProperties=8
	// +optional
	LimitSources map[string]string `json:"limitSources,omitempty"`

	// limitCeilings are the strictest HarnessPolicy ceilings over the run's
	// namespace when the controller bound it. The node-agent judges the
	// limits it resolves from the fixture and the defaults against them: a
	// fixture's limit above a ceiling ends the run with PolicyViolation, a
	// default above one gives way to it.
	// +optional
	LimitCeilings *LimitCeilings `json:"limitCeilings,omitempty"`

	// chargedTokens are the tokens of status.usage the controller has
	// charged to the spend of the namespace's HarnessPolicies (their
	// status.spent), when the run ended. Until then the run's usage counts
	// toward the budgets as it is.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ChargedTokens int64 `json:"chargedTokens,omitempty"`

	// insideHosts are the names the namespace's HarnessPolicies allowed to
	// resolve to inside addresses (network.insideHosts; a name every policy
	// that lists insideHosts lists) when the controller bound the run. The
	// node-agent's egress proxy lets these names, among those the run may
	// reach at all, through to loopback, private, link-local, CGNAT,
	// cluster and metadata addresses; every other name is refused there.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	InsideHosts []string `json:"insideHosts,omitempty"`

	// usage is what the model provider served the attempt: requests, tokens
	// and the models that answered, and where the figures came from.
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`

	// reward is the run's reward: the mean of the rewards its checks
	// reported (a Harbor task has one verifier, so one), as a decimal
	// string; empty when no check reported one. It does not change the
	// verdict, which follows the checks' exit codes.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Reward string `json:"reward,omitempty"`

	// liveOutput is where the node-agent running the attempt serves the
	// agent's redacted output while it runs (`harnessfacts logs -f`). It is
	// set by the claim and removed when the attempt ends.
	// +optional
	LiveOutput *LiveOutput `json:"liveOutput,omitempty"`
}

// LiveOutput is a node-agent's HTTPS endpoint of one run's live output. It
// authenticates callers with the API server (TokenReview, or a client
// certificate of the cluster's client CA) and serves only those allowed get
// on harnessruns/log of the run (SubjectAccessReview).
type LiveOutput struct {
	// url is the https URL of the run's output on its node-agent.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https://`
	// +required
	URL string `json:"url"`

	// certificateSHA256 is the hex SHA-256 of the DER of the node-agent's
	// serving certificate, which a client pins: the node-agent makes a new
	// key at each start, signed by no CA a client could know.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +required
	CertificateSHA256 string `json:"certificateSHA256"`
}

// UsageSource says where a run's usage figures came from.
// +kubebuilder:validation:Enum=Gateway;AgentOutput;None
type UsageSource string

const (
	// UsageFromGateway means the figures were counted by the node-agent's model gateway from the
	// provider's own responses (streamed or not); the agent cannot change
	// these figures.
	UsageFromGateway UsageSource = "Gateway"
	// UsageFromAgentOutput means the figures were read from the CLI's own JSON output, for runs the
	// gateway does not serve (OAuth logins, the gateway off). The agent
	// wrote these figures; they are as trustworthy as the agent.
	UsageFromAgentOutput UsageSource = "AgentOutput"
	// UsageNone means nothing reported usage (exec, aider, antigravity without
	// the gateway).
	UsageNone UsageSource = "None"
)

// UsageStatus is what the model provider served one attempt. The one source
// of truth is the model gateway where it is on; the CLI's JSON output is the
// fallback. Receipts, suite summaries and HarnessPolicy spend rules read
// these figures.
type UsageStatus struct {
	// source says where the figures came from.
	// +required
	Source UsageSource `json:"source"`

	// modelRequested is the model the run asked for: spec.agent.model, else
	// the adapter's default; empty when neither names one.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	ModelRequested string `json:"modelRequested,omitempty"`

	// models are the models the provider said answered, in order of first
	// answer.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	Models []string `json:"models,omitempty"`

	// requests counts the model requests (gateway only).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Requests int64 `json:"requests,omitempty"`

	// uncountedResponses counts the provider's successful answers to model
	// requests from which the gateway read no token figures: a stream the
	// agent closed before its usage came, an answer that failed on the
	// provider's side, or a provider that does not report usage.
	// When it is not zero the token figures are a lower bound (gateway
	// only). Under HarnessPolicy gateway.maxTokensPerRun a whole answer
	// without figures ends the run instead.
	// +kubebuilder:validation:Minimum=0
	// +optional
	UncountedResponses int64 `json:"uncountedResponses,omitempty"`

	// inputTokens counts the prompt tokens the provider billed, cache reads
	// and writes excluded.
	// +kubebuilder:validation:Minimum=0
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`

	// outputTokens counts the completion tokens.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`

	// cacheReadTokens counts prompt tokens served from the provider's cache.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`

	// cacheWriteTokens counts prompt tokens written to the provider's cache.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`

	// estimatedCost is the cost the operator's price table gives these
	// figures, as a decimal and a currency ("0.0123 USD"); empty without a
	// price for the model.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	EstimatedCost string `json:"estimatedCost,omitempty"`
}

// TotalTokens is every token of the usage: input, output and cache.
func (u *UsageStatus) TotalTokens() int64 {
	if u == nil {
		return 0
	}
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// EnvironmentStatus is the environment image a run ran in.
type EnvironmentStatus struct {
	// image is the reference the run or its fixture named.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// digest is the image manifest's digest the node-agent pulled and
	// checked ("sha256:<hex>").
	// +kubebuilder:validation:MaxLength=71
	// +optional
	Digest string `json:"digest,omitempty"`

	// configDigest is the digest of the image's config (its entrypoint,
	// environment and history).
	// +kubebuilder:validation:MaxLength=71
	// +optional
	ConfigDigest string `json:"configDigest,omitempty"`

	// source says where the reference came from: Run or Fixture.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	Source string `json:"source,omitempty"`
}

// SandboxStatus is the isolation a run really used.
type SandboxStatus struct {
	// mode is the sandbox used: bwrap, appcontainer, or plain (no sandbox).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Mode string `json:"mode,omitempty"`

	// fallbackReason says why the run fell back to a plain child, when it did.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	FallbackReason string `json:"fallbackReason,omitempty"`

	// seccomp names the seccomp filter the agent ran under and the sha256
	// of its BPF program ("<name>@sha256:<hex>"); empty when none applied
	// (the plain mode; Windows has none). It is in the receipt too.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Seccomp string `json:"seccomp,omitempty"`
}

// AgentStatus is what the agent process did.
type AgentStatus struct {
	// adapter is the adapter that ran.
	// +optional
	Adapter Adapter `json:"adapter,omitempty"`

	// cliVersion is the version the CLI reported.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	CLIVersion string `json:"cliVersion,omitempty"`

	// cliDigest is the sha256 ("sha256:<hex>") of the command the sandbox
	// started (for a script, of the script); the receipt names its path.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	CLIDigest string `json:"cliDigest,omitempty"`

	// exitCode is the agent's exit code, when it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`

	// signal is the signal that ended the agent, when one did.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Signal string `json:"signal,omitempty"`

	// oomKilled is true when the memory limit ended the agent.
	// +optional
	OOMKilled bool `json:"oomKilled,omitempty"`

	// timedOut is true when limits.episodeSeconds ended the agent.
	// +optional
	TimedOut bool `json:"timedOut,omitempty"`

	// durationMilliseconds is the agent's wall time.
	// +optional
	DurationMilliseconds int64 `json:"durationMilliseconds,omitempty"`

	// outputBytes is how many bytes the agent wrote to stdout and stderr.
	// +optional
	OutputBytes int64 `json:"outputBytes,omitempty"`

	// truncated is true when output beyond limits.maxOutputBytes was dropped.
	// +optional
	Truncated bool `json:"truncated,omitempty"`

	// outputTail is the redacted end of the agent's output, a few KiB.
	// +kubebuilder:validation:MaxLength=8192
	// +optional
	OutputTail string `json:"outputTail,omitempty"`

	// turns counts the agent's turns, where its CLI reports them.
	// +optional
	Turns int32 `json:"turns,omitempty"`

	// toolCalls counts the agent's tool calls, where its CLI reports them.
	// +optional
	ToolCalls int32 `json:"toolCalls,omitempty"`

	// permissionDenials counts the tool uses the CLI refused.
	// +optional
	PermissionDenials int32 `json:"permissionDenials,omitempty"`

	// notes are what the adapter says about how it ran the CLI when that
	// differs from what a user would assume: a CLI with no MCP support, a
	// CLI's own sandbox turned off inside ours, a CLI never run by the
	// harness's tests.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=atomic
	// +optional
	Notes []string `json:"notes,omitempty"`
}

// MCPStatus is what happened with the MCP token server.
type MCPStatus struct {
	// transport is the transport used: None, HTTP or Stdio.
	// +optional
	Transport MCPTransport `json:"transport,omitempty"`

	// calls counts the get_token calls the server answered.
	// +optional
	Calls int32 `json:"calls,omitempty"`

	// tokenIssued is true when the server handed out the run's token.
	// +optional
	TokenIssued bool `json:"tokenIssued,omitempty"`

	// tokenSeen is true only when the token appears in the agent's output
	// or in a requested artifact.
	// +optional
	TokenSeen bool `json:"tokenSeen,omitempty"`

	// message explains the MCP outcome, for example that an adapter has no
	// MCP support.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// NetworkStatus counts the agent's connections through the egress proxy.
type NetworkStatus struct {
	// egress is the egress mode used.
	// +optional
	Egress Egress `json:"egress,omitempty"`

	// allowed counts the connections the proxy let through.
	// +optional
	Allowed int64 `json:"allowed,omitempty"`

	// denied counts the connections the proxy refused.
	// +optional
	Denied int64 `json:"denied,omitempty"`

	// deniedHosts are the first few hosts refused.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=261
	// +listType=atomic
	// +optional
	DeniedHosts []string `json:"deniedHosts,omitempty"`

	// providerToolsRefused counts the model requests the model gateway
	// refused because they asked the provider to reach the network for the
	// agent (spec.network.providerTools Refused).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ProviderToolsRefused int64 `json:"providerToolsRefused,omitempty"`
}

// CheckResult is one fixture check's outcome.
type CheckResult struct {
	// name is the check's name in the fixture.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Name string `json:"name"`

	// passed is true when the check exited 0 within limits.probeSeconds.
	// +required
	Passed bool `json:"passed"`

	// exitCode is the check's exit code, when it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`

	// message is the redacted end of the check's output, or why it did not run.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`

	// durationMilliseconds is the check's wall time.
	// +optional
	DurationMilliseconds int64 `json:"durationMilliseconds,omitempty"`

	// reward is the number the check wrote as Harbor's verifiers do
	// (reward.txt holding a number, or reward.json {"reward": <number>},
	// in /logs/verifier inside an environment image, else in
	// $HARNESSFACTS_REWARD_DIR), as a decimal string; empty when it wrote
	// none. rewardError says why a reward file was refused.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Reward string `json:"reward,omitempty"`

	// rewardError says why the check's reward file was not taken (not a
	// number, not finite, too large, not a regular file).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RewardError string `json:"rewardError,omitempty"`
}

// ArtifactResult is one requested artifact.
type ArtifactResult struct {
	// path is the artifact's path relative to the workspace.
	// +kubebuilder:validation:MaxLength=512
	// +required
	Path string `json:"path"`

	// size is the artifact's size in bytes, when collected.
	// +optional
	Size int64 `json:"size,omitempty"`

	// sha256 is the hex digest of the redacted artifact, when collected.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// rejected says why the artifact was not collected (missing, a link,
	// outside the workspace, too large, not a regular file).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Rejected string `json:"rejected,omitempty"`
}

// EvidenceStatus points at a run's hashed evidence.
type EvidenceStatus struct {
	// configMapName is the evidence ConfigMap, owned by the run.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// digest is the sha256 of the canonical receipt ("sha256:<hex>").
	// +kubebuilder:validation:MaxLength=71
	// +optional
	Digest string `json:"digest,omitempty"`

	// fixtureDigest is the tree hash of the fixture's files.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	FixtureDigest string `json:"fixtureDigest,omitempty"`

	// specDigest is the sha256 of the run's canonical spec.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	SpecDigest string `json:"specDigest,omitempty"`

	// signedBy is the ID of the node key that signed the receipt (a DSSE
	// envelope in the evidence, docs/evidence.md); empty when unsigned.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	SignedBy string `json:"signedBy,omitempty"`

	// storedRef is where the controller stored the evidence beyond the run
	// (an OCI artifact, repository@sha256:...), when the operator set an
	// evidence repository; `harnessfacts evidence verify` takes it.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	StoredRef string `json:"storedRef,omitempty"`
}

// HarnessRun is one coding agent run against one fixture, executed on a node
// inside an OS sandbox and recorded as hashed evidence.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hfrun,categories=harnessfacts
// +kubebuilder:selectablefield:JSONPath=`.status.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Adapter",type=string,JSONPath=`.spec.agent.adapter`
// +kubebuilder:printcolumn:name="Fixture",type=string,JSONPath=`.spec.fixture.configMapRef.name`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.status.verdict`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.status.attempt`,priority=1
// +kubebuilder:printcolumn:name="Evidence",type=string,JSONPath=`.status.evidence.digest`,priority=1
type HarnessRun struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what to run; immutable after creation except cancel and
	// ttlSecondsAfterFinished.
	// +required
	Spec HarnessRunSpec `json:"spec"`

	// status is what really happened, written by the controller and the
	// node-agent. Until its first write the API server shows
	// observedGeneration 0 (a default), so that kstatus sees a run no
	// controller has looked at yet as InProgress, not Current.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status HarnessRunStatus `json:"status,omitempty"`
}

// HarnessRunList is a list of HarnessRuns.
//
// +kubebuilder:object:root=true
type HarnessRunList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarnessRun `json:"items"`
}

// MaxHandBacks is how many hand-backs (status.handedBack) a run gets without
// using spec.retries: a node-agent that is shut down again and again (a
// liveness probe failing under load) must not send a run round for ever.
// A later hand-back uses a retry like any infrastructure failure.
const MaxHandBacks = 5
