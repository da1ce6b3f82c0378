package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HarnessNodeSpec is what the node offers. The node-agent writes slots; an
// operator may set unschedulable.
type HarnessNodeSpec struct {
	// slots is how many runs the node executes at once.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	// +optional
	Slots int32 `json:"slots,omitempty"`

	// unschedulable stops new runs from being bound to the node; runs
	// already bound go on.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// AdapterInfo is one agent CLI found on a node.
type AdapterInfo struct {
	// name is the adapter.
	// +required
	Name Adapter `json:"name"`

	// version is the version the CLI reported.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Version string `json:"version,omitempty"`
}

// SandboxModeInfo is one sandbox mode and whether its preflight passed.
type SandboxModeInfo struct {
	// mode is bwrap, appcontainer or plain.
	// +kubebuilder:validation:MaxLength=64
	// +required
	Mode string `json:"mode"`

	// available is true when the preflight ran a trivial command with the
	// production flags.
	// +required
	Available bool `json:"available"`

	// message says why the mode is unavailable, in words an operator can act on.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// HarnessNodeStatus is the node-agent's report about its node.
type HarnessNodeStatus struct {
	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// os is the node's operating system (GOOS).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	OS string `json:"os,omitempty"`

	// arch is the node's architecture (GOARCH).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Arch string `json:"arch,omitempty"`

	// agentVersion is the node-agent's version.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// adapters are the agent CLIs found on the node, with their versions.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Adapters []AdapterInfo `json:"adapters,omitempty"`

	// sandboxModes are the sandbox modes and their preflight results.
	// +listType=map
	// +listMapKey=mode
	// +kubebuilder:validation:MaxItems=8
	// +optional
	SandboxModes []SandboxModeInfo `json:"sandboxModes,omitempty"`

	// labels are the labels of the node's Node, mirrored for
	// spec.nodeSelector of runs.
	// +kubebuilder:validation:MaxProperties=256
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// slotsInUse is how many runs the node-agent is executing.
	// +optional
	SlotsInUse int32 `json:"slotsInUse,omitempty"`

	// evidenceKey is the public part of the key the node-agent signs
	// receipts with. Whether it is trusted is the operator's decision
	// (docs/evidence.md), not this field's.
	// +optional
	EvidenceKey *EvidenceKey `json:"evidenceKey,omitempty"`

	// leaseNamespace is the namespace of the node-agent's heartbeat Lease,
	// which has the HarnessNode's name.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	LeaseNamespace string `json:"leaseNamespace,omitempty"`

	// conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EvidenceKey is a public key that verifies signed receipts.
type EvidenceKey struct {
	// keyID is "sha256:<hex>" of the key's DER SubjectPublicKeyInfo, the
	// keyid of its DSSE signatures.
	// +kubebuilder:validation:MaxLength=71
	// +required
	KeyID string `json:"keyID"`

	// algorithm is the signature scheme: ECDSA-P256-SHA256.
	// +kubebuilder:validation:MaxLength=32
	// +required
	Algorithm string `json:"algorithm"`

	// publicKey is the PEM "PUBLIC KEY" block.
	// +kubebuilder:validation:MaxLength=1024
	// +required
	PublicKey string `json:"publicKey"`
}

// HarnessNode is one node-agent's view of its node: the agent CLIs and
// sandbox modes it has, and its run slots. The node-agent creates it and
// heartbeats a Lease of the same name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=hfnode,categories=harnessfacts
// +kubebuilder:printcolumn:name="OS",type=string,JSONPath=`.status.os`
// +kubebuilder:printcolumn:name="Slots",type=integer,JSONPath=`.spec.slots`
// +kubebuilder:printcolumn:name="In Use",type=integer,JSONPath=`.status.slotsInUse`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HarnessNode struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the node offers.
	// +optional
	Spec HarnessNodeSpec `json:"spec,omitempty"`

	// status is the node-agent's report.
	// +optional
	Status HarnessNodeStatus `json:"status,omitempty"`
}

// HarnessNodeList is a list of HarnessNodes.
//
// +kubebuilder:object:root=true
type HarnessNodeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarnessNode `json:"items"`
}
