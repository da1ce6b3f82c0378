//go:build !linux

package cloexec

// Inherited does nothing here. On Windows a child gets only the handles it
// is given (Go passes an explicit handle list); the sandbox runs on Linux
// and Windows alone.
func Inherited() error { return nil }
