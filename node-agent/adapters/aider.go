package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Aider runs Aider. Not built yet: Version fails, so no node offers it.
type Aider struct{ cfg Config }

// NewAider returns the Aider adapter.
func NewAider(cfg Config) Aider { return Aider{cfg: cfg} }

// Name is the adapter's name.
func (Aider) Name() harnessv1.Adapter { return harnessv1.AdapterAider }

// Version fails until the adapter is built.
func (Aider) Version(context.Context) (string, error) {
	return "", errors.New("the Aider adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (Aider) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the Aider adapter is not built yet")
}
