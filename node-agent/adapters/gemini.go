package adapters

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Gemini runs Gemini CLI. Not built yet: Version fails, so no node offers it.
type Gemini struct{ cfg Config }

// NewGemini returns the Gemini CLI adapter.
func NewGemini(cfg Config) Gemini { return Gemini{cfg: cfg} }

// Name is the adapter's name.
func (Gemini) Name() harnessv1.Adapter { return harnessv1.AdapterGemini }

// Version fails until the adapter is built.
func (Gemini) Version(context.Context) (string, error) {
	return "", errors.New("the Gemini CLI adapter is not built yet")
}

// Prepare fails until the adapter is built.
func (Gemini) Prepare(Input) (*Invocation, error) {
	return nil, errors.New("the Gemini CLI adapter is not built yet")
}
