// Package cloexec keeps the descriptors a process inherited from whatever
// started it out of the processes it starts.
//
// Go opens every descriptor of its own close-on-exec, but leaves the ones
// the process inherited as they came: a shell's, a CI runner's or a make
// jobserver's pipes, or a file a script opened without the flag, pass on to
// every child, and through bwrap (which hands on whatever it is given) into
// every sandbox. Inherited marks them close-on-exec. A child is still given
// the descriptors it is meant to have (exec.Cmd's Stdin, Stdout, Stderr
// and ExtraFiles), which are dup'ed into place without the flag.
package cloexec
