package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// OpenCode runs OpenCode. Not built yet: Version fails, so no node offers it.
type OpenCode struct{ cfg Config }

// NewOpenCode returns the OpenCode adapter.
func NewOpenCode(cfg Config) OpenCode { return OpenCode{cfg: cfg} }

// Name is the adapter's name.
func (OpenCode) Name() harnessv1.Adapter { return harnessv1.AdapterOpenCode }

// Version fails until the adapter is built.
func (OpenCode) Version(context.Context) (string, error) {
	return "", errors.New("the OpenCode adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (OpenCode) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the OpenCode adapter is not built yet")
}
