package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// ClaudeCode runs Claude Code. Not built yet: Version fails, so no node offers it.
type ClaudeCode struct{ cfg Config }

// NewClaudeCode returns the Claude Code adapter.
func NewClaudeCode(cfg Config) ClaudeCode { return ClaudeCode{cfg: cfg} }

// Name is the adapter's name.
func (ClaudeCode) Name() harnessv1.Adapter { return harnessv1.AdapterClaudeCode }

// Version fails until the adapter is built.
func (ClaudeCode) Version(context.Context) (string, error) {
	return "", errors.New("the Claude Code adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (ClaudeCode) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the Claude Code adapter is not built yet")
}
