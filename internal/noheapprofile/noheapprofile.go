// Package noheapprofile turns off the runtime's heap-profile sampling in
// the binaries that import it: the node-agent and harnessfacts-full.
//
// Go samples an allocation every 512 KiB by default and keeps, for ever,
// the stack of each one in a hash table of 1.4 MB that it maps at the first
// sample: the pages it touches, and those of the function table the stack
// walk reads, stay resident. The linker turns the sampling off by itself
// in a program that cannot read a heap profile; these two can only because
// controller-runtime's manager links net/http/pprof for an option no
// HarnessFacts command sets (PprofBindAddress), so nothing can ever read
// the profile they pay for. The two other binaries, harnessfacts and
// harnessfacts-sandbox-init, link no profile reader and need no import.
//
// Measured: a real node-agent's idle RSS (the one BenchmarkNodeAgentThroughput
// reads), the two builds alternated against one API server (load about 1):
// 40.4–41.0 against 40.8–41.7 MiB, medians 40.6 and 41.5; the anonymous part
// did not move, the binary's resident pages did (docs/performance.md).
//
// The init runs before the Kubernetes packages' inits, which allocate most
// of what a start allocates (the schemes): a program initializes the first
// package by import path whose imports are done, and k8s.io/... and
// sigs.k8s.io/... sort after this one. The few packages that sort before
// it may still be sampled.
package noheapprofile

import "runtime"

func init() { runtime.MemProfileRate = 0 }
