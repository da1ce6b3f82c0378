// Package crd embeds the generated CustomResourceDefinitions, so that a
// binary can validate objects exactly as the API server would without one
// (`harnessfacts run -f run.yaml`).
package crd

import "embed"

// Bases holds bases/*.yaml, the CRDs `make manifests` generates.
//
//go:embed bases/*.yaml
var Bases embed.FS
