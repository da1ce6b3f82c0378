//go:build tools

// Package tools pins the container runtime a real node in the tests uses
// (hack/node-tools.sh builds it).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
