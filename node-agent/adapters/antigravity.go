package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Antigravity runs Antigravity. Not built yet: Version fails, so no node offers it.
type Antigravity struct{ cfg Config }

// NewAntigravity returns the Antigravity adapter.
func NewAntigravity(cfg Config) Antigravity { return Antigravity{cfg: cfg} }

// Name is the adapter's name.
func (Antigravity) Name() harnessv1.Adapter { return harnessv1.AdapterAntigravity }

// Version fails until the adapter is built.
func (Antigravity) Version(context.Context) (string, error) {
	return "", errors.New("the Antigravity adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (Antigravity) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the Antigravity adapter is not built yet")
}
