//go:build !amd64

package sysprobe

// I386Available is false: only amd64 has the i386 ABI.
const I386Available = false

// I386 is not available on this architecture.
func I386(nr, a1, a2, a3 uint32) int32 { panic("sysprobe: no i386 ABI on this architecture") }
