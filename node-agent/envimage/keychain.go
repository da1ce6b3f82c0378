package envimage

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// dockerConfig is a kubernetes.io/dockerconfigjson Secret's document.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`
	// IdentityToken is an OAuth refresh token.
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// keychain resolves a registry to the credentials of the first document
// that names it, as the kubelet does with a Pod's imagePullSecrets.
type keychain map[string]authn.AuthConfig

// DockerConfigKeychain builds a keychain from .dockerconfigjson documents
// (in the order the run lists its imagePullSecrets). An error never quotes
// a document: it holds credentials.
func DockerConfigKeychain(docs ...[]byte) (authn.Keychain, error) {
	kc := keychain{}
	for i, doc := range docs {
		var c dockerConfig
		if err := json.Unmarshal(doc, &c); err != nil {
			return nil, fmt.Errorf("image pull secret %d is not a .dockerconfigjson document", i+1)
		}
		for host, a := range c.Auths {
			h := registryHost(host)
			if _, ok := kc[h]; ok || h == "" {
				continue
			}
			cfg := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
			if a.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil {
					return nil, fmt.Errorf("image pull secret %d: the auth of %s is not base64", i+1, h)
				}
				user, pass, ok := strings.Cut(string(raw), ":")
				if !ok {
					return nil, errors.New("image pull secret: an auth without user:password")
				}
				cfg.Username, cfg.Password = user, pass
			}
			kc[h] = cfg
		}
	}
	return kc, nil
}

// Resolve returns the credentials for the resource's registry, or anonymous.
func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if cfg, ok := k[registryHost(r.RegistryStr())]; ok {
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}

// registryHost is the host[:port] of a docker config key, which may be a
// bare host or a URL ("https://host/v1/").
func registryHost(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	return strings.ToLower(s)
}
