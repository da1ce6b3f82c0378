package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Codex runs Codex CLI. Not built yet: Version fails, so no node offers it.
type Codex struct{ cfg Config }

// NewCodex returns the Codex CLI adapter.
func NewCodex(cfg Config) Codex { return Codex{cfg: cfg} }

// Name is the adapter's name.
func (Codex) Name() harnessv1.Adapter { return harnessv1.AdapterCodex }

// Version fails until the adapter is built.
func (Codex) Version(context.Context) (string, error) {
	return "", errors.New("the Codex CLI adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (Codex) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the Codex CLI adapter is not built yet")
}
