package sysprobe

// I386Available is true where a 64-bit process can make i386 system calls.
const I386Available = true

// I386 makes the i386 system call nr with three arguments through int 0x80
// and returns what the kernel put in eax, as a signed value (-errno on
// failure).
func I386(nr, a1, a2, a3 uint32) int32 {
	return int32(int80(uintptr(nr), uintptr(a1), uintptr(a2), uintptr(a3)))
}

func int80(nr, a1, a2, a3 uintptr) uintptr
