//go:build amd64 && !purego

#include "textflag.h"
#include "go_asm.h"

// The reduction constant x^57+x^62+x^63 in both qwords (see dot in polyval.go).
DATA reductionConst<>+0(SB)/8, $0xc200000000000000
DATA reductionConst<>+8(SB)/8, $0xc200000000000000
GLOBL reductionConst<>(SB), RODATA|NOPTR, $16

// Registers. X0: the running value (the rest of Z0 kept zero: it is XORed into a step's first
// four blocks). Z1-Z8: a step's blocks as they are loaded. Z9, Z10, Z11: the sums of the low,
// high and cross products. Z16-Z31: H^64..H^1, lane j of Z(16+i) being H^(64-4i-j). X14: the
// reduction constant. Z12, Z13, Z15: temporaries.
//
// A step of 64 blocks has one reduction, and the running value enters it last: the loop is bound
// by the chain from one step's running value to the next (a multiplication, the fold and the
// reduction), so the more blocks a step has, the fewer times a message waits on it. 64 blocks a
// step ran at nearly twice the speed of 32 on an Intel Xeon (BENCHMARKS.md, issue 27), and 64
// is as many powers as the registers hold.

// MULFIRST sets the sums to the four products of D's blocks and P's powers, lane by lane.
#define MULFIRST(D, P) \
	VPCLMULQDQ $0x00, P, D, Z9; \
	VPCLMULQDQ $0x11, P, D, Z10; \
	VPCLMULQDQ $0x01, P, D, Z12; \
	VPCLMULQDQ $0x10, P, D, Z13; \
	VPXORQ     Z13, Z12, Z11

// MULADD adds the four products of D's blocks and P's powers to the sums.
#define MULADD(D, P) \
	VPCLMULQDQ $0x00, P, D, Z12; \
	VPCLMULQDQ $0x11, P, D, Z13; \
	VPXORQ     Z12, Z9, Z9; \
	VPXORQ     Z13, Z10, Z10; \
	VPCLMULQDQ $0x01, P, D, Z12; \
	VPCLMULQDQ $0x10, P, D, Z13; \
	VPTERNLOGQ $0x96, Z13, Z12, Z11

// BLOCKS loads the four blocks at off(DX) into D and adds their products with P's powers.
#define BLOCKS(off, D, P) \
	VMOVDQU64 off(DX), D; \
	MULADD(D, P)

// CROSS adds the cross products' sum X11 to the low and high sums X9 and X10, half to each.
#define CROSS \
	VPSLLDQ $8, X11, X12; \
	VPSRLDQ $8, X11, X13; \
	VPXOR   X12, X9, X9; \
	VPXOR   X13, X10, X10

// MULBLOCK multiplies the block at (DX), added to the running value X0, by H: X10:X9 is the product,
// before its reduction.
#define MULBLOCK(H) \
	VMOVDQU    (DX), X1; \
	VPXOR      X1, X0, X1; \
	VPCLMULQDQ $0x00, H, X1, X9; \
	VPCLMULQDQ $0x11, H, X1, X10; \
	VPCLMULQDQ $0x01, H, X1, X11; \
	VPCLMULQDQ $0x10, H, X1, X12; \
	VPXOR      X12, X11, X11; \
	CROSS

// FOLD leaves in X0 the reduced sum of the products: the four lanes of each sum added (512 ->
// 256 -> 128 bits), the cross products split over low and high, then the Montgomery reduction
// (two divisions by x^64, as dot in polyval.go). Its last write is VEX: the rest of Z0 is
// cleared.
#define FOLD \
	VEXTRACTI64X4 $1, Z9, Y12; \
	VEXTRACTI64X4 $1, Z10, Y13; \
	VEXTRACTI64X4 $1, Z11, Y15; \
	VPXORQ        Y12, Y9, Y9; \
	VPXORQ        Y13, Y10, Y10; \
	VPXORQ        Y15, Y11, Y11; \
	VEXTRACTI128  $1, Y9, X12; \
	VPXOR         X12, X9, X9; \
	VEXTRACTI128  $1, Y10, X13; \
	VPXOR         X13, X10, X10; \
	VEXTRACTI128  $1, Y11, X12; \
	VPXOR         X12, X11, X11; \
	CROSS; \
	REDUCE

// REDUCE: X0 = X10:X9 * x^-128 mod P (X9 clobbered).
#define REDUCE \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPXOR      X12, X9, X9; \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPTERNLOGQ $0x96, X12, X10, X9; \
	VMOVDQA    X9, X0

