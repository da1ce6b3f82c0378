//go:build !linux

package sandbox

// preparedParts: no runner of this OS prepares (Preparer).
type preparedParts struct{}

func (*preparedParts) remove() error { return nil }
