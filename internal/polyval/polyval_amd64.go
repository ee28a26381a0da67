//go:build amd64 && !purego

package polyval

import "golang.org/x/sys/cpu"

// supported lists the implementations this CPU runs, fastest first; the first is the one in use.
var supported = func() []implementation {
	var s []implementation
	if !cpu.X86.HasAVX2 || !cpu.X86.HasPCLMULQDQ || !hasVPCLMULQDQ() {
		return append(s, generic)
	}
	// AVX-512 runs whole steps of 64 blocks and leaves the rest of a message to the AVX2 loop,
	// so it is offered only beside it (every CPU with AVX-512 VPCLMULQDQ has AVX2 too).
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ {
		s = append(s, avx512)
	}
	return append(s, avx2, generic)
}()

// hasVPCLMULQDQ reports CPUID.(EAX=7,ECX=0):ECX[10], VPCLMULQDQ: golang.org/x/sys/cpu reports it
// only together with AVX-512, and the AVX2 implementation needs it without (x/sys/cpu's HasAVX2
// already says the operating system saves the 256-bit registers).
func hasVPCLMULQDQ() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// updateAVX512 adds n blocks at p to *acc, n a multiple of 64: 64 blocks per step, 4 per
// instruction, with one reduction per step.
//
//go:noescape
func updateAVX512(acc *elem, pow *[64]elem, p *byte, n int)

// updateAVX2 adds n blocks at p to *acc: steps of up to 64 blocks, 2 per instruction, with one
// reduction per step, and the last block alone when n is odd.
//
//go:noescape
func updateAVX2(acc *elem, k *Key, p *byte, n int)

func (h *Hash) update(blocks []byte) {
	switch impl {
	case avx512:
		// Whole steps of 64 blocks four at a time; the rest (under 64 blocks: the end of a
		// message) two at a time, which the AVX2 loop does in one step as well.
		n := len(blocks) / BlockSize
		if w := n &^ 63; w > 0 {
			updateAVX512(&h.acc, &h.k.pow, &blocks[0], w)
		}
		if r := n & 63; r > 0 {
			updateAVX2(&h.acc, h.k, &blocks[(n&^63)*BlockSize], r)
		}
	case avx2:
		updateAVX2(&h.acc, h.k, &blocks[0], len(blocks)/BlockSize)
	default:
		h.updateGeneric(blocks)
	}
}
