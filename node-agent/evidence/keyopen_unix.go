//go:build unix

package evidence

import "syscall"

// keyOpenFlags open a key file without waiting: opening a FIFO to read
// waits for a writer that may never come.
const keyOpenFlags = syscall.O_NONBLOCK
