//go:build !linux

package sandbox

func removeTestCgroupParent() {}

func removeStaleTestCgroups() {}
