package testenv

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Cores splits the CPUs this process may run on in two: the first half for
// the control plane (the kube-apiserver and its etcd), the rest for a node.
// ok is false with fewer than two.
func Cores() (all, control, node unix.CPUSet, ok bool, err error) {
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return all, control, node, false, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := range len(all) * 64 {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return all, control, node, false, nil
	}
	for i, c := range cpus {
		if i < len(cpus)/2 {
			control.Set(c)
		} else {
			node.Set(c)
		}
	}
	return all, control, node, true, nil
}

// Pin sets the CPUs every thread of process pid (0: this one) may run on.
// The threads it starts later, and the processes they fork, inherit it.
// It is a thread's setting, so every thread is set, including the ones
// that appear meanwhile (read again until no new one is found).
func Pin(pid int, set unix.CPUSet) error {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		added := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity of thread %d of %s: %w", tid, dir, err)
			}
			done[tid], added = true, true
		}
		if !added {
			return nil
		}
	}
}

// PinControlPlane pins the kube-apiserver and etcd c found.
func (c *CPUCounter) PinControlPlane(set unix.CPUSet) error {
	if c.apiserver == 0 || c.etcd == 0 {
		return errors.New("the kube-apiserver or its etcd was not found")
	}
	return errors.Join(Pin(c.apiserver, set), Pin(c.etcd, set))
}
