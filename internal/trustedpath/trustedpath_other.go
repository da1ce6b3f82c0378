//go:build !unix

// Package trustedpath says whether another user of the machine could move
// or replace what is at a path.
package trustedpath

// Check judges nothing off Unix: who may change a folder there is its
// access control list, which this check does not read (the Windows
// runner is not exercised here, docs/sandbox.md).
func Check(string, string) error { return nil }
