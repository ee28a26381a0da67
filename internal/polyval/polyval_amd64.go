//go:build amd64 && !purego

package polyval

import "golang.org/x/sys/cpu"

// Accelerated reports whether this CPU runs the AVX-512 implementation: AVX512F, AVX512VL and
// VPCLMULQDQ on 512-bit registers, with the operating system saving their state.
var Accelerated = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ

// updateAVX512 adds n blocks at p to *acc: 64 blocks per step, 4 per instruction, with one
// reduction per step; then at most one step of 32 and one of 16, and the last n%16 blocks one
// at a time.
//
//go:noescape
func updateAVX512(acc *elem, pow *[64]elem, p *byte, n int)

func (h *Hash) update(blocks []byte) {
	if !Accelerated {
		h.updateGeneric(blocks)
		return
	}
	updateAVX512(&h.acc, &h.k.pow, &blocks[0], len(blocks)/BlockSize)
}
