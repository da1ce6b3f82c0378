//go:build !linux

package sandbox

// WritableCgroup2 is Linux's: other systems have no cgroups.
func WritableCgroup2(string) (string, bool, error) { return "", false, nil }
