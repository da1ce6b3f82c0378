package runsource

import "k8s.io/apimachinery/pkg/types"

// Audience is the audience of the tokens node-agents present: a token the
// API server issued for another audience (the default service account token
// among them) is refused, and a token for this one is worth nothing to the
// API server itself.
const Audience = "harnessfacts.io/controller"

// The endpoints, both POST with a JSON body.
const (
	PathSecretKey = "/v1/secretkey"
	PathFixture   = "/v1/fixture"
	// PathSigningKey serves the operator's evidence signing key.
	PathSigningKey = "/v1/signingkey"
)

// SigningKeyDataKey is the key of the operator's signing key Secret that
// holds the PEM private key.
const SigningKeyDataKey = "evidence-key.pem"

// SigningKeyRequest asks for the operator's evidence signing key, to sign
// the run's receipt.
type SigningKeyRequest struct {
	Run RunRef `json:"run"`
}

// SigningKeyResponse is the operator's PEM private key; empty when the
// controller has none configured (the node's own key signs then).
type SigningKeyResponse struct {
	PEM []byte `json:"pem,omitempty"`
}

// RunRef names the attempt a request is for. UID and Attempt make a
// request for a deleted and recreated run, or for an attempt the controller
// has since taken back, fail instead of reaching the new one.
type RunRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Attempt   int32     `json:"attempt"`
}

// SecretKeyRequest asks for one key of a Secret the run selects.
type SecretKeyRequest struct {
	Run    RunRef `json:"run"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// SecretKeyResponse is the key's value.
type SecretKeyResponse struct {
	Value []byte `json:"value"`
}

// FixtureRequest asks for the run's fixture ConfigMap.
type FixtureRequest struct {
	Run RunRef `json:"run"`
}

// FixtureResponse is the fixture ConfigMap's content.
type FixtureResponse struct {
	Name       string            `json:"name"`
	Data       map[string]string `json:"data,omitempty"`
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
}

// errorResponse is the body of every refusal.
type errorResponse struct {
	Error string `json:"error"`
}

// maxRequestBytes bounds a request body: names and a UID.
const maxRequestBytes = 16 << 10

// maxResponseBytes bounds what a client reads: a ConfigMap or Secret is at
// most 1 MiB in the API server, base64 in JSON makes that 4/3 of it.
const maxResponseBytes = 4 << 20
