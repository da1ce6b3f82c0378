package redact

import (
	"fmt"
	"unsafe"
)

// step advances the six lanes' automata, lane i reading buf[base+i*stride+k]
// for k from j, until keywords end in one of them (it returns that k, the
// states in s with their flags) or until k reaches n (it returns n).
//
// This is the one place the package reads memory without Go's bounds
// checks. Each lane's next state waits on an add and a load, and the scan
// is fastest with as many lanes as the registers hold: with slices, the six
// lanes' pointers, lengths and the table's bounds did not fit, went through
// the stack at every byte, and the six lanes ran no faster than four.
// Reading through one pointer and a stride, the scan is about 1.35× faster
// (BenchmarkKeywordScan, docs/performance.md). It stays memory-safe
// because:
//   - the bytes read are checked to lie in buf before the loop (the last
//     lane's last byte is buf[base+5*stride+n-1]);
//   - every state is a row start of delta: states come from delta, whose
//     entries newKwDFA checks (checkRows) to be row starts, plus outFlag,
//     which is cleared here before a state is used and which stops the
//     loop as soon as a lane's state has it; a row has 256 entries, so a
//     row start plus a byte is in delta.
func (d *kwDFA) step(buf []byte, base, stride, j, n int, s *[lanes]uint32) int {
	if base < 0 || stride < 0 || j < 0 || j > n || base+(lanes-1)*stride+n > len(buf) {
		panic(fmt.Sprintf("redact: keyword scan out of its buffer (base %d, stride %d, %d..%d of %d)", base, stride, j, n, len(buf)))
	}
	if j == n {
		return n
	}
	k, s0, s1, s2, s3, s4, s5 := step6(unsafe.Pointer(unsafe.SliceData(d.delta)), unsafe.Pointer(&buf[base+j]), uintptr(stride), uintptr(n-j),
		s[0]&^outFlag, s[1]&^outFlag, s[2]&^outFlag, s[3]&^outFlag, s[4]&^outFlag, s[5]&^outFlag)
	*s = [lanes]uint32{s0, s1, s2, s3, s4, s5}
	return j + int(k)
}

// step6 is step's loop, in a function of its own with its state in
// arguments and results so that the compiler keeps all of it in registers.
func step6(dp, p unsafe.Pointer, stride, n uintptr, s0, s1, s2, s3, s4, s5 uint32) (uintptr, uint32, uint32, uint32, uint32, uint32, uint32) {
	var k uintptr
	for ; k < n; k++ {
		q := unsafe.Add(p, k)
		s0 = *(*uint32)(unsafe.Add(dp, uintptr(s0+uint32(*(*byte)(q)))*4))
		q = unsafe.Add(q, stride)
		s1 = *(*uint32)(unsafe.Add(dp, uintptr(s1+uint32(*(*byte)(q)))*4))
		q = unsafe.Add(q, stride)
		s2 = *(*uint32)(unsafe.Add(dp, uintptr(s2+uint32(*(*byte)(q)))*4))
		q = unsafe.Add(q, stride)
		s3 = *(*uint32)(unsafe.Add(dp, uintptr(s3+uint32(*(*byte)(q)))*4))
		q = unsafe.Add(q, stride)
		s4 = *(*uint32)(unsafe.Add(dp, uintptr(s4+uint32(*(*byte)(q)))*4))
		q = unsafe.Add(q, stride)
		s5 = *(*uint32)(unsafe.Add(dp, uintptr(s5+uint32(*(*byte)(q)))*4))
		if (s0|s1|s2|s3|s4|s5)&outFlag != 0 {
			break
		}
	}
	return k, s0, s1, s2, s3, s4, s5
}

// checkRows panics unless every entry of delta, its flag cleared, is the
// start of one of its rows: what step relies on to read the table without
// bounds checks.
func (d *kwDFA) checkRows() {
	if len(d.delta)%256 != 0 || len(d.delta) == 0 {
		panic("redact: keyword table is not whole rows")
	}
	for i, v := range d.delta {
		if v &^= outFlag; v%256 != 0 || int(v) >= len(d.delta) {
			panic(fmt.Sprintf("redact: keyword table entry %d (%d) is not a row start", i, v))
		}
	}
}
