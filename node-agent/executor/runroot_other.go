//go:build !unix

package executor

// trustedRunRoot judges nothing off Unix: who may change a folder there is
// its access control list, which this check does not read (the Windows
// runner is not exercised here, docs/sandbox.md).
func trustedRunRoot(string) error { return nil }
