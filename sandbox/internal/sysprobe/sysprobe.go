// Package sysprobe makes system calls the way an attacker inside the
// sandbox would, for the sandbox's own tests: through the native ABI and,
// on amd64, through the i386 ABI (int 0x80) that a filter written for the
// native ABI alone would miss.
package sysprobe
