//go:build !linux

package main

// modeHint has nothing to add outside Linux.
func modeHint() string { return "" }
