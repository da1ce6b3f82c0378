//go:build tools

// Package tools pins the OCI runtime a real node in the tests uses
// (hack/node-tools.sh builds it with cgo and libseccomp).
package tools

import (
	_ "github.com/opencontainers/runc"
)
