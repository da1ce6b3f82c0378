//go:build !unix

package evidence

// keyOpenFlags: no FIFO at a path to wait on here.
const keyOpenFlags = 0
