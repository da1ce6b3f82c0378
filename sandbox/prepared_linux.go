package sandbox

import "errors"

// preparedParts are a sandbox's parts made by Prepare, with what they were
// made for.
type preparedParts struct {
	sandboxParts
	key partsKey
}

// partsKey is what a sandbox's cgroup and network namespace are made
// for: a Run takes prepared ones only for the same. The cgroup holds the
// limits; the namespace is the runner's own or none, and a prepared one
// has no loopback listeners.
type partsKey struct {
	memory, tasks int64
	ownNetns      bool
	listens       bool
}

// partsFor is the limits spec's cgroup is made with, and its parts' key.
// bwrap's own process and its pid 1 (it stays, to reap) are in the cgroup,
// born there (v2's clone3, v1's forker), and so is a user-mode network's
// stack: they come on top, so that the command gets MaxProcesses. The
// command's network namespace is the runner's (newNetns), with its
// loopback listeners, unless the network is shared (they are then on the
// caller's loopback) or the caller is unprivileged (bwrap's --unshare-all
// makes it, with its loopback).
func (r *BwrapRunner) partsFor(spec Spec) (Limits, partsKey) {
	lim := spec.Limits.WithDefaults()
	lim.MaxProcesses += bwrapOwnTasks + bwrapInitTasks + slirpTasks(spec)
	return lim, partsKey{
		memory: lim.MemoryBytes, tasks: lim.MaxProcesses,
		ownNetns: spec.Network != NetworkShared && !r.userNetns,
		listens:  len(spec.Loopback) > 0,
	}
}

// Prepare makes spec's cgroup and network namespace ahead of its Run
// (Preparer). Not its /dev: a mount made while another sandbox's bwrap is
// in its setup can fail that setup (bubblewrap issue 650), and the caller
// prepares while its sandbox before runs.
func (r *BwrapRunner) Prepare(spec Spec) (*Prepared, error) {
	if len(spec.Loopback) > 0 {
		return nil, errors.New("sandbox: a network namespace with loopback listeners is not made ahead")
	}
	lim, key := r.partsFor(spec)
	var parts sandboxParts
	if err := parts.make(r.opts, lim, key.ownNetns, nil, false, "", 0, 0); err != nil {
		return nil, err
	}
	return &Prepared{parts: &preparedParts{sandboxParts: parts, key: key}}, nil
}

// take gives a Run the parts made for its key, nil where there are none
// (they stay for Close).
func (p *Prepared) take(key partsKey) *sandboxParts {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parts == nil || p.parts.key != key {
		return nil
	}
	parts := p.parts.sandboxParts
	p.parts = nil
	return &parts
}

func (p *preparedParts) remove() error {
	return p.sandboxParts.remove()
}