// func updateAVX512(acc *elem, pow *[64]elem, p *byte, n int)
//
// n is a multiple of 64 (update hands the rest to updateAVX2).
TEXT ·updateAVX512(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ pow+8(FP), SI
	MOVQ p+16(FP), DX
	MOVQ n+24(FP), CX

	VMOVDQU (DI), X0 // a VEX load: the rest of Z0 is cleared
	VMOVDQU reductionConst<>(SB), X14

	CMPQ CX, $64
	JB   done

	VMOVDQU64 0(SI), Z16
	VMOVDQU64 64(SI), Z17
	VMOVDQU64 128(SI), Z18
	VMOVDQU64 192(SI), Z19
	VMOVDQU64 256(SI), Z20
	VMOVDQU64 320(SI), Z21
	VMOVDQU64 384(SI), Z22
	VMOVDQU64 448(SI), Z23
	VMOVDQU64 512(SI), Z24
	VMOVDQU64 576(SI), Z25
	VMOVDQU64 640(SI), Z26
	VMOVDQU64 704(SI), Z27
	VMOVDQU64 768(SI), Z28
	VMOVDQU64 832(SI), Z29
	VMOVDQU64 896(SI), Z30
	VMOVDQU64 960(SI), Z31

wide:
	// The blocks that do not wait for the running value go first.
	VMOVDQU64 64(DX), Z2
	MULFIRST(Z2, Z17)
	BLOCKS(128, Z3, Z18)
	BLOCKS(192, Z4, Z19)
	BLOCKS(256, Z5, Z20)
	BLOCKS(320, Z6, Z21)
	BLOCKS(384, Z7, Z22)
	BLOCKS(448, Z8, Z23)
	BLOCKS(512, Z2, Z24)
	BLOCKS(576, Z3, Z25)
	BLOCKS(640, Z4, Z26)
	BLOCKS(704, Z5, Z27)
	BLOCKS(768, Z6, Z28)
	BLOCKS(832, Z7, Z29)
	BLOCKS(896, Z8, Z30)
	BLOCKS(960, Z2, Z31)
	VMOVDQU64 0(DX), Z1
	VPXORQ    Z0, Z1, Z1
	MULADD(Z1, Z16)
	FOLD
	ADDQ $1024, DX
	SUBQ $64, CX
	CMPQ CX, $64
	JAE  wide

done:
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET

// The AVX2 implementation, for CPUs with VPCLMULQDQ on 256-bit registers but no AVX-512 (AMD Zen
// 3, Intel Alder Lake and later client cores): two blocks per instruction. With sixteen vector
// registers the powers cannot stay in registers, so a step walks them from memory (the Key's 2 KB,
// always in L1). Registers: X0 the running value (the rest of Y0 zero), Y1 a pair of blocks, Y2
// their powers, Y3 the powers' Karatsuba factors (Key.kpow), Y9, Y10, Y11 the sums of the low,
// high and cross products, Y12, Y13 temporaries, X14 the reduction constant.

// PAIR adds the products of D's two blocks and P's two powers to the sums, Karatsuba's way: the
// low and high products, and the product of each block's two halves XORed by the power's
// (K holds each power's halves XORed, in its low qword); the cross term is that product plus the
// low and high ones, which the fold adds once for the whole step. Three multiplications a block
// rather than four.
#define PAIR(D, P, K) \
	VPCLMULQDQ $0x00, P, D, Y12; \
	VPCLMULQDQ $0x11, P, D, Y13; \
	VPXOR      Y12, Y9, Y9; \
	VPXOR      Y13, Y10, Y10; \
	VPSHUFD    $0x4e, D, Y12; \
	VPXOR      D, Y12, Y12; \
	VPCLMULQDQ $0x00, K, Y12, Y13; \
	VPXOR      Y13, Y11, Y11

// REDUCE2 is REDUCE without AVX-512's VPTERNLOGQ: X0 = X10:X9 * x^-128 mod P (X9 clobbered).
#define REDUCE2 \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPXOR      X12, X9, X9; \
	VPCLMULQDQ $0x00, X14, X9, X12; \
	VPSHUFD    $0x4e, X9, X9; \
	VPXOR      X12, X10, X10; \
	VPXOR      X10, X9, X0

// func updateAVX2(acc *elem, k *Key, p *byte, n int)
//
// Steps of m = min(n rounded down to even, 64) blocks, each multiplied by H^m..H^1 (pow[64-m:]),
// the running value entering with the step's first pair, which goes last: the other pairs do not
// wait for the previous step's reduction. Then one block alone when n is odd.
TEXT ·updateAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ k+8(FP), SI
	ADDQ $Key_pow, SI
	MOVQ p+16(FP), DX
	MOVQ n+24(FP), CX

	VMOVDQU (DI), X0 // a VEX load: the rest of Y0 is cleared
	VMOVDQU reductionConst<>(SB), X14

step:
	CMPQ CX, $2
	JB   odd
	MOVQ CX, R8
	ANDQ $-2, R8
	CMPQ R8, $64
	JBE  sized
	MOVQ $64, R8

sized:
	// BX: the step's powers, H^R8 first.
	MOVQ $64, BX
	SUBQ R8, BX
	SHLQ $4, BX
	ADDQ SI, BX
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	LEAQ  32(DX), R10
	LEAQ  32(BX), R11
	MOVQ  R8, R9
	SHRQ  $1, R9
	DECQ  R9
	JZ    first

pairs:
	VMOVDQU (R10), Y1
	VMOVDQU (R11), Y2
	VMOVDQU (Key_kpow-Key_pow)(R11), Y3
	PAIR(Y1, Y2, Y3)
	ADDQ    $32, R10
	ADDQ    $32, R11
	DECQ    R9
	JNZ     pairs

first:
	VMOVDQU (DX), Y1
	VPXOR   Y0, Y1, Y1
	VMOVDQU (BX), Y2
	VMOVDQU (Key_kpow-Key_pow)(BX), Y3
	PAIR(Y1, Y2, Y3)
	VPXOR        Y9, Y11, Y11 // the cross terms: Karatsuba's middle product minus the others
	VPXOR        Y10, Y11, Y11
	VEXTRACTI128 $1, Y9, X12
	VPXOR        X12, X9, X9
	VEXTRACTI128 $1, Y10, X13
	VPXOR        X13, X10, X10
	VEXTRACTI128 $1, Y11, X12
	VPXOR        X12, X11, X11
	CROSS
	REDUCE2
	MOVQ R10, DX // just past the step's blocks
	SUBQ R8, CX
	JMP  step

odd:
	TESTQ CX, CX
	JZ    done2
	VMOVDQU 1008(SI), X2 // H
	MULBLOCK(X2)
	REDUCE2

done2:
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
