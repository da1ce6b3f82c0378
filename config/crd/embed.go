// Package crd embeds the generated CustomResourceDefinitions, so that a
// binary can validate objects exactly as the API server would without one
// (`harnessfacts run -f run.yaml`).
package crd

import "embed"

// Bases holds bases/*.yaml, the CRDs `make manifests` generates.
//
//go:embed bases/*.yaml
var Bases embed.FS

// Compact holds compact/*.json: each CRD of bases as JSON without its
// descriptions (`make manifests` writes them with hack/crdcompact). What
// validation reads: parsing HarnessRun's 77 KB of YAML took a local run
// 4-8 ms before its first sandbox, its 23 KB of JSON 0.4 ms, and no
// description takes part in validation.
//
//go:embed compact/*.json
var Compact embed.FS
