// Package runflags holds what the flags of every command that runs agents
// mean alike (the node-agent, `harnessfacts dev`, a local run): the host
// paths every sandbox masks and --hide adds to, and the CA bundles of
// --provider-ca-file and --fixture-source-ca-file. It imports no
// Kubernetes client, so that `harnessfacts run` does not link one.
package runflags

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// defaultHidden are the host directories no agent may see: node secrets
// (the service-account token, the node-agent's own state) and host homes.
// `--hide` adds to them; nothing removes them (the host's socket
// directories are masked by the sandbox itself, see sandbox.SocketDirs).
// Unexported, so that no caller can change the list every command masks.
var defaultHidden = []string{
	"/var/run/secrets", "/run/secrets", "/var/lib/kubelet", "/etc/kubernetes",
	"/root", "/home", "/var/lib/harnessfacts",
}

// DefaultHidden returns a copy of the directories every sandbox masks.
func DefaultHidden() []string { return slices.Clone(defaultHidden) }

// HideUsage is the help of --hide, the same for every command that has it.
var HideUsage = "more host directories or files masked in the sandbox, added to the defaults (" +
	strings.Join(defaultHidden, ", ") + "), which always stay masked"

// HiddenPaths is DefaultHidden() followed by the --hide paths, each once: an
// operator who adds one path must not unmask the defaults. A relative path
// is refused, since the sandbox would resolve it nowhere.
func HiddenPaths(extra []string) ([]string, error) {
	out := DefaultHidden()
	seen := map[string]bool{}
	for _, p := range out {
		seen[p] = true
	}
	for _, p := range extra {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("--hide %q: not an absolute path", p)
		}
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// LoadCAs reads a PEM CA bundle; "" is nil, the system's roots.
func LoadCAs(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
