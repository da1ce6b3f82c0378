#include "textflag.h"

// func int80(nr, a1, a2, a3 uintptr) uintptr
TEXT ·int80(SB),NOSPLIT,$0-40
	MOVQ nr+0(FP), AX
	MOVQ a1+8(FP), BX
	MOVQ a2+16(FP), CX
	MOVQ a3+24(FP), DX
	BYTE $0xCD; BYTE $0x80 // INT $0x80
	MOVQ AX, ret+32(FP)
	RET
