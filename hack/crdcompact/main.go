// Command crdcompact writes each CRD of a folder of CRD YAML files
// (config/crd/bases) as compact JSON without descriptions into another
// (config/crd/compact), replacing what was there: the form local
// validation reads (internal/crdschema). `make manifests` runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/harnessfacts/harnessfacts/internal/crdcompact"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crdcompact BASES_DIR COMPACT_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "crdcompact:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	bases, err := filepath.Glob(filepath.Join(in, "*.yaml"))
	if err != nil {
		return err
	}
	if len(bases) == 0 {
		return fmt.Errorf("no CRD in %s", in)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(out, "*.json"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	for _, p := range bases {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		js, err := crdcompact.Compact(data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".yaml") + ".json"
		if err := os.WriteFile(filepath.Join(out, name), append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
